"""What a learner can do, declared as one object the host reads.

A learner class declares its :class:`Capabilities` as data, ``capabilities =
Capabilities(...)`` in its body, as scikit-learn's estimators return their ``Tags``: the
service, the trainer, the experiments, the evaluation, the simulator and the conformance
suite read ``learner.capabilities`` (or ``learner_cls.capabilities``) instead of a flag
scattered over the class.

Why a class attribute rather than scikit-learn's method: most readers hold a class, not a
learner (a configuration's arms are checked, and an experiment's pages sorted, before any
model exists), and a plugin declares in one line. A subclass starts from its parent's with
``dataclasses.replace(Parent.capabilities, ...)``, so that what it inherits and what it
changes are written in one place; a mixin that is not a learner does not declare one (its
object would hide the other parent's whole), it changes the learner's after the learner's
own is read (:class:`reranker.learners.policies.PlackettLucePolicy`). What depends on a
parameter or on the learned state (a chance of exploring that may be 0) cannot be a class's
fact: a learner says it by overriding
:meth:`reranker.learners.base.Learner.current_capabilities`, which ``learner.capabilities``
calls (on a class, ``capabilities`` stays the declared object).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


@dataclass(frozen=True)
class Capabilities:
    """The facts about a learner that the host acts on."""

    #: True when rankings are sampled (then ``RankResult.log_prob`` is set).
    stochastic: bool = False
    #: How the presented ranking follows from the scores, one of
    #: :data:`reranker.learners.base.POLICIES` or a name of the learner's own. Descriptive
    #: only: what a policy's probabilities are, only its learner says.
    policy: str = "argmax"
    #: False for a stochastic learner whose randomness includes more than coins its
    #: probabilities can sum over (DBGD's continuous exploration direction): it then logs no
    #: probability of its lists, and ``log_probability``, ``first_log_probabilities`` and
    #: ``marginals`` are not defined for it (``NotImplementedError``, None).
    exact_probabilities: bool = True
    #: True when the learner's state is kept per feature: it extends its model with zeros
    #: for features that appear later (``grow``) and carries it onto another feature set
    #: (``carry_over``).
    supports_growth: bool = False
    #: True when the learner learns each shown result's own reward (a click or none: the
    #: semibandit feedback), so that a page without clicks tells it that every shown result
    #: earned nothing; False for learners of preferences, which a page without clicks leaves
    #: as they were.
    per_item_feedback: bool = False
    #: True when the learner's feedback rule is defined on a list mixed from several
    #: learners' rankings (an interleaved experiment): it then learns from its own ranking
    #: and the clicks on the results it contributed (:mod:`reranker.models.arm_feedback`). A
    #: learner whose update needs the probability of the whole shown list under its own
    #: policy (an off-policy estimator) sets it False and learns only from the lists it
    #: showed alone.
    learns_from_mixed_lists: bool = True
    #: True for a reference ranking that never learns (the engine's order, a random one):
    #: its pages are shown as it ranks them, never refined by a query's own clicks
    #: (:mod:`reranker.learners.specialization`), so that it stays the floor it stands for.
    floor: bool = False
    #: Learned state arrays whose first dimension grows with what the learner has seen (a
    #: history of pages, a list of policies): a saved model's may differ from a new one's,
    #: and only their other dimensions are checked on load.
    variable_length_state: tuple[str, ...] = ()
    #: The objects :meth:`with_` made from this one, by change.
    _variants: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("stochastic", "exact_probabilities", "supports_growth",
                     "per_item_feedback", "learns_from_mixed_lists", "floor"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Capabilities.{name} must be True or False, got "
                                f"{getattr(self, name)!r}")
        if not isinstance(self.policy, str) or not self.policy:
            raise TypeError(f"Capabilities.policy must be a policy's name, got "
                            f"{self.policy!r}")
        if isinstance(self.variable_length_state, str) or not all(
                isinstance(key, str) for key in self.variable_length_state):
            raise TypeError(f"Capabilities.variable_length_state must be attribute names, got "
                            f"{self.variable_length_state!r}")
        # (a list would leave the object unhashable and open to change)
        object.__setattr__(self, "variable_length_state", tuple(self.variable_length_state))

    def with_(self, **changes: object) -> Capabilities:
        """``dataclasses.replace(self, **changes)``, made once per distinct change and kept
        with this object: for a :meth:`~reranker.learners.base.Learner.current_capabilities`
        that runs on every search."""
        key = tuple(changes.items())
        made = self._variants.get(key)
        if made is None:
            made = self._variants[key] = replace(self, **changes)
        return made


#: The names of the capabilities, which were class variables of a learner before (a
#: subclass that still sets one is read, with a DeprecationWarning).
NAMES = tuple(f.name for f in fields(Capabilities) if f.init)
