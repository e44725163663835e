"""The learner conformance suite and the event store's (:data:`STORE_CHECKS`, by part of the
interface: :mod:`reranker.stores.conformance`), shipped so that third-party plugins can run
them too, and :class:`ServeProcess`, the real ``reranker serve`` in a subprocess for
integration tests and scripts.

Every check takes a learner class (and optional parameters) and raises ``AssertionError``
with a message naming the learner when it fails. Run them all with :func:`check_learner`,
or one by one from pytest::

    import pytest
    from reranker.testing import LEARNER_CHECKS

    @pytest.mark.parametrize("check", LEARNER_CHECKS, ids=lambda c: c.__name__)
    def test_my_learner(check):
        check(MyLearner)

The chi-square check of stochastic learners needs SciPy (``pip install reranker[test]``).

A store check takes a callable that opens another object on one store, empty when the check
starts (see :mod:`reranker.stores.conformance`); :func:`check_event_store` runs them all, each
on a new store.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reranker.learners.base import Learner
from reranker.learners.capabilities import Capabilities
from reranker.learners.featuremap import FeatureMap
from reranker.learners.feedback import Feedback, feedback_from_clicks
from reranker.models.model import check_saveable, state_for_file
from reranker.stores.conformance import STORE_CHECKS, OpenStore

N_FEATURES = 4


def _make(cls: type[Learner], params: dict[str, Any] | None, names: bool = True) -> Learner:
    learner = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    learner.validate_params()
    feature_names = [f"x{i}" for i in range(N_FEATURES)] if names else None
    learner.initialize(N_FEATURES, feature_names)
    return learner


def _requests(seed: int, count: int = 25) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random requests of varying size with random clicks (as candidate indices)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 12))
        X = rng.random((n, N_FEATURES))
        clicks = rng.choice(n, size=int(rng.integers(1, min(n, 3) + 1)), replace=False)
        out.append((X, clicks))
    return out


def _train(learner: Learner, seed: int, count: int = 25) -> list[np.ndarray]:
    """Rank and learn from random clicks; returns the rankings shown."""
    rng = np.random.default_rng(seed + 1)
    rankings = []
    for X, clicks in _requests(seed, count):
        result = learner.rank(X, 5, rng)
        rankings.append(result.ranking)
        learner.update(X, feedback_from_clicks(result.ranking, 5, clicks))
    return rankings


def _states_equal(a: Any, b: Any) -> bool:
    """Equal learned states (or values in them): arrays compared as arrays, also inside
    lists and dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_states_equal(a[key], b[key]) for key in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_states_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check_declares_itself(cls: type[Learner], params: dict | None = None) -> None:
    """A name, a one-line description, parameters with valid defaults; the constructor only
    stores parameters."""
    assert cls.name and cls.name.isidentifier(), f"{cls.__name__}: name must be an identifier"
    assert cls.description and "\n" not in cls.description, f"{cls.name}: one-line description"
    learner = cls(**(params or {}))
    assert isinstance(cls.capabilities, Capabilities) and isinstance(
        learner.capabilities, Capabilities), \
        f"{cls.name}: capabilities must be a reranker.learners.capabilities.Capabilities"
    defaults = {p.name: p.default for p in cls.params}
    assert learner.get_params() == {**defaults, **(params or {})}, \
        f"{cls.name}: get_params() must return the constructor's parameters"
    assert not learner.initialized, f"{cls.name}: the constructor must not create learned state"
    learner.validate_params()


def check_ranks_are_permutations(cls: type[Learner], params: dict | None = None) -> None:
    """Every ranking holds every candidate exactly once, with one score per candidate."""
    learner = _make(cls, params)
    rng = np.random.default_rng(0)
    try:  # Learner.rank refuses a result that is not one (the service then serves the
        # backend's order): the check says why
        for n in (1, 2, 3, 7, 40):
            X = rng.random((n, N_FEATURES))
            for n_shown in (1, min(n, 5), n):
                result = learner.rank(X, n_shown, rng)
                assert sorted(result.ranking.tolist()) == list(range(n)), \
                    f"{cls.name}: ranking of {n} candidates is not a permutation"
                assert np.asarray(result.scores).shape == (n,), f"{cls.name}: scores shape"
        _train(learner, 1)
        X = rng.random((9, N_FEATURES))
        assert sorted(learner.rank(X, 5, rng).ranking.tolist()) == list(range(9)), \
            f"{cls.name}: ranking after training is not a permutation"
    except ValueError as exc:
        raise AssertionError(str(exc)) from None


def check_seeded_runs_reproduce(cls: type[Learner], params: dict | None = None) -> None:
    """The same seed gives the same rankings and the same learned state."""
    a, b = _make(cls, params), _make(cls, params)
    rankings_a, rankings_b = _train(a, 7), _train(b, 7)
    assert all(np.array_equal(x, y) for x, y in zip(rankings_a, rankings_b, strict=True)), \
        f"{cls.name}: rankings differ between two runs with the same seed"
    assert _states_equal(a.get_state(), b.get_state()), \
        f"{cls.name}: learned state differs between two runs with the same seed"


def check_save_load_round_trip(cls: type[Learner], params: dict | None = None) -> None:
    """The learned state goes through a model file (JSON) and set_state on a fresh learner,
    which then holds the identical state, ranks and goes on learning like the original."""
    trained = _make(cls, params)
    _train(trained, 3)
    state = state_for_file(trained)
    for key, value in state.items():  # a model file holds it (JSON)
        try:
            check_saveable(cls.name, key, value)
        except ValueError as exc:
            raise AssertionError(str(exc)) from None
    state = json.loads(json.dumps(state))  # as a model file gives it back
    restored = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    restored.set_state(state)
    assert _states_equal(restored.get_state(), trained.get_state()), \
        f"{cls.name}: state changed through get_state/set_state"
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(11)
    for X, _ in _requests(5, 10):
        before, after = trained.rank(X, 5, rng_a), restored.rank(X, 5, rng_b)
        assert np.array_equal(before.ranking, after.ranking), \
            f"{cls.name}: a restored model ranks differently"
    # and it goes on learning exactly like the original (no state hidden from get_state)
    _train(trained, 17)
    _train(restored, 17)
    assert _states_equal(restored.get_state(), trained.get_state()), \
        f"{cls.name}: a restored model learns differently from the original"


def check_bad_features_are_refused(cls: type[Learner], params: dict | None = None) -> None:
    """NaN or infinite features, a wrong shape, or a changed feature count (for learners
    without growth) raise ``ValueError``; learners with growth extend their model."""
    learner = _make(cls, params)
    _train(learner, 2, 5)
    before = copy.deepcopy(learner.get_state())
    rng = np.random.default_rng(0)
    feedback = Feedback(ranking=np.arange(5), n_shown=3, clicked=np.array([4]))
    for bad in (np.nan, np.inf, -np.inf):
        X = rng.random((5, N_FEATURES))
        X[2, 1] = bad
        for method, args in (("rank", (X, 3, rng)), ("update", (X, feedback))):
            try:
                getattr(learner, method)(*args)
            except ValueError:
                continue
            raise AssertionError(f"{cls.name}: {method}() accepted features with {bad}")
    for shape in ((5,), (2, 3, N_FEATURES)):
        try:
            learner.rank(rng.random(shape), 3, rng)
        except ValueError:
            continue
        raise AssertionError(f"{cls.name}: features of shape {shape} were accepted")
    assert _states_equal(before, learner.get_state()), f"{cls.name}: refused input changed it"
    wider = rng.random((6, N_FEATURES + 2))
    if cls.capabilities.supports_growth:
        before_scores = learner.rank(wider[:, :N_FEATURES], 3, np.random.default_rng(1)).scores
        result = learner.rank(wider, 3, np.random.default_rng(1))
        assert learner.n_features_in_ == N_FEATURES + 2, f"{cls.name}: did not grow"
        # the old weights are kept and the new features start without influence
        assert np.allclose(result.scores, before_scores), \
            f"{cls.name}: growing changed how the old features score"
        learner.update(wider, feedback_from_clicks(result.ranking, 3, np.array([5])))
        assert sorted(learner.rank(wider, 3, rng).ranking.tolist()) == list(range(6))
    else:
        try:
            learner.rank(wider, 3, rng)
        except ValueError as exc:
            assert "feature" in str(exc), f"{cls.name}: unclear message {exc}"
        else:
            raise AssertionError(f"{cls.name}: a changed feature count was accepted")
    narrower = rng.random((6, N_FEATURES - 1))
    try:
        learner.rank(narrower, 3, rng)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{cls.name}: fewer features than trained on were accepted")


def check_inputs_not_mutated(cls: type[Learner], params: dict | None = None) -> None:
    """rank and update leave the features and the feedback as they were."""
    learner = _make(cls, params)
    rng = np.random.default_rng(4)
    for X, clicks in _requests(9, 10):
        X_copy = X.copy()
        result = learner.rank(X, 5, rng)
        feedback = feedback_from_clicks(result.ranking, 5, clicks)
        copies = {k: np.copy(getattr(feedback, k)) for k in ("ranking", "clicked", "improved",
                                                            "positions")}
        learner.update(X, feedback)
        assert np.array_equal(X, X_copy), f"{cls.name}: features were modified"
        for key, value in copies.items():
            assert np.array_equal(getattr(feedback, key), value), \
                f"{cls.name}: feedback.{key} was modified"


def check_no_information_changes_nothing(cls: type[Learner], params: dict | None = None) -> None:
    """Feedback without clicks and with ``ybar == y`` leaves the model as it was (for a
    learner of per-item rewards, which learns from a page without clicks too: a page that
    showed nothing)."""
    learner = _make(cls, params)
    _train(learner, 6, 10)
    rng = np.random.default_rng(8)
    shown = 0 if cls.capabilities.per_item_feedback else 5
    for X, _ in _requests(12, 10):
        before = copy.deepcopy(learner.get_state())
        ranking = learner.rank(X, 5, rng).ranking
        changed = learner.update(X, Feedback(ranking=ranking, n_shown=shown))
        assert not changed, f"{cls.name}: update() reported a change without information"
        assert _states_equal(before, learner.get_state()), \
            f"{cls.name}: feedback without information changed the model"


def check_probabilities(cls: type[Learner], params: dict | None = None,
                        samples: int = 6000) -> None:
    """The learner is the one place that knows its policy's probabilities: those of all
    ordered top-k lists sum to one, a stochastic learner logs the probability of the list it
    shows, and shown lists follow the probabilities (chi-square test at p > 0.001); the
    chance of each candidate to be first (:meth:`Learner.first_log_probabilities`) and to be
    shown (:meth:`Learner.marginals`, where the learner gives it) agree with the list
    probabilities, and with the frequencies observed."""
    learner = _make(cls, params)
    _train(learner, 13, 15)
    rng = np.random.default_rng(21)
    if not cls.capabilities.exact_probabilities:
        # Randomness no finite sum covers: it must log no probability it cannot give.
        assert learner.capabilities.stochastic, \
            f"{cls.name}: exact_probabilities=False is for policies that sample"
        for n, k in ((3, 1), (6, 2)):
            result = learner.rank(rng.random((n, N_FEATURES)), k, rng)
            assert result.log_prob is None and result.propensities is None, \
                f"{cls.name}: logged probabilities it says it cannot compute"
        return
    for n, k in ((3, 1), (4, 3), (6, 2), (5, 5)):
        X = rng.random((n, N_FEATURES))
        space = list(itertools.permutations(range(n), k))
        probs = np.array([math.exp(learner.log_probability(X, np.array(top)))
                          for top in space])
        assert abs(probs.sum() - 1.0) < 1e-9, \
            f"{cls.name}: probabilities of the top-{k} lists of {n} sum to {probs.sum()}"
        first = np.exp(learner.first_log_probabilities(X))
        expected_first = np.array([probs[[top[0] == i for top in space]].sum()
                                   for i in range(n)])
        assert np.allclose(first, expected_first, atol=1e-9), \
            f"{cls.name}: first_log_probabilities disagree with log_probability (n={n})"
        marginals = learner.marginals(X, k)
        assert marginals is not None or not learner.capabilities.stochastic, \
            f"{cls.name}: a stochastic learner must give each candidate's chance of being " \
            f"shown (marginals), which its impressions log"
        if marginals is not None:
            expected = np.array([probs[[i in top for top in space]].sum() for i in range(n)])
            assert np.allclose(marginals, expected, atol=1e-9), \
                f"{cls.name}: marginals of a top-{k} of {n} disagree with log_probability"
        at = learner.position_marginals(X, k)
        assert at is not None or not learner.capabilities.stochastic, \
            f"{cls.name}: a stochastic learner must give each candidate's chance of each " \
            f"shown position (position_marginals)"
        if at is not None:
            expected = np.array([[probs[[top[r] == i for top in space]].sum()
                                  for r in range(k)] for i in range(n)])
            assert at.shape == (n, k) and np.allclose(at, expected, atol=1e-9), \
                f"{cls.name}: position_marginals of a top-{k} of {n} disagree with " \
                f"log_probability"
        if not learner.capabilities.stochastic:
            continue
        for _ in range(20):  # what it logs is the probability of what it shows
            result = learner.rank(X, k, rng)
            assert result.log_prob is not None, f"{cls.name}: no log_prob logged"
            assert result.propensities is not None and np.allclose(
                result.propensities, learner.marginals(X, k), atol=1e-9), \
                f"{cls.name}: the logged propensities are not its marginals"
            assert result.shown_propensities is not None and np.allclose(
                result.shown_propensities, at[result.ranking[:k], np.arange(k)], atol=1e-9), \
                f"{cls.name}: the logged chances of the shown results at their positions " \
                f"are not its position_marginals"
            expected_lp = learner.log_probability(X, result.ranking[:k])
            assert abs(result.log_prob - expected_lp) < 1e-9, \
                f"{cls.name}: logged log-probability {result.log_prob} of a top-{k} of {n}, " \
                f"expected {expected_lp}"
    if not learner.capabilities.stochastic:
        return
    from scipy.stats import chisquare

    for n, k in ((4, 2), (5, 3)):  # an even and an odd page, one candidate left out or more
        X = rng.random((n, N_FEATURES))
        space = list(itertools.permutations(range(n), k))
        probs = np.array([math.exp(learner.log_probability(X, np.array(top)))
                          for top in space])
        counts: Counter = Counter()
        shown = np.zeros(n)
        for _ in range(samples):
            top = tuple(learner.rank(X, k, rng).ranking[:k].tolist())
            counts[top] += 1
            shown[list(top)] += 1
        observed = np.array([counts[top] for top in space])
        impossible = probs == 0  # a policy may give some lists no chance at all
        assert not observed[impossible].any(), \
            f"{cls.name}: showed a top-{k} of {n} of probability 0"
        p_value = chisquare(observed[~impossible], probs[~impossible] * samples).pvalue
        assert p_value > 1e-3, f"{cls.name}: shown top-{k} lists of {n} do not follow the " \
                               f"probabilities (chi-square p = {p_value:.2g})"
        marginals = learner.marginals(X, k)
        if marginals is not None:  # each candidate's share of pages, within 5 sigma
            sigma = np.sqrt(marginals * (1 - marginals) / samples) + 1e-9
            assert np.all(np.abs(shown / samples - marginals) <= 5 * sigma + 1e-3), \
                f"{cls.name}: how often each candidate is shown ({shown / samples}) does " \
                f"not follow its marginals ({marginals})"


def check_starts_from_the_prior(cls: type[Learner], params: dict | None = None) -> None:
    """A learner given a starting ranking (a prior weight vector, the engine's order) ranks
    by it before any update, and keeps it through get_state/set_state; a learner that takes
    no prior ignores it."""
    learner = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    learner.validate_params()
    prior = np.zeros(N_FEATURES)
    prior[0] = 1.0
    learner.initialize(N_FEATURES, [f"x{i}" for i in range(N_FEATURES)], prior)
    if not getattr(learner, "prior_steps", 0):  # no starting ranking asked for
        return
    assert np.array_equal(getattr(learner, "prior_", None), prior), \
        f"{cls.name}: prior_steps is set but the starting ranking was not kept in prior_"
    rng = np.random.default_rng(3)
    for n in (2, 5, 9):
        X = rng.random((n, N_FEATURES))
        scores = learner.rank(X, n, rng).scores
        assert np.array_equal(np.argsort(-scores, kind="stable"),
                              np.argsort(-X[:, 0], kind="stable")), \
            f"{cls.name}: the first model does not rank by its starting ranking"
    _train(learner, 5, 10)
    restored = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    restored.set_state(copy.deepcopy(learner.get_state()))
    X = rng.random((7, N_FEATURES))
    assert np.allclose(restored.rank(X, 7, np.random.default_rng(1)).scores,
                       learner.rank(X, 7, np.random.default_rng(1)).scores), \
        f"{cls.name}: a restored model lost its starting ranking"


def check_one_query_is_no_evidence(cls: type[Learner], params: dict | None = None) -> None:
    """A linear learner with a starting ranking whose learned weights sum its updates
    (:meth:`reranker.learners.base.LinearLearner.shrinks`) ranks with its learned weights
    shrunk to what the queries that taught them agree on (docs/algorithms.md, "Evidence
    across queries"): taught by one query only, it ranks every other by its starting
    ranking alone, and it counts the queries that taught it. Other learners are not shrunk
    (the trainer's query balance is every learner's)."""
    from reranker.learners.base import LinearLearner

    learner = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    learner.validate_params()
    prior = np.zeros(N_FEATURES)
    prior[0] = 1.0
    learner.initialize(N_FEATURES, [f"x{i}" for i in range(N_FEATURES)], prior)
    if not isinstance(learner, LinearLearner) or not learner.shrinks():
        return
    rng = np.random.default_rng(8)
    for X, clicks in _requests(8, 30):
        result = learner.rank(X, 5, rng)
        feedback = feedback_from_clicks(result.ranking, 5, clicks)
        feedback.query = "the one query"
        learner.update(X, feedback)
    assert learner.query_count() < 1.5, \
        f"{cls.name}: one query's pages were counted as {learner.query_count():.1f} queries"
    assert np.allclose(learner.weights(), learner.start_weights()), \
        (f"{cls.name}: taught by one query only, its learned weights count for every other "
         f"query; a learner whose learned weights are not the sum of its updates declares "
         f"sums_updates = False")
    taught = 1  # the queries whose pages changed the learned weights
    for i, (X, clicks) in enumerate(_requests(9, 60)):
        result = learner.rank(X, 5, rng)
        feedback = feedback_from_clicks(result.ranking, 5, clicks)
        feedback.query = f"query {i}"
        before = learner.learned_weights().copy()
        learner.update(X, feedback)
        taught += not np.array_equal(before, learner.learned_weights())
    assert abs(learner.query_count() - taught) < 2, \
        f"{cls.name}: {taught} queries taught it, counted as {learner.query_count():.1f}"


def check_carries_over_to_another_feature_set(cls: type[Learner], params: dict | None = None
                                               ) -> None:
    """A learner with ``capabilities.supports_growth`` carries its learned state onto a
    feature set that reorders, drops and adds features: it scores as before on the features
    both sets share (a dropped feature as if it were 0, a new one without influence), and
    keeps learning; a learner without it refuses with ``ValueError``."""
    learner = _make(cls, params)
    _train(learner, 6, 15)
    names = ["x3", "new", "x1", "x0"]  # x2 dropped, "new" added, the rest reordered
    source = [3, -1, 1, 0]
    carried = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    carried.validate_params()
    carried.initialize(len(names), names)
    if not cls.capabilities.supports_growth:
        try:
            carried.carry_over(learner, source)
        except ValueError:
            return
        raise AssertionError(f"{cls.name}: carry_over() without supports_growth did not "
                             f"refuse")
    carried.carry_over(learner, source)
    assert carried.n_features_in_ == len(names) and carried.feature_names_in_ == names, \
        f"{cls.name}: carry_over() changed the feature names it was initialised with"
    rng = np.random.default_rng(8)
    for n in (3, 8):
        X_old = rng.random((n, N_FEATURES))
        X_old[:, 2] = 0.0
        X_new = np.column_stack([X_old[:, 3], rng.random(n), X_old[:, 1], X_old[:, 0]])
        before = learner.rank(X_old, n, np.random.default_rng(2)).scores
        after = carried.rank(X_new, n, np.random.default_rng(2)).scores
        assert np.allclose(before, after), \
            f"{cls.name}: a carried model scores the shared features differently " \
            f"({after} against {before})"
    X = rng.random((6, len(names)))
    result = carried.rank(X, 3, rng)
    carried.update(X, feedback_from_clicks(result.ranking, 3, np.array([5])))
    assert sorted(carried.rank(X, 3, rng).ranking.tolist()) == list(range(6))
    restored = cls(feature_map=FeatureMap(depth=5), **(params or {}))
    restored.set_state(copy.deepcopy(carried.get_state()))


def check_learns_judgments(cls: type[Learner], params: dict | None = None) -> None:
    """A learner that learns from lists it did not draw
    (``capabilities.learns_from_mixed_lists``) learns the judgments of a specialised page
    (:func:`reranker.learners.specialization.judgment_feedback`: its own ranking, a
    randomised pair whose better result was clicked): taught again and again that the result
    it ranks just below another is the better one, it ends ranking it above. Floors and
    learners that learn only from their own lists are not taught them."""
    from reranker.learners.specialization import general_ranking, judgment_feedback

    if cls.capabilities.floor or not cls.capabilities.learns_from_mixed_lists:
        return
    learner = _make(cls, params)
    _train(learner, 5, 10)
    rng = np.random.default_rng(6)
    X = rng.random((6, N_FEATURES))
    order = general_ranking(learner.rank(X, 6, rng).scores).tolist()
    better, worse = order[2], order[1]
    for _ in range(200):
        order = general_ranking(learner.rank(X, 6, rng).scores).tolist()
        if order.index(better) < order.index(worse):
            break
        # the two side by side in the learner's own ranking, at the upper one's place
        upper = order.index(worse)
        ranking = [i for i in order if i not in (better, worse)]
        ranking[upper:upper] = [worse, better]
        learner.update(X, judgment_feedback(ranking, 6, 6, upper % 2, [(upper, True)]))
    order = general_ranking(learner.rank(X, 6, rng).scores).tolist()
    assert order.index(better) < order.index(worse), (
        f"{cls.name}: taught 200 times that candidate {better} is better than {worse} "
        f"(a judged randomised pair), it still ranks it below ({order}); a learner whose "
        f"rule cannot learn from a list it did not draw declares capabilities with "
        f"learns_from_mixed_lists=False")


LEARNER_CHECKS: list[Callable[..., None]] = [
    check_declares_itself,
    check_ranks_are_permutations,
    check_seeded_runs_reproduce,
    check_save_load_round_trip,
    check_bad_features_are_refused,
    check_inputs_not_mutated,
    check_no_information_changes_nothing,
    check_probabilities,
    check_starts_from_the_prior,
    check_carries_over_to_another_feature_set,
    check_learns_judgments,
    check_one_query_is_no_evidence,
]


def check_learner(cls: type[Learner], params: dict | None = None) -> None:
    """Run every check of the suite on ``cls``."""
    for check in LEARNER_CHECKS:
        check(cls, params)


def check_event_store(new_store: Callable[[], OpenStore], parts: tuple[type, ...] | None = None
                      ) -> None:
    """Run the store checks of ``parts`` (the parts of :mod:`reranker.stores.base`; every
    part by default), each on a new, empty store: ``new_store()`` returns the callable that
    opens objects on one."""
    for part, checks in STORE_CHECKS.items():
        if parts is None or part in parts:
            for check in checks:
                check(new_store())


# -- the real service in a subprocess ---------------------------------------------------------


def reranker_command() -> list[str]:
    """The installed ``reranker`` console script next to this Python, else ``python -m
    reranker.commands.main``."""
    script = Path(sys.executable).parent / "reranker"
    return [str(script)] if script.exists() else [sys.executable, "-m", "reranker.commands.main"]


def cli_env() -> dict[str, str]:
    """This environment without ``RERANKER_*`` overrides (the config file alone decides) and
    with unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RERANKER_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ServeProcess:
    """``reranker serve -c CONFIG --port 0`` in a subprocess (with ``env`` added to its
    environment); :attr:`url` is where it listens. Its log goes to ``serve.log`` beside the
    config (a pipe could fill up and block it)."""

    def __init__(self, config_path: str | os.PathLike, *extra: str,
                 env: dict[str, str] | None = None):
        config_path = Path(config_path)
        self.log_path = config_path.parent / "serve.log"
        self.log = open(self.log_path, "a", encoding="utf-8")
        self.proc = subprocess.Popen(reranker_command() + ["serve", "-c", str(config_path),
                                                           "--port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**cli_env(), **(env or {})})
        line = self.proc.stdout.readline()
        match = re.search(r"http://[\d.]+:(\d+)", line)
        if not match:
            self.kill()
            raise RuntimeError(f"reranker serve did not start: {line!r}\n"
                               f"{self.log_path.read_text(encoding='utf-8')}")
        self.url = f"http://127.0.0.1:{match.group(1)}"
        self.banner = line.strip()  # what it said it serves

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until ``/readyz`` answers 200: with ``--workers``, the serving line comes
        from the master process before any worker has opened its service, and requests
        wait in the listen queue until one has."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=timeout) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):  # not yet (503) or not listening
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"reranker serve is not ready after {timeout:g}s\n"
                                   f"{self.log_path.read_text(encoding='utf-8')}")
            time.sleep(0.1)

    def kill(self) -> None:
        """Stop it at once (SIGKILL), as a crash would."""
        self.proc.kill()
        self.proc.wait(timeout=30)
        self._close_pipes()

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM), or kill it after 30 seconds."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()
