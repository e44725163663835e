"""Comparing learners on live traffic (docs/algorithms.md, "Comparing learners").

The data flow of an experiment: several arms rank the same candidates
(:mod:`reranker.models.arms`), their rankings are mixed or one is chosen (:mod:`.interleaving`,
:mod:`.assignment`), clicks are credited to the arms that contributed the clicked results
(:mod:`.outcomes`), and the per-pair outcomes are tested sequentially (:mod:`.stats`); the
results are one report model with each pair's verdict in words (:mod:`.report_model`),
carried in the JSON and rendered as a terminal table, an HTML report and a live dashboard
(:mod:`.report`).
"""
