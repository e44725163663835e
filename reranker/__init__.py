"""reranker: online learning-to-rank from clicks, as a reranking layer over a search engine."""

import pluggy

__version__ = "0.1.0"

#: Marker for plugin hook implementations: ``@hookimpl def reranker_register_learners(): ...``
hookimpl = pluggy.HookimplMarker("reranker")

__all__ = ["__version__", "hookimpl"]
