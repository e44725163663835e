"""What a learner can do is one declared object (Capabilities), read by the host; plugins
that still set the old class variables keep working for a release, with a warning that says
what to write instead."""

import warnings
from dataclasses import replace

import numpy as np
import pytest

from reranker.core.plugins import get_plugin_manager, learner_classes
from reranker.learners import Capabilities
from reranker.learners.base import Learner
from reranker.learners.capabilities import NAMES
from reranker.learners.policies import (
    PlackettLucePolicy,
    plackett_luce_marginals,
    plackett_luce_position_marginals,
)
from reranker.testing import check_declares_itself, check_probabilities
from tests.support.learners import Good, NoMarginals


class Scores(Good):
    """The conformance tests' correct learner, to build the old-style plugins on."""

    name = "scores_test"


def test_every_built_in_learner_declares_one_object_and_no_old_flag():
    for cls in learner_classes(get_plugin_manager(load_entrypoints=False)).values():
        assert isinstance(cls.capabilities, Capabilities), cls.name
        assert isinstance(cls().capabilities, Capabilities), cls.name
        for klass in cls.__mro__[:cls.__mro__.index(Learner)]:  # no old class flag above
            assert not set(vars(klass)) & set(NAMES) - {"capabilities"}, (cls.name, klass)


def test_a_subclass_starts_from_its_parents_capabilities():
    class Growing(Scores):
        name = "growing_test"
        capabilities = replace(Scores.capabilities, supports_growth=True)

    class Floor(Growing):
        name = "floor_test"
        capabilities = replace(Growing.capabilities, floor=True)

    class Inherits(Floor):
        name = "inherits_test"

    assert Inherits.capabilities == Floor.capabilities == Capabilities(supports_growth=True,
                                                                       floor=True)
    assert Inherits().capabilities is Inherits.capabilities


def test_the_plackett_luce_mixin_makes_the_learner_stochastic_over_what_it_declares():
    class Sampler(PlackettLucePolicy, Scores):
        name = "sampler_test"
        capabilities = replace(Scores.capabilities, supports_growth=True)

        def policy_scores(self, X):
            return X @ self.w_

    assert Sampler.capabilities == Capabilities(stochastic=True, policy="plackett_luce",
                                                supports_growth=True)


def test_a_capability_that_depends_on_a_parameter_is_worked_out_per_learner():
    from reranker_plugins.preference_perceptron import PreferencePerceptron

    assert PreferencePerceptron.capabilities.stochastic
    assert PreferencePerceptron(swap_probability=0.5).capabilities.stochastic
    fixed = PreferencePerceptron(swap_probability=0.0).capabilities
    assert not fixed.stochastic and fixed.policy == "argmax" and fixed.supports_growth
    assert fixed is PreferencePerceptron(swap_probability=0.0).capabilities  # made once


def test_old_class_variables_are_read_with_a_warning_that_says_what_to_write():
    with pytest.warns(DeprecationWarning, match=r"declare capabilities = dataclasses\.replace\("
                                                r"Scores\.capabilities, stochastic=True, "
                                                r"policy='plackett_luce'\)") as caught:
        class OldSampler(Scores):
            name = "old_sampler_test"
            stochastic = True
            policy = "plackett_luce"

            # (the conformance tests' sampler, which also says its marginals)
            _rank = NoMarginals._rank
            log_probability = NoMarginals.log_probability

            def marginals(self, X, n_shown):
                return plackett_luce_marginals(X @ self.w_, n_shown)

            def position_marginals(self, X, n_shown):
                return plackett_luce_position_marginals(X @ self.w_, n_shown)

    assert caught[0].filename == __file__  # it points at the class statement
    assert OldSampler.capabilities == Capabilities(stochastic=True, policy="plackett_luce")
    assert OldSampler.stochastic is True  # its own attribute, as its own code reads it
    # the host reads the object: the service logs the probabilities of what it shows
    result = OldSampler().rank(np.random.default_rng(0).random((5, 3)), 3,
                               np.random.default_rng(1))
    assert result.log_prob is not None and result.propensities is not None
    check_declares_itself(OldSampler)
    check_probabilities(OldSampler, samples=2000)


def test_an_old_flag_set_as_a_property_follows_the_learner():
    with pytest.warns(DeprecationWarning, match=r"defines stochastic as properties.*override "
                                                r"current_capabilities\(\)"):
        class Sometimes(Scores):
            name = "sometimes_test"
            params = Scores.params

            def __init__(self, feature_map=None, explore=False):
                super().__init__(feature_map)
                self.explore = explore

            @property
            def stochastic(self):
                return self.explore

    assert not Sometimes.capabilities.stochastic  # the class's: the base's default
    assert Sometimes(explore=True).capabilities.stochastic
    assert not Sometimes(explore=False).capabilities.stochastic


def test_old_flags_of_a_mixin_that_is_not_a_learner_are_read_too():
    class Grows:
        supports_growth = True
        variable_length_state = ["pages_"]

    with pytest.warns(DeprecationWarning, match="sets supports_growth, variable_length_state"):
        class Mixed(Grows, Scores):
            name = "mixed_test"

    assert Mixed.capabilities == Capabilities(supports_growth=True,
                                              variable_length_state=("pages_",))

    with warnings.catch_warnings():  # a subclass of it was told already: no second warning
        warnings.simplefilter("error")

        class Sub(Mixed):
            name = "sub_test"

    assert Sub.capabilities == Mixed.capabilities


def test_reading_a_capability_by_its_old_name_warns_and_answers():
    from reranker_plugins.pdgd import PDGD

    with pytest.warns(DeprecationWarning, match=r"read learner\.capabilities\.supports_growth"):
        assert PDGD.supports_growth is True
    with pytest.warns(DeprecationWarning, match=r"learner\.capabilities\.policy"):
        assert PDGD().policy == "plackett_luce"


def test_a_declaration_that_is_not_a_capabilities_object_is_refused():
    with pytest.raises(TypeError, match="capabilities must be a Capabilities"):
        class Wrong(Scores):
            capabilities = {"stochastic": True}
    with pytest.raises(TypeError, match="stochastic must be True or False"):
        Capabilities(stochastic=1)
    with pytest.raises(TypeError, match="policy must be a policy's name"):
        Capabilities(policy="")
    assert Capabilities(variable_length_state=["a_"]).variable_length_state == ("a_",)
