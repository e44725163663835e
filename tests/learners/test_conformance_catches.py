"""The conformance checks fail on learners that break their contract."""

from dataclasses import replace

import numpy as np
import pytest

from reranker.learners.base import LinearLearner, RankResult, argmax_ranking
from reranker.learners.capabilities import Capabilities
from reranker.learners.policies import (
    gumbel_top_k,
    plackett_luce_log_prob,
    plackett_luce_prefix_log_prob,
)
from reranker.testing import (
    check_bad_features_are_refused,
    check_carries_over_to_another_feature_set,
    check_declares_itself,
    check_inputs_not_mutated,
    check_no_information_changes_nothing,
    check_probabilities,
    check_ranks_are_permutations,
    check_save_load_round_trip,
    check_seeded_runs_reproduce,
    check_starts_from_the_prior,
)
from tests.support.learners import Good, NoMarginals


class DropsOne(Good):
    name = "drops_one"

    def _rank(self, X, n_shown, rng):
        result = super()._rank(X, n_shown, rng)
        result.ranking = result.ranking[:-1] if len(result.ranking) > 1 else result.ranking
        return result


class Unseeded(Good):
    name = "unseeded"

    def _rank(self, X, n_shown, rng):
        s = X @ self.w_ + np.random.default_rng().random(X.shape[0])
        return RankResult(ranking=argmax_ranking(s), scores=s)


class ForgetsState(Good):
    name = "forgets_state"

    def set_state(self, state):
        super().set_state(state)
        self.w_ = np.zeros_like(self.w_)


class AcceptsNaN(Good):
    name = "accepts_nan"

    def check_features(self, X):
        if not self.initialized:
            self.initialize(X.shape[1])
        return np.asarray(X)


class MutatesInput(Good):
    name = "mutates_input"

    def _update(self, X, fb):
        X *= 1.0001
        return super()._update(X, fb)


class LearnsFromNothing(Good):
    name = "learns_from_nothing"

    def _update(self, X, fb):
        self.w_ = self.w_ + 0.01
        return True


class WrongProbabilities(Good):
    name = "wrong_probabilities"
    capabilities = Capabilities(stochastic=True, policy="plackett_luce")

    def _initialize(self, n):
        self.w_ = np.linspace(-1, 1, n)

    def _rank(self, X, n_shown, rng):
        s = X @ self.w_
        ranking = gumbel_top_k(2 * s, rng)  # samples with twice the scores it reports
        return RankResult(ranking=ranking, scores=s,
                          log_prob=plackett_luce_log_prob(s, ranking, n_shown))

    def log_probability(self, X, top):
        return plackett_luce_prefix_log_prob(X @ self.w_, top)


class BadDeclaration(Good):
    name = "bad declaration"


class HiddenCounter(Good):
    """Keeps a step counter outside its learned state: a restored model learns differently."""

    name = "hidden_counter"

    def _update(self, X, fb):
        if not fb.informative:
            return False
        self._t = getattr(self, "_t", 0) + 1
        self.w_ = self.w_ + self.feature_map.phi_difference(X, fb.improved, fb.ranking) / self._t
        return True


class KeepsASet(Good):
    """Keeps a set in its learned state, which a model file (JSON) cannot hold."""

    name = "keeps_a_set"

    def _initialize(self, n):
        super()._initialize(n)
        self.seen_ = set()


def test_state_a_model_file_cannot_hold_is_named_by_the_check_and_by_the_save():
    with pytest.raises(AssertionError, match="learned state 'seen_' cannot be saved"):
        check_save_load_round_trip(KeepsASet)
    from reranker.features.extraction import make_normalizer
    from reranker.learners.featuremap import FeatureMap
    from reranker.models.model import RankingModel

    learner = KeepsASet(feature_map=FeatureMap(depth=5))
    learner.initialize(3)
    model = RankingModel(learner=learner, normalizer=make_normalizer("per_query_minmax"),
                         feature_names=("a", "b", "c"))
    with pytest.raises(ValueError, match="'keeps_a_set': its learned state 'seen_'"):
        model.to_dict()


class LogsTheWholeRanking(WrongProbabilities):
    """Samples correctly but logs the probability of the whole ranking, not the top k."""

    name = "logs_the_whole_ranking"

    def _rank(self, X, n_shown, rng):
        s = X @ self.w_
        ranking = gumbel_top_k(s, rng)
        return RankResult(ranking=ranking, scores=s,
                          log_prob=plackett_luce_log_prob(s, ranking, len(ranking)))


class ForgetsWhenGrowing(Good):
    """Supports growth but resets its weights when it grows."""

    name = "forgets_when_growing"
    capabilities = Capabilities(supports_growth=True)

    def _grow(self, n):
        self.w_ = np.zeros(n)


class GrowsWell(Good):
    name = "grows_well"
    capabilities = Capabilities(supports_growth=True)

    def _grow(self, n):
        self.w_ = np.concatenate([self.w_, np.zeros(n - len(self.w_))])


class CarriesByPosition(GrowsWell):
    """Carries its weights over by column number, not by feature name."""

    name = "carries_by_position"

    def carry_over(self, old, source):
        self.w_[: min(len(old.w_), len(self.w_))] = old.w_[: len(self.w_)]


class ClaimsInexactButLogs(NoMarginals):
    """Says its probabilities are not exact, and logs one anyway."""

    name = "claims_inexact_but_logs"
    capabilities = replace(NoMarginals.capabilities, exact_probabilities=False)


class GoodLinear(LinearLearner):
    name = "good_linear"
    description = "a linear learner that starts from the prior"
    _initialize = Good._initialize
    _update = Good._update


class IgnoresPrior(GoodLinear):
    name = "ignores_prior"

    def weights(self):
        return self.learned_weights()


def test_the_prior_check_catches_a_learner_that_ignores_its_starting_ranking():
    check_starts_from_the_prior(GoodLinear)
    with pytest.raises(AssertionError, match="starting ranking"):
        check_starts_from_the_prior(IgnoresPrior)


@pytest.mark.parametrize("check, broken", [
    (check_declares_itself, BadDeclaration),
    (check_ranks_are_permutations, DropsOne),
    (check_seeded_runs_reproduce, Unseeded),
    (check_save_load_round_trip, ForgetsState),
    (check_bad_features_are_refused, AcceptsNaN),
    (check_inputs_not_mutated, MutatesInput),
    (check_no_information_changes_nothing, LearnsFromNothing),
    (check_probabilities, WrongProbabilities),
    (check_save_load_round_trip, HiddenCounter),
    (check_probabilities, LogsTheWholeRanking),
    (check_bad_features_are_refused, ForgetsWhenGrowing),
    (check_carries_over_to_another_feature_set, CarriesByPosition),
    (check_probabilities, NoMarginals),
    (check_probabilities, ClaimsInexactButLogs),
])
def test_check_catches_a_broken_learner(check, broken):
    # the correct learner passes
    check(GrowsWell if check is check_carries_over_to_another_feature_set else Good)
    with pytest.raises(AssertionError):
        check(broken)
