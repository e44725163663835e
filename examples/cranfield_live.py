"""Cranfield, live: simulated users teach `reranker serve` through its real HTTP API.

Indexes the Cranfield 1400 collection (title and abstract, graded qrels) with
`reranker index`, starts `reranker serve` (the default learner, the Preference Perceptron,
with the click features) and plays simulated users against it: each search asks a query
drawn at random from a training part of the queries, and the users click the page following
the `informational` cascade click model on the qrels' gain labels (5 - code for codes 1-4).
The rest of the queries (those with a relevant document) are held out and never asked
while the users search.

Per run it measures
  - the NDCG@10 (gain 2^g - 1) of every served page and of the backend's own order (BM25
    over title and abstract, the index opened read-only in this process) on the same query,
    in windows of 100 searches;
  - the held-out queries' NDCG@10 as a new deployment serves them (before: the same
    configuration on an empty event store, in this process, so that the live service never
    sees them), as the live service serves them after the last clicks have been trained on
    (after, through the API, nobody clicks), and in the backend's order.

It prints one table (a column per run, and the mean and standard deviation over runs), writes
`summary.json` and `learning_curve.png` in --out (one folder per run, `run-<r>`, holds the
config, the documents' index, the event store, the models and the server's log).

    python examples/cranfield_live.py --data ../shared/data/cranfield

Options: --runs 3, --searches 3000, --seed 0 (run r uses seed + r for the split, the query
draws, the clicks and learner.seed), --train-share 0.67, --out cranfield-live.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml
from cranfield import Cranfield, Query, load_cranfield
from rich.console import Console
from rich.table import Table

from reranker.commands.console import progress_bar
from reranker.commands.demo import HttpClient
from reranker.core.config import load_config
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.offline.click_models import cascade_model
from reranker.offline.ranking_quality import ndcg
from reranker.testing import ServeProcess, cli_env, reranker_command

K = 10
WINDOW = 100
LAST = 500
CLICK_MODEL = "informational"
GRADES = 5
FEEDBACK_WINDOW = 1.0
INTERVAL = 0.5


def run_config(seed: int) -> dict:
    return {
        "backend": {"type": "embedded", "path": "index", "fields": ["title", "body"],
                    "candidates": 100},
        "features": {"numeric_fields": []},
        "learner": {"name": "preference_perceptron", "seed": seed},
        "store": {"path": "events.sqlite", "models": "models"},
        "trainer": {"feedback_window": FEEDBACK_WINDOW, "interval": INTERVAL},
        "server": {"host": "127.0.0.1", "port": 0, "threads": 4},
        # the simulated users all come from this machine, faster than people
        "security": {"searches_per_minute": 0, "clicks_per_minute": 0,
                     "address_searches_per_minute": 0, "address_clicks_per_minute": 0,
                     "address_budget": 0},
    }


# -- the real service ------------------------------------------------------------------------

class Server(ServeProcess):
    """`reranker serve` in a subprocess on a free port, with a JSON client."""

    def __init__(self, config_path: Path):
        super().__init__(config_path)
        self.client = HttpClient(self.url)

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/healthz", timeout=30) as response:
            return json.loads(response.read())


# -- one run ---------------------------------------------------------------------------------

@dataclass
class RunResult:
    run: int
    seed: int
    train_queries: int
    heldout_queries: int
    served: list[float] = field(default_factory=list)  # NDCG@10 per training search
    backend: list[float] = field(default_factory=list)  # the backend's order, same searches
    clicks: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # "search 200" -> count
    errors: list[str] = field(default_factory=list)  # the first few non-2xx answers
    lag: list[dict] = field(default_factory=list)  # /healthz every WINDOW searches
    heldout_before: float = float("nan")
    heldout_after: float = float("nan")
    heldout_backend: float = float("nan")
    final_health: dict = field(default_factory=dict)
    trainer_catch_up_seconds: float = float("nan")
    log_problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.served) // WINDOW * WINDOW
        served = np.asarray(self.served[:n]).reshape(-1, WINDOW).mean(axis=1)
        backend = np.asarray(self.backend[:n]).reshape(-1, WINDOW).mean(axis=1)
        return served, backend

    def metrics(self) -> dict[str, float]:
        served, backend = self.windows()
        gaps = served - backend
        worst = int(gaps.argmin()) if gaps.size else -1
        last_served = float(np.mean(self.served[-LAST:]))
        last_backend = float(np.mean(self.backend[-LAST:]))
        return {
            "last_served": last_served,
            "last_backend": last_backend,
            "last_diff": last_served - last_backend,
            "worst_window_diff": float(gaps[worst]) if gaps.size else float("nan"),
            "worst_window_end": (worst + 1) * WINDOW,
            "heldout_before": self.heldout_before,
            "heldout_after": self.heldout_after,
            "heldout_backend": self.heldout_backend,
            "heldout_after_minus_backend": self.heldout_after - self.heldout_backend,
        }


class Recorder:
    """Counts every answer's status and keeps the first few error messages."""

    def __init__(self, result: RunResult):
        self.result = result
        self.statuses: Counter[str] = Counter()

    def post(self, server: Server, path: str, body: dict, ok: int) -> dict | None:
        status, answer = server.client.post(path, body)
        self.statuses[f"{path.strip('/')} {status}"] += 1
        if status != ok:
            if len(self.result.errors) < 20:
                self.result.errors.append(f"{path} {body} -> {status} {answer}")
            return None
        return answer


def split_queries(queries: list[Query], share: float, rng: np.random.Generator
                  ) -> tuple[list[Query], list[Query]]:
    usable = [q for q in queries if q.has_relevant]
    order = rng.permutation(len(usable))
    n_train = min(len(usable) - 1, max(1, round(share * len(usable))))
    return ([usable[i] for i in sorted(order[:n_train])],
            [usable[i] for i in sorted(order[n_train:])])


def page_ndcg(query: Query, ids: list[str]) -> float:
    return ndcg(np.array([query.label(d) for d in ids], dtype=np.intp), query.all_labels(), K)


def new_deployment_ndcg(config_path: Path, queries: list[Query]) -> float:
    """Mean NDCG@10 of the pages a new deployment of this configuration serves for
    ``queries``: the same index and learner on an empty event store and model folder."""
    from tempfile import TemporaryDirectory

    from reranker.serving.service import RerankerService

    with TemporaryDirectory() as scratch:
        config = load_config(config_path, {"store.path": str(Path(scratch) / "events.sqlite"),
                                           "store.models": str(Path(scratch) / "models")})
        service = RerankerService(config).open()
        try:
            return float(np.mean([page_ndcg(q, [hit["id"] for hit in
                                                service.search(q.text, K)["hits"]])
                                  for q in queries]))
        finally:
            service.close()


def served_ndcg(server: Server, recorder: Recorder, queries: list[Query]) -> float:
    """Mean NDCG@10 of the pages the service serves for ``queries``, each asked once (nobody
    clicks: asking a query again would count the first page's results as shown and not
    clicked, which the click features take as evidence against them)."""
    scores = []
    for query in queries:
        page = recorder.post(server, "/search", {"query": query.text, "size": K}, 200)
        if page is not None:
            scores.append(page_ndcg(query, [hit["id"] for hit in page["hits"]]))
    return float(np.mean(scores)) if scores else float("nan")


def prepare_run_folder(folder: Path, seed: int) -> Path:
    if folder.exists():
        if not (folder / "config.yaml").exists():
            raise SystemExit(f"{folder} exists and is not a run folder of this script; "
                             f"choose another --out")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(run_config(seed), sort_keys=False), encoding="utf-8")
    return path


def index_documents(command: list[str], config_path: Path, docs_path: Path) -> str:
    result = subprocess.run(command + ["index", "-c", str(config_path), str(docs_path)],
                            capture_output=True, text=True, env=cli_env())
    if result.returncode != 0:
        raise SystemExit(f"reranker index failed ({result.returncode}):\n{result.stdout}"
                         f"{result.stderr}")
    return result.stdout.strip()


def wait_for_trainer(server: Server, result: RunResult, limit: float = 60.0) -> None:
    """Sleep feedback_window + 2 * interval, then until /healthz shows nothing left to apply
    (at most ``limit`` seconds); record how long the trainer took."""
    start = time.monotonic()
    time.sleep(FEEDBACK_WINDOW + 2 * INTERVAL)
    while True:
        health = server.health()
        events = health.get("events", {})
        if not events.get("open_impressions") and not events.get("closed_unapplied"):
            break
        if time.monotonic() - start > limit:
            result.log_problems.append(f"trainer still behind {limit:.0f} s after the last "
                                       f"search: {events}")
            break
        time.sleep(INTERVAL)
    result.trainer_catch_up_seconds = time.monotonic() - start


def scan_log(path: Path) -> list[str]:
    """Warnings, errors and tracebacks in the server's log; not waitress's note that a
    request waited for a free thread ("Task queue depth is N"), which the users and the
    trainer sharing two cores cause now and then: the request is still answered, and the
    report counts its status."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line for line in lines
            if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback", line)
            and "waitress.queue: Task queue depth" not in line][:20]


def one_run(run: int, seed: int, args: argparse.Namespace, data: Cranfield, command: list[str],
            console: Console) -> RunResult:
    started = time.monotonic()
    folder = args.out / f"run-{run}"
    config_path = prepare_run_folder(folder, seed)
    indexed = index_documents(command, config_path, args.out / "docs.jsonl")

    split_seq, draw_seq, click_seq = np.random.SeedSequence(seed).spawn(3)
    train, heldout = split_queries(data.queries, args.train_share,
                                   np.random.default_rng(split_seq))
    draws = np.random.default_rng(draw_seq)
    click_rng = np.random.default_rng(click_seq)
    users = cascade_model(CLICK_MODEL, GRADES)
    result = RunResult(run, seed, len(train), len(heldout))
    recorder = Recorder(result)

    backend = backend_class(get_plugin_manager(), "embedded")(load_config(config_path))
    backend.open()
    backend_cache: dict[int, float] = {}

    def backend_ndcg(query: Query) -> float:
        if query.number not in backend_cache:
            backend_cache[query.number] = page_ndcg(query, backend.search(query.text, K).ids)
        return backend_cache[query.number]

    console.print(f"[bold]run {run}[/bold] (seed {seed}): {indexed}; {len(train)} training "
                  f"queries, {len(heldout)} held out")
    result.heldout_before = new_deployment_ndcg(config_path, heldout)
    server = Server(config_path)
    try:
        with progress_bar(f"run {run}: simulated searches", args.searches) as advance:
            for t in range(1, args.searches + 1):
                query = train[draws.integers(len(train))]
                session = f"simulated-{t % 200}"  # a session per simulated user
                page = recorder.post(server, "/search", {"query": query.text, "size": K,
                                                         "session_id": session}, 200)
                if page is not None:
                    ids = [hit["id"] for hit in page["hits"]]
                    labels = np.array([query.label(d) for d in ids], dtype=np.intp)
                    result.served.append(ndcg(labels, query.all_labels(), K))
                    result.backend.append(backend_ndcg(query))
                    for j in np.flatnonzero(users.clicks(labels, click_rng)):
                        body = {"impression_id": page["impression_id"], "doc_id": ids[j],
                                "session_id": session}
                        if recorder.post(server, "/click", body, 202) is not None:
                            result.clicks += 1
                if t % WINDOW == 0:
                    health = server.health()
                    result.lag.append({"searches": t, "model_version": health["model_version"],
                                       "applied": health["model"].get("impressions"),
                                       **{k: v for k, v in health["events"].items()
                                          if k != "status"}})
                advance(1)
        wait_for_trainer(server, result)
        result.heldout_after = served_ndcg(server, recorder, heldout)
        result.final_health = server.health()
    finally:
        server.stop()
    result.heldout_backend = float(np.mean([backend_ndcg(q) for q in heldout]))
    result.statuses = dict(recorder.statuses)
    result.log_problems += scan_log(server.log_path)
    result.seconds = time.monotonic() - started
    return result


# -- report ----------------------------------------------------------------------------------

ROWS = [("last_served", "served, last 500"), ("last_backend", "backend order, same searches"),
        ("last_diff", "served - backend"), ("worst_window_diff", "worst 100-search window"),
        ("heldout_before", "held-out before"), ("heldout_after", "held-out after"),
        ("heldout_backend", "held-out backend order")]


def mean_sd(values: list[float]) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


def report(console: Console, results: list[RunResult], args: argparse.Namespace) -> dict:
    metrics = [r.metrics() for r in results]
    runs = f"{len(results)} run{'s' if len(results) != 1 else ''}"
    table = Table(title=f"Cranfield, live: NDCG@10 ({runs} x {args.searches} searches, "
                        f"{CLICK_MODEL} clicks)")
    table.add_column("")
    for r in results:
        table.add_column(f"run {r.run}", justify="right")
    table.add_column("mean ± sd", justify="right")
    summary: dict[str, dict] = {}
    for key, label in ROWS:
        values = [m[key] for m in metrics]
        mean, sd = mean_sd(values)
        summary[key] = {"mean": mean, "sd": sd, "runs": values}
        cells = [f"{v:+.3f}" if "diff" in key else f"{v:.3f}" for v in values]
        if key == "worst_window_diff":
            cells = [f"{c} (at {m['worst_window_end']})" for c, m in zip(cells, metrics,
                                                                        strict=True)]
        table.add_row(label, *cells, f"{mean:+.3f} ± {sd:.3f}" if "diff" in key
                      else f"{mean:.3f} ± {sd:.3f}")
    table.add_row("clicks", *[str(r.clicks) for r in results], "")
    table.add_row("seconds", *[f"{r.seconds:.0f}" for r in results], "")
    console.print(table)

    last = summary["last_diff"]["mean"]
    worst = min(m["worst_window_diff"] for m in metrics)
    held = summary["heldout_after"]["mean"] - summary["heldout_backend"]["mean"]
    checks = {
        "served beats backend by >= 0.10 over the last 500 searches (mean of runs)": last >= 0.10,
        "no 100-search window more than 0.02 below the backend (any run)": worst >= -0.02,
        "held-out after no worse than backend order (mean of runs)": held >= 0.0,
    }
    for text, ok in checks.items():
        console.print(f"{'[green]met[/green]' if ok else '[red]not met[/red]'}: {text}")
    console.print(f"  (last-500 difference {last:+.3f}; worst window {worst:+.3f}; held-out "
                  f"after - backend {held:+.3f})")
    for r in results:
        bad = {k: v for k, v in r.statuses.items() if not k.endswith((" 200", " 202"))}
        behind = max((x.get("closed_unapplied", 0) or 0 for x in r.lag), default=0)
        console.print(f"run {r.run}: answers {dict(sorted(r.statuses.items()))}"
                      + (f" [red]non-2xx: {bad}[/red]" if bad else ""))
        console.print(f"  trainer: at most {behind} closed unapplied at the {WINDOW}-search "
                      f"checks; caught up {r.trainer_catch_up_seconds:.1f} s after the last "
                      f"search; model version {r.final_health.get('model_version')}; /healthz "
                      f"{r.final_health.get('status')}")
        for line in r.errors[:5] + r.log_problems[:5]:
            console.print(f"  {line}", markup=False)
    return {"checks": checks, "metrics": summary}


def plot(path: Path, results: list[RunResult], searches: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = [r.windows() for r in results]
    n = min(len(s) for s, _ in windows)
    served = np.array([s[:n] for s, _ in windows])
    backend = np.array([b[:n] for _, b in windows])
    x = (np.arange(n) + 1) * WINDOW
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    ax.fill_between(x, served.min(axis=0), served.max(axis=0), color="tab:blue", alpha=0.2,
                    label="served, min-max over runs")
    ax.plot(x, served.mean(axis=0), color="tab:blue", marker="o", markersize=3,
            label="served pages (training queries), mean over runs")
    ax.plot(x, backend.mean(axis=0), color="grey", linestyle="--",
            label="backend order (BM25), same searches")
    before = np.mean([r.heldout_before for r in results])
    after = np.mean([r.heldout_after for r in results])
    ax.axhline(np.mean([r.heldout_backend for r in results]), color="tab:orange",
               linestyle=":", label="held-out queries, backend order")
    ax.scatter([0, searches], [before, after], color="tab:orange", zorder=3,
               label="held-out queries served, before and after")
    for x_at, value, text in ((0, before, "before"), (searches, after, "after")):
        ax.annotate(f"{text} {value:.3f}", (x_at, value), textcoords="offset points",
                    xytext=(0, -12), ha="center", fontsize=8, color="tab:orange")
    ax.set_xlabel("searches")
    ax.set_ylabel(f"NDCG@10 per {WINDOW} searches")
    ax.set_xlim(-0.05 * searches, 1.05 * searches)
    ax.set_title(f"Cranfield, live: reranker serve learning from {CLICK_MODEL} clicks "
                 f"({len(results)} run{'s' if len(results) != 1 else ''})")
    ax.grid(alpha=0.3)
    ax.margins(y=0.1)  # room for the labels of the held-out points
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="folder with cran.all.1400, cran.qry and cranqrel")
    parser.add_argument("--out", type=Path, default=Path("cranfield-live"),
                        help="folder for everything the script writes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--searches", type=int, default=3000, help="simulated searches per run")
    parser.add_argument("--seed", type=int, default=0, help="run r uses seed + r")
    parser.add_argument("--train-share", type=float, default=0.67,
                        help="share of the queries (with a relevant document) users ask")
    args = parser.parse_args()
    if args.runs < 1 or args.searches < LAST or not 0 < args.train_share < 1:
        parser.error(f"need --runs >= 1, --searches >= {LAST} and 0 < --train-share < 1")

    console = Console()
    if not console.is_terminal:  # a log file or a pipe: wide enough for the table
        console = Console(width=110)
    started = time.monotonic()
    data = load_cranfield(args.data)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "docs.jsonl", "w", encoding="utf-8") as handle:
        for doc in data.documents:
            handle.write(json.dumps(doc) + "\n")
    console.print(f"Cranfield: {len(data.documents)} documents, {len(data.queries)} queries "
                  f"({sum(q.has_relevant for q in data.queries)} with a relevant document)")
    command = reranker_command()
    results = [one_run(run, args.seed + run, args, data, command, console)
               for run in range(args.runs)]
    summary = report(console, results, args)
    wall = time.monotonic() - started
    console.print(f"Wall time {wall:.0f} s ({wall / len(results):.0f} s per run)")

    plot(args.out / "learning_curve.png", results, args.searches)
    summary.update({
        "settings": {"runs": args.runs, "searches": args.searches, "seed": args.seed,
                     "train_share": args.train_share, "click_model": CLICK_MODEL,
                     "window": WINDOW, "last": LAST, "config": run_config(args.seed)},
        "wall_seconds": wall,
        "runs": [{**asdict(r), **r.metrics(),
                  "windows_served": r.windows()[0].tolist(),
                  "windows_backend": r.windows()[1].tolist()} for r in results],
    })
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n",
                                           encoding="utf-8")
    console.print(f"Wrote {args.out / 'summary.json'} and {args.out / 'learning_curve.png'}")


if __name__ == "__main__":
    main()
