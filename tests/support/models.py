"""A small model factory and a trained model of it, for the model store tests."""

import numpy as np
from reranker_plugins.preference_perceptron import PreferencePerceptron

from reranker.learners.featuremap import FeatureMap
from reranker.models.model import ModelFactory


def factory(names=("a", "b", "c"), normalization="per_query_minmax", depth=10):
    return ModelFactory(PreferencePerceptron, {}, FeatureMap(depth), list(names), normalization)


def trained_model(version=1):
    model = factory().new()  # no engine feature among a, b, c: no starting ranking
    model.learner.w_ = np.array([0.1, -2.5, 1e-17])
    model.version = version
    model.progress.cursor = 7
    return model
