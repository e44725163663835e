"""What a search's candidates become before a learner sees them: the feature matrix
(:mod:`.extraction`: engine scores, field scores, numeric fields, normalisation), its compiled
loops (:mod:`.kernels`), and what the click log says (:mod:`.clicks`: click counts and lifts, the
position-bias estimate). Imports the backends below it."""

from reranker.features.extraction import (
    ENGINE_SCORE,
    NORMALIZERS,
    FeatureSpec,
    Normalizer,
    PerQueryMinMax,
    ZScore,
    engine_prior,
    engine_scores,
    feature_columns,
    make_normalizer,
    raw_columns,
)

__all__ = ["ENGINE_SCORE", "NORMALIZERS", "FeatureSpec", "Normalizer", "PerQueryMinMax", "ZScore",
           "engine_prior", "engine_scores", "feature_columns", "make_normalizer", "raw_columns"]
