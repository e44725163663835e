"""Built-in learner plugins, one learner per module (installed as ``reranker_plugins``)."""
