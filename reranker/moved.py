"""The import paths of modules that moved into the sub-packages, kept for one release:
importing one warns (:class:`DeprecationWarning`) and gives the module at its new path, the
same module object, so ``isinstance`` checks and registrations agree."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: Old path -> new path.
MOVED = {
    "reranker.app": "reranker.api.app",
    "reranker.arms": "reranker.models.arms",
    "reranker.cli": "reranker.commands.main",
    "reranker.click_models": "reranker.offline.click_models",
    "reranker.clicks": "reranker.features.clicks",
    "reranker.clicks.counts": "reranker.features.clicks.counts",
    "reranker.clicks.position_bias": "reranker.features.clicks.position_bias",
    "reranker.coactive": "reranker.learners.coactive",
    "reranker.config": "reranker.core.config",
    "reranker.console": "reranker.commands.console",
    "reranker.demo": "reranker.commands.demo",
    "reranker.democorpus": "reranker.offline.democorpus",
    "reranker.documents": "reranker.backends.documents",
    "reranker.errors": "reranker.core.errors",
    "reranker.events": "reranker.stores.events",
    "reranker.explain": "reranker.serving.explain",
    "reranker.featuremap": "reranker.learners.featuremap",
    "reranker.feedback": "reranker.learners.feedback",
    "reranker.forks": "reranker.core.forks",
    "reranker.gper": "reranker.learners.gper",
    "reranker.hookspecs": "reranker.core.hookspecs",
    "reranker.jsontext": "reranker.core.jsontext",
    "reranker.kernels": "reranker.features.kernels",
    "reranker.learner": "reranker.learners.base",
    "reranker.letor": "reranker.offline.letor",
    "reranker.limits": "reranker.serving.limits",
    "reranker.metrics": "reranker.offline.ranking_quality",
    "reranker.offline.metrics": "reranker.offline.ranking_quality",
    "reranker.model": "reranker.models.model",
    "reranker.model_store": "reranker.models.store",
    "reranker.monitoring": "reranker.serving.monitoring",
    "reranker.openapi": "reranker.api.openapi",
    "reranker.oracles": "reranker.learners.oracles",
    "reranker.plotting": "reranker.offline.plotting",
    "reranker.plugins": "reranker.core.plugins",
    "reranker.policies": "reranker.learners.policies",
    "reranker.probes": "reranker.serving.probes",
    "reranker.semibandit_simulation": "reranker.offline.semibandit",
    "reranker.service": "reranker.serving.service",
    "reranker.simulate_command": "reranker.commands.simulate",
    "reranker.simulation": "reranker.offline.simulation",
    "reranker.specialization": "reranker.learners.specialization",
    "reranker.trainer": "reranker.models.trainer",
    "reranker.trust": "reranker.serving.trust",
    "reranker.users": "reranker.offline.users",
    "reranker.validation": "reranker.api.validation",
    "reranker.wsgi": "reranker.api.wsgi",
}


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.new}; the old path goes in the next "
                      f"release", DeprecationWarning, stacklevel=_caller_level())
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:
        return None


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED`."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedLoader(new))


def _caller_level() -> int:
    """The stack level of the first frame outside the import machinery (the import)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen")
                                 or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1
    return level


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
