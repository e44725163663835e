"""``reranker demo``: watch the service learn from (simulated) clicks, end to end over HTTP."""

from __future__ import annotations

import json
import logging
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from reranker.commands.console import progress_bar
from reranker.core.config import load_config
from reranker.learners.base import LinearLearner
from reranker.offline.click_models import cascade_model
from reranker.offline.democorpus import generate_corpus
from reranker.offline.ranking_quality import ndcg

CLICK_MODEL = "navigational"
PAGE_SIZE = 10


class HttpClient:
    """A minimal JSON client for the service's API (the demo talks to it like a front end)."""

    def __init__(self, base_url: str, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


@dataclass
class Checkpoint:
    searches: int
    clicks: int
    model_version: int
    online_ndcg: float  # mean NDCG@10 of the pages shown since the previous checkpoint
    backend_ndcg: float  # the backend's own order on the same searches


#: Simulated users, each with a session of its own.
SIMULATED_USERS = 200


def demo_config(learner: str) -> dict:
    """The demo's configuration: the embedded backend over the generated corpus, a short
    feedback window because the simulated users click at once, and no limit on searches and
    clicks per minute, since they all come from this machine, faster than people (each has
    a session of its own, which the per-client budget of training counts by)."""
    return {
        "backend": {"type": "embedded", "path": "index", "fields": ["title", "body"],
                    "candidates": 100},
        "features": {"numeric_fields": ["popularity"], "normalization": "per_query_minmax"},
        "learner": {"name": learner, "params": {}, "depth": 10, "discount": "log2", "seed": 0},
        "store": {"path": "events.sqlite", "models": "models"},
        "trainer": {"enabled": True, "interval": 0.2, "feedback_window": 0.5},
        "server": {"host": "127.0.0.1", "port": 0, "threads": 4},
        # the simulated users all come from this machine, faster than people: no per-client
        # or per-address limits, nor a per-address bound on what training learns
        "security": {"searches_per_minute": 0, "clicks_per_minute": 0,
                     "address_searches_per_minute": 0, "address_clicks_per_minute": 0,
                     "address_budget": 0},
    }


def run_demo(workdir: Path, *, searches: int = 1500, seed: int = 7,
             learner: str = "preference_perceptron", console: Console | None = None,
             plot: bool = True) -> list[Checkpoint]:
    """Generate, index, serve, simulate, report. Returns the checkpoints it printed."""
    from reranker.api.app import BackgroundServer, create_app, start_trainer
    from reranker.core.plugins import backend_class, get_plugin_manager
    from reranker.serving.service import RerankerService

    console = console or Console()
    logging.getLogger("waitress").setLevel(logging.WARNING)
    console.print("[bold]reranker demo[/bold]: everything below is simulated. The corpus is "
                  "generated, and simulated users click through the real HTTP API following a "
                  f"cascade click model ({CLICK_MODEL}) on hidden relevance labels that the "
                  "service never sees.")

    workdir = Path(workdir)
    if workdir.exists() and any(workdir.iterdir()) and not (workdir / "config.yaml").exists():
        raise SystemExit(f"{workdir} exists and is not a demo folder; choose another --dir")
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in ("events.sqlite", "events.sqlite-wal", "events.sqlite-shm"):
        (workdir / stale).unlink(missing_ok=True)
    shutil.rmtree(workdir / "models", ignore_errors=True)

    corpus = generate_corpus(seed)
    with open(workdir / "docs.jsonl", "w", encoding="utf-8") as handle:
        for doc in corpus.documents:
            handle.write(json.dumps(doc) + "\n")
    (workdir / "config.yaml").write_text(yaml.safe_dump(demo_config(learner),
                                                        sort_keys=False), encoding="utf-8")
    config = load_config(workdir / "config.yaml")
    pm = get_plugin_manager()
    backend = backend_class(pm, config.backend.type)(config)
    report = backend.index_documents(((f"docs.jsonl, line {i + 1}", d)
                                      for i, d in enumerate(corpus.documents)), recreate=True)
    console.print(f"Generated and indexed {report.indexed} documents; {len(corpus.queries)} "
                  f"queries over {len(corpus.relevance)} topics (files in {workdir}).")

    service = RerankerService(config, pm).open()
    app = create_app(service=service)
    trainer_thread, stop_trainer = start_trainer(service, config.trainer.interval)
    server = BackgroundServer(app, threads=config.server.threads)
    client = HttpClient(server.url)
    console.print(f"Serving on {client.base_url}; learner: {learner}.")

    try:
        floor = _backend_order_ndcg(service, corpus)
        baseline = float(np.mean(list(floor.values())))
        checkpoints = _simulate_users(client, floor, corpus, searches, seed, console)
        # the final figure is the model's once it has learned from every page (a busy
        # machine's trainer may lag behind the simulated users): the background trainer
        # stops, and one last pass applies what is left
        stop_trainer.set()
        trainer_thread.join()
        service.trainer.run_once(close_all=True)
        final = _evaluate(client, corpus)
        final_version = service.model.version
        weights = _weights(service)
    finally:
        stop_trainer.set()
        server.stop()
        service.close()

    _report(console, checkpoints, baseline, final, final_version, weights)
    if plot:
        path = workdir / "learning_curve.png"
        _plot(path, checkpoints, baseline, final, learner)
        console.print(f"Plot: {path}")
    return checkpoints


def _backend_order_ndcg(service, corpus) -> dict[str, float]:
    """NDCG@10 of the backend's own (BM25) order for every query: the floor."""
    return {query: _ndcg(corpus, topic, service.backend.search(query, PAGE_SIZE).ids)
            for query, topic in corpus.queries}


def _ndcg(corpus, topic: str, ids: list[str]) -> float:
    return ndcg(np.array([corpus.label(topic, d) for d in ids]), corpus.labels(topic), PAGE_SIZE)


def _simulate_users(client: HttpClient, floor: dict[str, float], corpus, searches: int,
                    seed: int, console: Console) -> list[Checkpoint]:
    rng = np.random.default_rng(seed + 1)
    users = cascade_model(CLICK_MODEL, 3)
    every = max(1, searches // 15)
    checkpoints: list[Checkpoint] = []
    window: list[float] = []
    window_floor: list[float] = []
    clicks = 0
    version = 0
    with progress_bar("simulated users searching", searches, console) as advance:
        for t in range(1, searches + 1):
            query, topic = corpus.queries[rng.integers(len(corpus.queries))]
            session = f"simulated-{t % SIMULATED_USERS}"
            status, page = client.post("/search", {"query": query, "size": PAGE_SIZE,
                                                   "session_id": session})
            if status != 200:
                raise RuntimeError(f"/search answered {status}: {page}")
            ids = [hit["id"] for hit in page["hits"]]
            labels = np.array([corpus.label(topic, d) for d in ids])
            window.append(ndcg(labels, corpus.labels(topic), PAGE_SIZE))
            window_floor.append(floor[query])
            version = page["model_version"]
            for j in np.flatnonzero(users.clicks(labels, rng)):
                status, answer = client.post("/click", {"impression_id": page["impression_id"],
                                                        "doc_id": ids[j],
                                                        "session_id": session})
                if status != 202:
                    raise RuntimeError(f"/click answered {status}: {answer}")
                clicks += 1
            if t % every == 0 or t == searches:
                checkpoints.append(Checkpoint(t, clicks, version, float(np.mean(window)),
                                              float(np.mean(window_floor))))
                window, window_floor = [], []
            advance()
    return checkpoints


def _evaluate(client: HttpClient, corpus) -> float:
    """Mean NDCG@10 of the served ranking over every query (these searches get no clicks)."""
    scores = []
    for query, topic in corpus.queries:
        _, page = client.post("/search", {"query": query, "size": PAGE_SIZE})
        scores.append(_ndcg(corpus, topic, [hit["id"] for hit in page["hits"]]))
    return float(np.mean(scores))


def _weights(service) -> tuple[dict[str, float], dict[str, float]] | None:
    """The learned weight of every feature, and the starting ranking's (the engine's order
    and the query's click lift, at their current scale), for learners with one weight
    vector."""
    learner = service.model.learner
    if not isinstance(learner, LinearLearner):
        return None
    names = service.model.feature_names
    learned = dict(zip(names, (float(v) for v in learner.learned_weights()), strict=True))
    start = learner.weights() - learner.learned_weights()
    return learned, {name: float(v) for name, v in zip(names, start, strict=True) if v}


def _report(console: Console, checkpoints: list[Checkpoint], baseline: float, final: float,
            final_version: int,
            weights: tuple[dict[str, float], dict[str, float]] | None) -> None:
    table = Table(title="Ranking quality as clicks arrive (NDCG@10 of the pages users saw)")
    table.add_column("searches", justify="right")
    table.add_column("clicks", justify="right")
    table.add_column("model version", justify="right")
    table.add_column("NDCG@10", justify="right")
    table.add_column("BM25, same searches", justify="right")
    for c in checkpoints:
        table.add_row(str(c.searches), str(c.clicks), str(c.model_version), f"{c.online_ndcg:.3f}",
                      f"{c.backend_ndcg:.3f}")
    console.print(table)
    if weights:
        learned, start = weights
        console.print("Learned weights: " + ", ".join(f"{k} {v:+.2f}" for k, v in learned.items()))
        if start:
            console.print("Starting ranking (the engine's score and the query's click lift, "
                          "worth learner.params.prior_steps average steps): "
                          + ", ".join(f"{k} {v:+.2f}" for k, v in start.items()))
    change = final - baseline
    console.print(f"Backend order (BM25) NDCG@10 over all queries: [bold]{baseline:.3f}[/bold]")
    console.print(f"Learned ranking (model version {final_version}) NDCG@10 over all queries: "
                  f"[bold]{final:.3f}[/bold] ({change:+.3f}, {change / baseline:+.0%})"
                  if baseline > 0 else f"Learned ranking NDCG@10: {final:.3f}")


def _plot(path: Path, checkpoints: list[Checkpoint], baseline: float, final: float,
          learner: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    x = [c.searches for c in checkpoints]
    ax.plot(x, [c.online_ndcg for c in checkpoints], marker="o", label=f"{learner} (pages shown)")
    ax.plot(x, [c.backend_ndcg for c in checkpoints], color="grey", linestyle="--",
            label="backend order (BM25), same searches")
    ax.axhline(baseline, color="grey", linestyle=":", linewidth=1,
               label="backend order (BM25), all queries")
    ax.scatter([x[-1]], [final], color="tab:green", zorder=3, label="learned, all queries")
    ax.set_xlabel("simulated searches")
    ax.set_ylabel("NDCG@10")
    ax.set_ylim(0, 1.02)
    ax.set_title("reranker demo: ranking quality as simulated clicks arrive")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
