"""Live experiments: how many impressions until the better arm is significant?

Serves the demo's generated corpus (its own documents and hidden relevance labels) with an
experiment section, and plays simulated users against the real HTTP API: each search asks a
random query of the corpus, the users click following a cascade click model on the hidden
labels, and the service's trainer closes the impressions and trains every arm meanwhile. The
script reads ``GET /experiments`` after every ``--look`` searches and records, for each pair
of interest, the number of closed impressions at which the pair first became significant
(the always-valid test, so looking this often is allowed).

Scenarios (each run with its own seed):
  interleave  clear:  perceptron (learning from the clicks) vs random
  interleave  subtle: perceptron vs engine (the BM25 order it starts from)
  multileave  both pairs in one three-arm experiment (perceptron, engine, random)
  split       clear and subtle, as two two-arm bucket splits (sticky by user id)
  fixed:      two rankers that do not learn, of close quality (the candidates sorted by the
              title's BM25, or by popularity), interleaved, multileaved (with the engine as
              a third arm) and split: a difference that stays the same while it is measured

    python examples/live_experiments.py

Options: --runs 3, --max 3000 (searches per run), --look 25, --click-model navigational,
--seed 0, --out live-experiments, --scenarios (a subset, comma-separated, e.g.
interleave-clear,split-clear). Prints one table and writes summary.json in --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from reranker.api.app import BackgroundServer, create_app, start_trainer
from reranker.commands.console import progress_bar
from reranker.commands.demo import HttpClient, demo_config
from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.click_models import cascade_model
from reranker.offline.democorpus import generate_corpus
from reranker.serving.service import RerankerService

PERCEPTRON = {"name": "preference_perceptron", "params": {}}
ENGINE = {"name": "backend_order"}
RANDOM = {"name": "random"}
#: Two fixed rankers of close quality: the engine's candidates sorted by the title's BM25
#: alone, or by popularity (NDCG@10 0.87 and 0.76 on this corpus; the engine's order 0.53).
TITLE = {"name": "backend_order", "params": {"feature": "field_score:title"}}
POPULARITY = {"name": "backend_order", "params": {"feature": "field_value:popularity"}}

#: scenario -> (mode, arms, {pair of interest: (better, worse)})
SCENARIOS = {
    "interleave-clear": ("interleave", {"perceptron": PERCEPTRON, "random": RANDOM},
                         {"clear": ("perceptron", "random")}),
    "interleave-subtle": ("interleave", {"perceptron": PERCEPTRON, "engine": ENGINE},
                          {"subtle": ("perceptron", "engine")}),
    "multileave": ("multileave", {"perceptron": PERCEPTRON, "engine": ENGINE,
                                  "random": RANDOM},
                   {"clear": ("perceptron", "random"), "subtle": ("perceptron", "engine")}),
    "interleave-fixed": ("interleave", {"title": TITLE, "popularity": POPULARITY},
                         {"fixed": ("title", "popularity")}),
    "multileave-fixed": ("multileave", {"title": TITLE, "popularity": POPULARITY,
                                        "engine": ENGINE},
                         {"fixed": ("title", "popularity")}),
    "split-clear": ("split", {"perceptron": PERCEPTRON, "random": RANDOM},
                    {"clear": ("perceptron", "random")}),
    "split-subtle": ("split", {"perceptron": PERCEPTRON, "engine": ENGINE},
                     {"subtle": ("perceptron", "engine")}),
    "split-fixed": ("split", {"title": TITLE, "popularity": POPULARITY},
                    {"fixed": ("title", "popularity")}),
}


def run_scenario(name: str, folder: Path, corpus, seed: int, max_searches: int, look: int,
                 click_model: str, console: Console) -> dict:
    """One run: a fresh index, event store and models; returns, per pair of interest, the
    closed impressions at which it first became significant (None: not within the run) and
    whether the better arm won."""
    mode, arms, interest = SCENARIOS[name]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = demo_config("preference_perceptron")
    config["learner"]["seed"] = seed
    config["trainer"] = {"enabled": True, "interval": 0.1, "feedback_window": 0.2}
    config["experiment"] = {"mode": mode, "name": name, "arms": arms, "window": 100}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    settings = load_config(folder / "config.yaml")
    pm = get_plugin_manager()
    backend = backend_class(pm, "embedded")(settings)
    backend.index_documents(((str(i), d) for i, d in enumerate(corpus.documents)),
                            recreate=True)
    service = RerankerService(settings, pm).open()
    _, stop = start_trainer(service, 0.1)
    server = BackgroundServer(create_app(service=service), threads=4)
    client = HttpClient(server.url)
    rng = np.random.default_rng(seed)
    users = cascade_model(click_model, 3)
    found: dict[str, dict] = {}
    try:
        with progress_bar(f"{name}, seed {seed}", max_searches, console) as advance:
            for t in range(1, max_searches + 1):
                query, topic = corpus.queries[rng.integers(len(corpus.queries))]
                user = f"u{rng.integers(500)}"
                status, page = client.post("/search", {"query": query, "size": 10,
                                                       "user_id": user})
                if status != 200:
                    raise RuntimeError(f"/search answered {status}: {page}")
                ids = [hit["id"] for hit in page["hits"]]
                labels = np.array([corpus.label(topic, d) for d in ids])
                for j in np.flatnonzero(users.clicks(labels, rng)):
                    status, answer = client.post("/click", {
                        "impression_id": page["impression_id"], "doc_id": ids[j],
                        "user_id": user})
                    if status != 202:
                        raise RuntimeError(f"/click answered {status}: {answer}")
                advance()
                if t % look == 0:
                    _look(client, interest, found)
                    if len(found) == len(interest):
                        break
        time.sleep(0.5)
        final = _look(client, interest, found)
    finally:
        stop.set()
        server.stop()
        service.close()
    out = {}
    for label in interest:
        pair = final[label]
        out[label] = {**found.get(label, {"impressions": None, "correct": None}),
                      "searches": t, "final_win_rate": pair["win_rate"],
                      "final_impressions": final["_impressions"]}
    return out


def _look(client: HttpClient, interest: dict, found: dict) -> dict:
    """Read /experiments; note the pairs of interest that became significant."""
    with _urlopen(client.base_url + "/experiments") as status:
        pairs = {frozenset(p["arms"]): p for p in status["pairs"]}
    seen = {"_impressions": status["impressions"]}
    for label, (better, worse) in interest.items():
        pair = dict(pairs[frozenset((better, worse))])
        if pair["arms"][0] != better and pair["win_rate"] is not None:
            pair["win_rate"] = 1.0 - pair["win_rate"]
        seen[label] = pair
        if pair["significant"] and label not in found:
            found[label] = {"impressions": status["impressions"],
                            "correct": pair["winner"] == better}
    return seen


class _urlopen:
    def __init__(self, url: str):
        import urllib.request

        self.response = urllib.request.urlopen(url, timeout=30)

    def __enter__(self) -> dict:
        return json.loads(self.response.read())

    def __exit__(self, *exc) -> None:
        self.response.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max", type=int, default=3000, help="searches per run at most")
    parser.add_argument("--look", type=int, default=25, help="searches between two looks")
    parser.add_argument("--click-model", default="navigational")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="live-experiments")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    logging.getLogger("waitress").setLevel(logging.WARNING)
    console = Console(width=max(Console().width, 130))
    corpus = generate_corpus(7)
    out = Path(args.out)
    results: dict[str, list[dict]] = {}
    for name in args.scenarios.split(","):
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        results[name] = [run_scenario(name, out / f"{name}-{r}", corpus, args.seed + r,
                                      args.max, args.look, args.click_model, console)
                         for r in range(args.runs)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"settings": vars(args), "results": results},
                                                 indent=1))
    table = Table(title=f"Closed impressions until the better arm is significant "
                        f"({args.click_model} clicks, {args.runs} runs, at most "
                        f"{args.max} searches, a look every {args.look})")
    for column in ("mode", "pair", "median", "min - max", "significant in",
                   "right winner", "win rate at the end"):
        table.add_column(column)
    for name, runs in results.items():
        mode = SCENARIOS[name][0]
        for label, (better, worse) in SCENARIOS[name][2].items():
            hits = [run[label]["impressions"] for run in runs
                    if run[label]["impressions"] is not None]
            correct = sum(bool(run[label]["correct"]) for run in runs)
            rates = [run[label]["final_win_rate"] for run in runs
                     if run[label]["final_win_rate"] is not None]
            table.add_row(mode, f"{label}: {better} vs {worse}",
                          f"{np.median(hits):.0f}" if hits else "-",
                          f"{min(hits)} - {max(hits)}" if hits else "-",
                          f"{len(hits)}/{len(runs)}", f"{correct}/{len(hits)}",
                          f"{np.mean(rates):.3f}" if rates else "-")
    console.print(table)
    console.print(f"summary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
