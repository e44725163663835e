"""Impressions the trainer applies per CPU-second, beside the searches one process serves per
CPU-second on the same configuration, in one run.

Each case (a learner and a share of pages with clicks) gets a SQLite event store of
``--impressions`` impressions served with the demo's configuration over the six copies of
its corpus that ``bench_impression_bytes.py`` indexes (100 candidates per search). Searches
come in sessions of about four from a few thousand network addresses, their queries drawn
from a Zipf distribution (``--zipf``) over ``--queries`` distinct queries made of the demo
topics' words: a few frequent, many searched a few times or once. The ``--searched`` most
frequent queries are searched for real (``RerankerService.search``, in process) at their
1st, 4th, 16th... search (as their clicks pile up, their page may become specialised), and
their other searches log that page again; a rarer query's search logs the latest real page
of a frequent query of its topic that was not specialised (the general model's page, as a
rare query's is). A page logged again gets a new signed id, the query, session, client and
time of its search, and is logged by the store's ``log_impression``, as the service logs
one. On ``--click-share`` of the pages (for the first learner, on each of ``--shares`` too)
a simulated user clicks (the demo's cascade click model on the corpus's hidden labels,
drawn until it clicks), written by the store's click API (``record_clicks``) within 500
pages, before the next real search. The service's own trainer learns from the first
``--train-until`` impressions (passes after 500, 1,000, 2,000...), so that the later pages
are ranked by a trained model. The build's service gives the learner 1 s per ranking
(``server.ranking_budget_ms``), lest the build's load send pages to the backend's order.
The stores are built ``--jobs`` at once, in processes of their own, then measured one
after the other.

Measured, per case: one pass of the trainer as ``reranker train --close-all`` runs it
(``Trainer.from_config``, ``run_once(close_all=True)``, in a new model folder) that closes
what is open and applies the whole store: impressions applied per CPU-second of this process
(``time.process_time``) and wall time, the versions it saved and the bytes of the model
folder; and where the pass's time went (:class:`Breakdown`): reading the store, applying
pages with clicks and pages without, saving versions. Then, per learner, the baseline:
searches (``RerankerService.search``, in process, logging their pages, on the store at
``--click-share`` and the model just trained from it) per CPU-second, and the ratio.

With the defaults (two stores) a run takes about six minutes on two cores; each further
click share (``--shares 0,0.1,0.3,1``: more stores of the first learner) adds about two.

Run: python benchmarks/bench_trainer.py [--impressions 200000] [--click-share 0.2]
     [--shares 0,0.1,0.3,1] [--learners preference_perceptron,pdgd] [--searches 3000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import itertools
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_impression_bytes import COPIES, hundred_candidates

from reranker.backends.filters import filters_key
from reranker.commands.console import progress_bar
from reranker.commands.demo import CLICK_MODEL, PAGE_SIZE, demo_config
from reranker.core.config import config_from_dict
from reranker.features.clicks import query_key
from reranker.learners.specialization import SPECIALISED
from reranker.models.trainer import Trainer
from reranker.offline.click_models import cascade_model
from reranker.offline.democorpus import TITLE_WORDS, TOPICS, generate_corpus
from reranker.serving.ranking import BACKEND_ORDER
from reranker.serving.service import RerankerService
from reranker.serving.trust import Binding
from reranker.stores import open_event_store
from reranker.stores.events import Impression

#: Searches of a session on average (a new session starts with probability one in this).
SESSION_SEARCHES = 4
#: Network addresses the sessions come from.
ADDRESSES = 5000
#: Pages logged between two writes of the clicks on them (and flushes of the store's queue).
CLICK_BATCH = 500
#: Draws of the click model for a page that is to have a click, before clicking its top.
CLICK_TRIES = 20
#: The learner's time budget per ranking in the build (``server.ranking_budget_ms``).
BUILD_RANKING_BUDGET_MS = 1000
#: The model folder of the measured trainer pass (the build's trainer saves in ``models``).
MEASURED = "measured-models"


@dataclasses.dataclass(frozen=True)
class Case:
    learner: str
    share: float  # of the pages with clicks

    @property
    def label(self) -> str:
        return f"{self.learner}-{self.share:g}"


def query_universe(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` distinct queries and their topics, most frequent first: the topics' words
    alone, then two of them or one with a title word (``espresso grinder``, ``kiln guide``),
    then three; each tier in a random order."""
    rng = np.random.default_rng(seed)
    tiers: list[list[tuple[str, str]]] = [[], [], []]
    for topic, words in TOPICS.items():
        tiers[0] += [(w, topic) for w in words]
        tiers[1] += [(f"{a} {b}", topic) for a, b in itertools.permutations(words, 2)]
        tiers[1] += [(f"{a} {t}", topic) for a in words for t in TITLE_WORDS]
        tiers[2] += [(f"{a} {b} {t}", topic) for a, b in itertools.permutations(words, 2)
                     for t in TITLE_WORDS]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for tier in tiers:
        for i in rng.permutation(len(tier)):
            if tier[i][0] not in seen:
                seen.add(tier[i][0])
                out.append(tier[i])
    if n > len(out):
        sys.exit(f"--queries: at most {len(out)} distinct queries")
    return out[:n]


def zipf_draws(n_queries: int, size: int, exponent: float, seed: int) -> np.ndarray:
    """``size`` query ranks (0: the most frequent) with ``P(r)`` proportional to
    ``(r + 1) ** -exponent``."""
    weights = np.arange(1, n_queries + 1, dtype=float) ** -exponent
    return np.random.default_rng(seed).choice(n_queries, size=size, p=weights / weights.sum())


def settings_of(learner: str, index: Path, models: str = "models",
                experiment: dict | None = None) -> dict:
    """The demo's configuration, its index shared by every case; the models in
    ``models``; with ``experiment``, that section (its arms serve instead of ``learner``)."""
    settings = demo_config(learner)
    settings["backend"]["path"] = str(index)
    settings["store"]["models"] = models
    if experiment is not None:
        settings["experiment"] = experiment
    return settings


class Sessions:
    """Who searches: a session of about :data:`SESSION_SEARCHES` searches from one of
    :data:`ADDRESSES` addresses, and the client the service logs for it."""

    def __init__(self, service: RerankerService, rng: np.random.Generator):
        self.service, self.rng = service, rng
        self.serial = 0
        self._new()

    def _new(self) -> None:
        self.serial += 1
        self.session = f"session-{self.serial}"
        a = int(self.rng.integers(ADDRESSES))
        self.address = f"10.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}"
        self.client = self.service.trust.logged_client(None, self.session, self.address)

    def next(self) -> None:
        if self.rng.random() < 1.0 / SESSION_SEARCHES:
            self._new()


def labeller(topic_of: dict[str, str]) -> Callable[[str, list[str]], np.ndarray]:
    """The hidden labels (0 to 2) of documents for a query, from the corpora indexed."""
    corpora = [generate_corpus(7 + copy) for copy in range(COPIES)]

    def labels(query: str, doc_ids: list[str]) -> np.ndarray:
        topic = topic_of[query]
        return np.array([corpora[int(d[0])].label(topic, d[1:]) for d in doc_ids])

    return labels


def build_store(learner: str, share: float, index: Path, folder: Path,
                args: argparse.Namespace, tick: Callable[[int], None] | None = None,
                experiment: dict | None = None) -> dict:
    """Build the event store of ``learner`` (or of ``experiment``'s arms) with clicks on
    ``share`` of the pages in ``folder`` (module docstring); what it holds."""
    tick = tick or _tick
    folder.mkdir()
    settings = settings_of(learner, index, experiment=experiment)
    # (a learner's ranking over its time budget is answered in the backend's order, which
    # no learner learns from: the build's searches share the machine, and those of PDGD's
    # first model take 70 ms and more)
    settings["server"]["ranking_budget_ms"] = BUILD_RANKING_BUDGET_MS
    config = config_from_dict(settings, folder)
    universe = query_universe(args.queries, args.seed)
    topic_of = dict(universe)
    labels = labeller(topic_of)
    users = cascade_model(CLICK_MODEL, 3)
    draws = zipf_draws(len(universe), args.impressions, args.zipf, args.seed + 1)
    rng = np.random.default_rng(args.seed + 2)
    cpu, wall = time.process_time(), time.perf_counter()
    service = RerankerService(config).open()
    events = service.events
    signer = service.trust.signer
    no_filters = filters_key(())  # (a page's key, as the service makes it)
    logged: list = []
    log = events.log_impression

    def log_and_keep(imp) -> None:
        logged.append(imp)
        log(imp)

    events.log_impression = log_and_keep
    latest: dict[int, Impression] = {}  # by query rank: its latest real page
    general: dict[str, Impression] = {}  # by topic: the latest real page not specialised
    count = [0] * len(universe)
    sessions = Sessions(service, rng)
    clicks: list[tuple[str, str, float]] = []
    next_pass = CLICK_BATCH  # impressions logged when the service's trainer next runs
    stats = dict.fromkeys(("searches", "fallbacks", "clicked_pages", "clicks",
                           "specialised"), 0)
    try:
        for i, rank in enumerate(draws.tolist()):
            sessions.next()
            query, topic = universe[rank]
            count[rank] += 1
            n = count[rank]
            searched = rank < args.searched
            page = latest.get(rank) if searched else general.get(topic)
            now = time.time()
            if page is None or page.learner == BACKEND_ORDER \
                    or (searched and n & (n - 1) == 0 and n.bit_length() % 2):
                # a real search: a frequent query's 1st, 4th, 16th... (or the next after
                # one answered in the backend's order, the learner over its time budget);
                # the pages before it written first, so that the writer thread does not
                # slow its ranking down (the breaker times it)
                events.flush()
                service.search(query, PAGE_SIZE, session_id=sessions.session,
                               client_address=sessions.address)
                imp = logged.pop()
                stats["searches"] += 1
                fallback = imp.learner == BACKEND_ORDER
                stats["fallbacks"] += fallback
                if searched and (not fallback or page is None):
                    latest[rank] = imp
                if not fallback and SPECIALISED not in (imp.context or {}):
                    general[topic] = imp
            else:  # that page served again to this session
                imp = dataclasses.replace(
                    page, id=signer.sign(Binding.of(None, sessions.session), now),
                    query=query, created=now, user_id=sessions.client,
                    page_key=hashlib.sha256("\x1f".join(
                        (query_key(query), no_filters, sessions.session)).encode(
                        "utf-8")).hexdigest()[:32])
                log(imp)
            stats["specialised"] += SPECIALISED in (imp.context or {})
            if rng.random() < share:
                shown = imp.shown_ids()
                grades = labels(query, shown)
                for _ in range(CLICK_TRIES):
                    mask = users.clicks(grades, rng)
                    if mask.any():
                        break
                else:
                    mask[0] = True
                clicks += [(imp.id, shown[j], now) for j in np.flatnonzero(mask)]
                stats["clicked_pages"] += 1
            if (i + 1) % CLICK_BATCH == 0 or i + 1 == len(draws):
                if clicks:
                    for outcome in events.record_clicks(clicks):
                        if isinstance(outcome, Exception):
                            raise outcome
                    stats["clicks"] += len(clicks)
                    clicks = []
                else:
                    events.flush()
                if i + 1 >= next_pass and i < args.train_until:
                    service.trainer.run_once()  # the service's trainer: the served model learns
                    next_pass *= 2
                tick(CLICK_BATCH if (i + 1) % CLICK_BATCH == 0 else (i + 1) % CLICK_BATCH)
        stats["disk_bytes"] = events.disk_bytes()
    finally:
        service.close()
    seen = np.array([n for n in count if n])
    stats.update(impressions=len(draws), queries=len(seen), once=int((seen == 1).sum()),
                 top=float(seen.max() / len(draws)), cpu=time.process_time() - cpu,
                 wall=time.perf_counter() - wall)
    return stats


_progress = None  # a build process's count of the impressions built (a shared Value)


def _start_worker(progress) -> None:
    global _progress
    _progress = progress


def _tick(k: int) -> None:
    if _progress is not None:
        with _progress.get_lock():
            _progress.value += k


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


class Breakdown:
    """Where a trainer pass spends its time (``time.perf_counter``, inside the pass): closing
    the impressions still open (``close_impressions``), reading the store (``closed_since``,
    or ``closed_since_lean``, whose pages without clicks come bare),
    applying pages with clicks and pages without
    (``Trainer._apply``), and saving versions (``ModelStore.save``); each call wrapped on the
    objects of the pass, at a fraction of a microsecond per call."""

    def __init__(self, trainer: Trainer):
        self.seconds = dict.fromkeys(("close", "read", "clicked", "unclicked", "save"), 0.0)
        self.pages = {"clicked": 0, "unclicked": 0}
        events = trainer.events
        events.close_impressions = self._timed(events.close_impressions, "close")
        events.closed_since = self._timed(events.closed_since, "read")
        events.closed_since_lean = self._timed(events.closed_since_lean, "read")
        apply = trainer._apply

        def timed_apply(arm, model, imp, report, budget):
            key = "clicked" if imp.clicked else "unclicked"
            self.pages[key] += 1
            start = time.perf_counter()
            apply(arm, model, imp, report, budget)
            self.seconds[key] += time.perf_counter() - start

        trainer._apply = timed_apply
        for arm in trainer.arms:
            arm.models.save = self._timed(arm.models.save, "save")

    def _timed(self, call: Callable, key: str) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - start

        return timed


def train(case: Case, index: Path, folder: Path) -> dict:
    """One trainer pass as ``reranker train --close-all`` runs it on ``case``'s store, from
    a new model folder (:data:`MEASURED`), timed, with its :class:`Breakdown`."""
    config = config_from_dict(settings_of(case.learner, index, MEASURED), folder)
    events = open_event_store(config)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        trainer = Trainer.from_config(config, events)
        breakdown = Breakdown(trainer)
        report = trainer.run_once(close_all=True)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        events.close()
    if report.errors:
        sys.exit(f"{case.label}: {report.errors}")
    return {"closed": report.closed, "cpu": cpu, "wall": wall, "applied": report.applied,
            "clicks": report.clicks, "updates": report.updates, "balanced": report.balanced,
            "bounded": report.bounded, "skipped": report.skipped,
            "versions": len(report.versions),
            "model_bytes": folder_bytes(Path(config.store.models)),
            "seconds": breakdown.seconds, "pages": breakdown.pages}


def search_rate(case: Case, index: Path, folder: Path, args: argparse.Namespace
                ) -> tuple[int, float, float, int]:
    """``--searches`` searches of ``RerankerService.search`` in process (or as many as
    ``--search-seconds`` of CPU allow), on ``case``'s store and the model trained on it,
    sessions and queries as in the build, after 100 untimed ones: how many, per CPU-second,
    per second, and how many were answered in the backend's order (the learner over its
    time budget). The impressions they log are written before the clock stops."""
    config = config_from_dict(settings_of(case.learner, index, MEASURED), folder)
    universe = query_universe(args.queries, args.seed)
    warmup = 100
    draws = zipf_draws(len(universe), warmup + args.searches, args.zipf, args.seed + 3)
    service = RerankerService(config).open()
    sessions = Sessions(service, np.random.default_rng(args.seed + 4))
    done = fallbacks = 0
    try:
        for i, rank in enumerate(draws.tolist()):
            if i == warmup:
                service.events.flush()
                cpu, wall = time.process_time(), time.perf_counter()
            elif i > warmup and time.process_time() - cpu > args.search_seconds:
                break
            sessions.next()
            page = service.search(universe[rank][0], PAGE_SIZE, session_id=sessions.session,
                                  client_address=sessions.address)
            if i >= warmup:
                done += 1
                fallbacks += page["learner"] == BACKEND_ORDER
        service.events.flush()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        service.close()
    return done, done / cpu, done / wall, fallbacks


def build_all(cases: list[Case], index: Path, tmp: Path, args: argparse.Namespace
              ) -> dict[Case, dict]:
    """Every case's store, ``args.jobs`` at once, with a progress bar of the impressions."""
    built: dict[Case, dict] = {}
    total = len(cases) * args.impressions
    with progress_bar("building event stores", total) as advance:
        if args.jobs <= 1:
            for case in cases:
                built[case] = build_store(case.learner, case.share, index, tmp / case.label,
                                          args, advance)
            return built
        # (this file imported by name, so that the build processes find build_store, also
        # when it runs under python -m cProfile)
        import bench_trainer

        context = multiprocessing.get_context("spawn")
        progress = context.Value("q", 0)
        with concurrent.futures.ProcessPoolExecutor(
                args.jobs, mp_context=context, initializer=bench_trainer._start_worker,
                initargs=(progress,)) as pool:
            futures = {pool.submit(bench_trainer.build_store, case.learner, case.share, index,
                                   tmp / case.label, args): case
                       for case in sorted(cases, key=lambda c: c.learner == cases[0].learner)}
            done, shown = set(), 0
            while len(done) < len(futures):
                done, _ = concurrent.futures.wait(futures, timeout=0.5)
                advance(progress.value - shown)
                shown = progress.value
            for future, case in futures.items():
                built[case] = future.result()
    return built


def add_traffic_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the traffic a store is built from (:func:`build_store`)."""
    parser.add_argument("--queries", type=int, default=10_000, help="distinct queries")
    parser.add_argument("--searched", type=int, default=500,
                        help="the most frequent queries, whose own pages are searched for")
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent of the query ranks")
    parser.add_argument("--train-until", type=int, default=20_000,
                        help="the service's trainer runs after 500, 1,000, 2,000... "
                             "impressions of a build up to this many")
    parser.add_argument("--seed", type=int, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impressions", type=int, default=200_000, help="per event store")
    parser.add_argument("--click-share", type=float, default=0.2,
                        help="share of the pages with clicks")
    parser.add_argument("--shares", default="",
                        help="more click shares, for the first learner: 0,0.1,0.3,1")
    parser.add_argument("--learners", default="preference_perceptron,pdgd")
    add_traffic_arguments(parser)
    parser.add_argument("--searches", type=int, default=3000,
                        help="searches timed for the baseline, per learner")
    parser.add_argument("--search-seconds", type=float, default=30.0,
                        help="CPU-seconds of those searches at most, per learner")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="stores built at once")
    args = parser.parse_args()
    learners = args.learners.split(",")
    cases = [Case(learner, args.click_share) for learner in learners]
    cases += [Case(learners[0], float(s)) for s in args.shares.split(",") if s.strip()
              and float(s) != args.click_share]
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as name:
        tmp = Path(name)
        index = tmp / "index"
        hundred_candidates(config_from_dict(settings_of(learners[0], index), tmp))
        start = time.perf_counter()
        built = build_all(cases, index, tmp, args)
        build_seconds = time.perf_counter() - start
        first = built[cases[0]]
        print(f"{len(cases)} SQLite event stores of {args.impressions:,} impressions (demo "
              f"config, 100 candidates each), built in {build_seconds:.0f} s by {args.jobs} "
              f"process(es). Queries: Zipf {args.zipf:g} over {args.queries:,} distinct, of "
              f"which {first['queries']:,} searched ({first['once']:,} once; the top one "
              f"{first['top']:.1%} of the searches); {first['searches']:,} real searches "
              f"per store. Store of {cases[0].label}: "
              f"{first['disk_bytes'] / 1e9:.2f} GB on disk, built in {first['cpu']:.0f} "
              f"CPU-s.")
        print(f"{'':<22}{'click':>6}{'pages w/':>9}{'special-':>9}{'':>8}"
              f"{'':>9}{'passed':>9}{'':>8}{'versions':>9}{'model':>7}{'train':>7}"
              f"{'':>7}{'impressions':>12}")
        print(f"{'learner':<22}{'share':>6}{'clicks':>9}{'ised':>9}{'clicks':>8}"
              f"{'applied':>9}{'over':>9}{'updates':>8}{'saved':>9}{'MB':>7}{'CPU s':>7}"
              f"{'wall s':>7}{'per CPU-s':>12}")
        trained = {}
        for n, case in enumerate(cases):
            row = trained[case] = train(case, index, tmp / case.label)
            b = built[case]
            print(f"{case.learner:<22}{case.share:>6g}"
                  f"{b['clicked_pages'] / b['impressions']:>9.1%}"
                  f"{b['specialised'] / b['impressions']:>9.1%}{row['clicks']:>8,}"
                  f"{row['applied']:>9,}"
                  f"{row['balanced'] + row['bounded']:>9,}{row['updates']:>8,}"
                  f"{row['versions']:>9,}{row['model_bytes'] / 1e6:>7.1f}{row['cpu']:>7.1f}"
                  f"{row['wall']:>7.1f}{row['applied'] / row['cpu']:>12,.0f}")
            if n >= len(learners):  # (the baseline searches the first stores only)
                shutil.rmtree(tmp / case.label)
        fallbacks = sum(b["fallbacks"] for b in built.values())
        if fallbacks:
            print(f"({fallbacks} real searches of the builds were answered in the backend's "
                  f"order, their learner over its time budget; their pages were not logged "
                  f"again)")
        print("(passed over: pages of frequent queries that query balance leaves out, and "
              "clicked pages over their client's budget)")
        print("where each pass's time went (wall): closing the impressions still open (those "
              "after the build's last trainer pass), reading the store, applying the pages "
              "with clicks and without (µs per page), saving the versions, the rest")
        print(f"{'learner':<22}{'click':>6}{'closed':>9}{'close s':>8}{'read s':>8}"
              f"{'clicked':>9}{'µs':>6}{'unclicked':>10}{'µs':>6}{'save s':>8}{'other s':>8}")
        for case in cases:
            row = trained[case]
            sec, pages = row["seconds"], row["pages"]
            print(f"{case.learner:<22}{case.share:>6g}{row['closed']:>9,}{sec['close']:>8.1f}"
                  f"{sec['read']:>8.1f}"
                  f"{pages['clicked']:>9,}{sec['clicked'] / max(pages['clicked'], 1) * 1e6:>6.0f}"
                  f"{pages['unclicked']:>10,}"
                  f"{sec['unclicked'] / max(pages['unclicked'], 1) * 1e6:>6.0f}"
                  f"{sec['save']:>8.1f}{row['wall'] - sum(sec.values()):>8.1f}")
        print(f"baseline: searches (RerankerService.search in "
              f"process, logging their pages, on the store at click share "
              f"{args.click_share:g} and the model just trained from it)")
        for case in cases[:len(learners)]:
            done, cpu_rate, wall_rate, fallbacks = search_rate(case, index, tmp / case.label,
                                                               args)
            rate = trained[case]["applied"] / trained[case]["cpu"]
            print(f"{case.learner:<22}{cpu_rate:>7,.0f} searches per CPU-second "
                  f"({wall_rate:,.0f} per second, {done:,} searches"
                  + (f", {fallbacks} in the backend's order" if fallbacks else "")
                  + f"); trainer {rate:,.0f} impressions per "
                  f"CPU-second: ratio {rate / cpu_rate:.1f} (training takes "
                  f"{cpu_rate / rate:.1%} of the CPU of serving the searches it learns from)")

if __name__ == "__main__":
    main()
