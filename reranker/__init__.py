"""reranker: online learning-to-rank from clicks, as a reranking layer over a search engine."""

import pluggy

__version__ = "0.1.0"

#: Marker for plugin hook implementations: ``@hookimpl def reranker_register_learners(): ...``
hookimpl = pluggy.HookimplMarker("reranker")

__all__ = ["__version__", "hookimpl"]

# The modules' paths before the sub-packages (reranker.learner, reranker.service, ...) still
# import, with a DeprecationWarning, for one release.
from reranker import moved as _moved  # noqa: E402

_moved.install()
