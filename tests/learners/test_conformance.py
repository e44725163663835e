"""The shipped conformance suite, over every learner the plugin manager registers."""

import pytest

from reranker.core.plugins import get_plugin_manager, learner_classes
from reranker.testing import LEARNER_CHECKS, check_probabilities

LEARNERS = learner_classes(get_plugin_manager())


@pytest.mark.parametrize("check", LEARNER_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learner_conforms(name, check):
    check(LEARNERS[name])


COACTIVE = sorted(name for name, cls in LEARNERS.items()
                  if any(p.name == "swap_probability" for p in cls.params))


@pytest.mark.parametrize("check", [c for c in LEARNER_CHECKS if c is not check_probabilities],
                         ids=lambda c: c.__name__)  # nothing is sampled without perturbation
@pytest.mark.parametrize("name", COACTIVE)
def test_unperturbed_coactive_learner_conforms(name, check):
    """The perceptrons also conform as the papers' deterministic argmax learners."""
    check(LEARNERS[name], {"swap_probability": 0.0})


WITH_PRIOR = sorted(name for name, cls in LEARNERS.items()
                    if any(p.name == "prior_steps" for p in cls.params))


@pytest.mark.parametrize("check", LEARNER_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", WITH_PRIOR)
def test_learner_conforms_with_a_starting_ranking(name, check):
    """Every learner with the parameter conforms with a starting ranking too (the KLRank
    family starts without one by default)."""
    check(LEARNERS[name], {"prior_steps": 50.0})


WITH_ORACLE = sorted(name for name, cls in LEARNERS.items()
                     if any(p.name == "oracle" for p in cls.params))


@pytest.mark.parametrize("check", LEARNER_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", WITH_ORACLE)
def test_learner_conforms_with_the_trees_oracle(name, check):
    """The learners of a regression oracle conform with its tree ensembles too (their
    policies save as plain numbers and load back the same)."""
    check(LEARNERS[name], {"oracle": "trees", "trees": 5})


def test_every_paper_learner_is_registered():
    assert len(COACTIVE) == 6 and len(WITH_PRIOR) == 11
    assert set(LEARNERS) >= {
        "preference_perceptron", "batch_preference_perceptron",
        "exponentiated_preference_perceptron", "convex_preference_perceptron",
        "second_order_preference_perceptron", "noregret_klrank", "greedy_klrank",
        "online_ranknet", "random", "backend_order", "pdgd", "dbgd", "ranking_svm",
        "epsilon_greedy", "linucb", "eels", "vcee"}
    assert WITH_ORACLE == ["epsilon_greedy", "vcee"]
