"""The contextual-semibandit protocol on labelled data (docs/algorithms.md, "The semibandit
protocol"): Krishnamurthy, Agarwal & Dudik (NIPS 2016), section 6.

Each round a query is drawn, the learner shows a list of its candidates, and the feedback of
every shown result is its relevance label (semibandit feedback: more than a click, and no
position bias); the reward of the round is ``sum_l w_l label(a_l)`` over the first
``positions`` results, with the known weights ``w`` (``uniform``: the sum of the labels, as in
the paper; or ``dcg``). The figure of merit is the average reward up to round ``t``
(cumulative reward / t), the paper's Figure 1.

Learners that take the page's length and weights as parameters (``positions``,
``position_weights``: VCEE knows the weights) are told the protocol's.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

import numpy as np

from reranker.core.plugins import get_plugin_manager, learner_classes
from reranker.learners.feedback import Feedback
from reranker.learners.oracles import POSITION_WEIGHTS, position_weights
from reranker.offline.simulation import LearnerSpec, Settings, SimulationData, simulation_factory


@dataclass(frozen=True)
class SemibanditSettings:
    rounds: int = 10_000
    runs: int = 10
    seed: int = 0
    positions: int = 6  # L: the results whose labels make the reward
    weights: str = "uniform"  # the known position weights: uniform or dcg
    checkpoints: int = 50

    def __post_init__(self) -> None:
        if self.weights not in POSITION_WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(POSITION_WEIGHTS)}, got "
                             f"{self.weights!r}")
        for name in ("rounds", "runs", "positions", "checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclass
class SemibanditResult:
    t: np.ndarray  # (checkpoints,) rounds at which the average reward was taken
    average_reward: dict[str, np.ndarray]  # learner -> (runs, checkpoints)
    ideal: np.ndarray  # (runs, checkpoints): the best lists' average reward, for scale
    seconds: dict[str, list[float]]


def told(spec: LearnerSpec, settings: SemibanditSettings) -> LearnerSpec:
    """``spec`` with the protocol's page length and weights for a learner that asks for them
    (and was not given them)."""
    cls = learner_classes(get_plugin_manager())[spec.name]
    declared = {p.name for p in cls.params}
    params = dict(spec.params)
    if "positions" in declared:
        params.setdefault("positions", settings.positions)
    if "position_weights" in declared:
        params.setdefault("position_weights", settings.weights)
    return replace(spec, params=params, label=spec.key)


def checkpoint_rounds(settings: SemibanditSettings) -> np.ndarray:
    count = min(settings.checkpoints, settings.rounds)
    return np.unique(np.linspace(settings.rounds / count, settings.rounds, count).astype(int))


def run_semibandit(data: SimulationData, spec: LearnerSpec, settings: SemibanditSettings,
                   run: int) -> tuple[np.ndarray, np.ndarray, float]:
    """One run of one learner: its average reward and the best lists' at the checkpoints,
    and the seconds it took. The queries drawn depend only on the seed and the run."""
    import time

    started = time.perf_counter()
    streams = np.random.SeedSequence([settings.seed, run]).spawn(2)
    query_rng, learner_rng = np.random.default_rng(streams[0]), np.random.default_rng(streams[1])
    factory_settings = Settings(start="zero", click_features=False)
    learner = simulation_factory(data, told(spec, settings), factory_settings).new().learner
    train = data.train
    offsets = train.offsets
    w = position_weights(settings.weights, settings.positions)
    checkpoints = checkpoint_rounds(settings)
    average, ideal = np.empty(len(checkpoints)), np.empty(len(checkpoints))
    total = best = 0.0
    j = 0
    for t, qi in enumerate(query_rng.integers(len(train), size=settings.rounds), start=1):
        lo, hi = offsets[qi], offsets[qi + 1]
        X, labels = learner.check_features(train.X[lo:hi]), train.labels[lo:hi]
        k = min(settings.positions, hi - lo)
        result = learner.rank_validated(X, k, learner_rng)
        shown = result.ranking[:k]
        values = labels[shown].astype(np.float64)
        feedback = Feedback(ranking=result.ranking, n_shown=k,
                            clicked=shown[values > 0], values=values,
                            log_prob=result.log_prob)
        feedback.propensities = result.propensities  # as the service logs them
        total += float(w[:k] @ values)
        best += float(w[:k] @ np.sort(labels)[::-1][:k])
        learner.update_validated(X, feedback)
        if t == checkpoints[j]:
            average[j], ideal[j] = total / t, best / t
            j += 1
    return average, ideal, time.perf_counter() - started


_DATA: SimulationData | None = None


def _init(data: SimulationData) -> None:
    global _DATA
    _DATA = data


def _task(spec: LearnerSpec, settings: SemibanditSettings, run: int):
    return run_semibandit(_DATA, spec, settings, run)


def simulate_semibandits(data: SimulationData, specs: list[LearnerSpec],
                         settings: SemibanditSettings, workers: int | None = None,
                         progress: Callable[[], None] | None = None) -> SemibanditResult:
    """Every (learner, run) pair, in parallel processes."""
    specs = [told(spec, settings) for spec in specs]
    for spec in specs:  # fail before forking: unknown learner or bad parameter
        simulation_factory(data, spec, Settings(start="zero", click_features=False)).new()
    tasks = [(spec, run) for spec in specs for run in range(settings.runs)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    results = {}
    if workers == 1:
        for spec, run in tasks:
            results[(spec.key, run)] = run_semibandit(data, spec, settings, run)
            if progress is not None:
                progress()
    else:
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init,
                                 initargs=(data,)) as pool:
            futures = {pool.submit(_task, spec, settings, run): (spec.key, run)
                       for spec, run in tasks}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if progress is not None:
                    progress()
    keys = [spec.key for spec in specs]
    return SemibanditResult(
        t=checkpoint_rounds(settings),
        average_reward={key: np.array([results[(key, r)][0] for r in range(settings.runs)])
                        for key in keys},
        ideal=np.array([results[(keys[0], r)][1] for r in range(settings.runs)]),
        seconds={key: [results[(key, r)][2] for r in range(settings.runs)] for key in keys})
