"""Answering searches and clicks: the service (search, ranking, experiment mixing, feedback,
health), trust (signed ids, API keys, limits), Prometheus metrics, health probes and deadlines, and
explanations. Imports models, experiments and below; knows nothing of HTTP."""
