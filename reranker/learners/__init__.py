"""The learners' shared parts: the interface a learner plugin implements (:mod:`.base`) and
the capabilities it declares (:mod:`.capabilities`), the
joint feature map (:mod:`.featuremap`), clicks turned into feedback (:mod:`.feedback`), the
ranking policies, the coactive (Preference Perceptron) and GPER cores, the regression oracles
and the per-query specialisation. The learners themselves are plugins (``reranker_plugins``).
Imports features and below."""

from reranker.learners.base import (
    POLICIES,
    PRIOR_STEPS,
    GradientStepLearner,
    Learner,
    LinearLearner,
    Param,
    RankResult,
    argmax_ranking,
    learning_rate_params,
    prior_steps_param,
)
from reranker.learners.capabilities import Capabilities

__all__ = ["POLICIES", "PRIOR_STEPS", "Capabilities", "GradientStepLearner", "Learner",
           "LinearLearner", "Param", "RankResult", "argmax_ranking", "learning_rate_params",
           "prior_steps_param"]
