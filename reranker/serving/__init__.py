"""Answering searches and feedback: the service (`service`) composes one part per job:
ranking an arm's page (`ranking`), mixing an experiment's arms (`mixing`), request checks
(`checks`), trust (signed ids, API keys, limits: `trust`, `limits`), clicks and rewards
(`feedback`), health (`health`, `probes`), Prometheus metrics (`monitoring`), explanations
(`explain`) and one query's rankings side by side (`compare`). Imports models, experiments
and below; knows nothing of HTTP."""
