"""Judgments from clicks against the truth: the position-corrected judgments of `reranker
judgments` and COEC's (clicks over expected clicks, the implicit judgments of OpenSearch's
Search Relevance Workbench), from the same simulated clicks, each compared with the hidden
labels by Kendall's tau per query.

The demo corpus is indexed and served by the default learner, untrained (the engine's order
with its randomised pairs, as a new site serves). Simulated users search its queries and
click by the position-based model: rank k is looked at with chance (1/k)^eta, and a result
looked at is clicked with chance 0.05, 0.5 or 0.95 by its hidden label. After the searches,
both estimators judge every (query, document) shown on --min-impressions pages or more, and
each is scored by the mean over queries of Kendall's tau-b between its estimates and the
true click chances. Runs with --runs seeds for each eta and prints the mean and spread.

Run: python examples/judgments_vs_coec.py [--searches 3000] [--runs 3] [--eta 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import yaml

from reranker.commands.demo import demo_config
from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.evaluation.judgments import judgments, kendall_tau_by_query, tally_pages
from reranker.offline.click_models import PositionBasedClickModel
from reranker.offline.democorpus import generate_corpus
from reranker.offline.users import users_click_through
from reranker.serving.service import RerankerService

ATTRACTION = (0.05, 0.5, 0.95)


def one_run(folder: Path, corpus, searches: int, eta: float, seed: int,
            min_impressions: int) -> tuple[float, float, int]:
    """Kendall's tau of the debiased judgments and of COEC's, and how many judgments."""
    settings = demo_config("preference_perceptron")
    settings["trainer"]["enabled"] = False
    (folder / "config.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    config = load_config(folder / "config.yaml")
    pm = get_plugin_manager()
    backend_class(pm, config.backend.type)(config).index_documents(
        ((str(i), doc) for i, doc in enumerate(corpus.documents)), recreate=True)
    service = RerankerService(config, pm).open()
    users = PositionBasedClickModel(ATTRACTION, eta)
    try:
        shown = users_click_through(service, corpus, searches, users,
                                    np.random.default_rng(seed))
        service.events.close_impressions(float("inf"))
        tally = tally_pages(service.events)
        bias = service.events.position_bias(0.0)
    finally:
        service.close()
    ours = list(judgments(tally, bias, min_impressions=min_impressions))
    coec = list(judgments(tally, bias, estimator="coec", min_impressions=min_impressions))
    truth = {cell: ATTRACTION[label] for cell, label in shown.items()}
    return kendall_tau_by_query(ours, truth), kendall_tau_by_query(coec, truth), len(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--eta", type=float, nargs="+", default=[1.0, 2.0],
                        help="how steeply users look less at lower ranks")
    parser.add_argument("--min-impressions", type=int, default=10)
    args = parser.parse_args()
    corpus = generate_corpus(7)
    print(f"{args.searches} searches per run, {args.runs} runs per eta; Kendall's tau-b per "
          f"query against the true click chances, mean over queries")
    print(f"{'eta':>5}{'judgments':>11}{'debiased':>17}{'COEC':>17}{'difference':>17}")
    for eta in args.eta:
        rows = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="judgments-") as name:
                rows.append(one_run(Path(name), corpus, args.searches, eta, run,
                                    args.min_impressions))
        ours, coec, counts = zip(*rows, strict=True)
        diff = [a - b for a, b in zip(ours, coec, strict=True)]

        def spread(values):
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.mean(values):.3f} ± {sd:.3f}"

        print(f"{eta:>5g}{statistics.mean(counts):>11.0f}{spread(ours):>17}{spread(coec):>17}"
              f"{spread(diff):>17}   (per run: "
              + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(ours, coec, strict=True)) + ")")


if __name__ == "__main__":
    main()
