"""Queries never seen and queries that repeat: the default learner and PDGD, with the general
model and each query's own clicks kept apart (docs/algorithms.md, "General model and query
specialisation"), on MQ2008, OHSUMED and the LightGBM example, against the same learner
without click features, the engine's order, and the earlier design (click features among the
learner's features, learned weights in full and every page learned from: ``--no-specialize
--no-shrink --no-query-balance``).

    python examples/new_queries.py --data ../shared/data --out new-queries

For each collection and click model, one run of ``--impressions`` (50,000) per seed gives the
figures at 10,000 and at the end: offline NDCG@10 on the held-out file (queries the learners
never see), online NDCG@10 of the pages shown over the last 2,000 impressions, and the worst
window of 200 impressions against the engine's order in the same window (paired: every
learner of a run sees the same queries). Prints a Markdown table (mean ± standard deviation
over the runs) and the issue's three targets per cell:

1. offline at least the better of {the same learner without click features, the engine} -
   0.005;
2. online at least the earlier design's default learner (with click features) - 0.005;
3. the worst window at most 0.02 below the engine's order.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from reranker.commands.console import progress_bar
from reranker.offline.simulation import (
    LearnerSpec,
    Settings,
    best_single_feature,
    prepare,
    simulate,
)

#: The collections: folder under --data, training files, held-out file.
COLLECTIONS = {
    "MQ2008": ("letor4-mq2008", [f"S{i}.txt.gz" for i in (1, 2, 3)], "S5.txt.gz"),
    "OHSUMED": ("letor3-ohsumed", [f"Fold{i}_test.txt.gz" for i in (1, 2, 3, 4)],
                "Fold5_test.txt.gz"),
    "LightGBM example": ("lightgbm-lambdarank-example", ["rank.train.gz"], "rank.test"),
}
CLICK_MODELS = ("perfect", "navigational", "informational")
LEARNERS = ("preference_perceptron", "pdgd")
EARLIER = "preference_perceptron, earlier design"
ONLINE_SPAN = 2_000  # impressions of online NDCG@10 reported at a point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="folder with letor4-mq2008/, letor3-ohsumed/ and "
                             "lightgbm-lambdarank-example/")
    parser.add_argument("--out", type=Path, default=Path("new-queries"))
    parser.add_argument("--impressions", type=int, default=50_000)
    parser.add_argument("--at", type=int, action="append", default=None,
                        help="report after this many impressions too (repeatable; default "
                             "10,000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--collection", action="append", choices=sorted(COLLECTIONS),
                        default=None, help="collection (repeatable; default: all three)")
    parser.add_argument("--click-model", action="append", choices=CLICK_MODELS, default=None,
                        help="click model (repeatable; default: all three)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    points = sorted({*(args.at or [10_000]), args.impressions})
    if points[0] < ONLINE_SPAN or any(t % 1000 for t in points):
        parser.error(f"report points must be multiples of 1,000 from {ONLINE_SPAN:,}")
    collections = args.collection or list(COLLECTIONS)
    click_models = args.click_model or list(CLICK_MODELS)
    results: dict = {}
    per_model = (2 * len(LEARNERS) + 4) * args.runs * args.impressions  # + floors, earlier
    with progress_bar("simulating impressions",
                      len(collections) * len(click_models) * per_model) as advance:
        for name in collections:
            folder, train, test = COLLECTIONS[name]
            data = prepare([str(args.data / folder / f) for f in train],
                           str(args.data / folder / test))
            feature = best_single_feature(data)
            floor = LearnerSpec("backend_order", {"feature": feature}, "engine")
            for click_model in click_models:
                base = Settings(impressions=args.impressions, runs=args.runs, seed=args.seed,
                                click_model=click_model, backend_feature=feature,
                                checkpoints=args.impressions // 1000,
                                checkpoint_spacing="even")
                runs = {
                    "": simulate(data, [LearnerSpec(n) for n in LEARNERS] + [floor], base,
                                 args.workers, advance),
                    "no click features": simulate(
                        data, [LearnerSpec(n) for n in LEARNERS] + [floor],
                        replace(base, click_features=False), args.workers, advance),
                    "earlier": simulate(
                        data, [LearnerSpec("preference_perceptron", label=EARLIER), floor],
                        replace(base, specialize=False, shrink=False, query_balance=False),
                        args.workers, advance),
                }
                results[(name, click_model)] = {
                    t: _figures(runs, t) for t in points}
    args.out.mkdir(parents=True, exist_ok=True)
    flat = {f"{name} / {model} / {t}": figures for (name, model), by_t in results.items()
            for t, figures in by_t.items()}
    (args.out / "table.json").write_text(json.dumps(flat, indent=1) + "\n", encoding="utf-8")
    _print(results, points, args)


def _figures(runs: dict, t: int) -> dict:
    """Per learner (and variant): offline NDCG@10 at ``t``, online NDCG@10 over the
    :data:`ONLINE_SPAN` impressions before it, and the worst window gap to the engine up to
    it, each as mean and standard deviation over the runs."""
    out = {}
    for variant, result in runs.items():
        engine = result.windows("engine")
        for key in result.learners:
            if key == "engine" and variant:
                continue
            label = f"{key}, {variant}" if variant and key in LEARNERS else key
            rows = [r for r in result.rows if r["learner"] == key and r["t"] == t]
            windows = result.windows(key)  # (runs, windows)
            upto = t // result.window
            online = windows[:, upto - ONLINE_SPAN // result.window: upto].mean(axis=1)
            gap = (windows[:, :upto] - engine[:, :upto]).mean(axis=0)
            out[label] = {"offline": _spread([r["offline_ndcg@10"] for r in rows]),
                          "online": _spread(online.tolist()),
                          "worst_window": float(gap.min())}
    return out


def _spread(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()),
            "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0}


def _cell(value: dict) -> str:
    return f"{value['mean']:.3f} ± {value['std']:.3f}"


def _print(results: dict, points: list[int], args) -> None:
    print(f"\n{args.runs} runs per cell (seed {args.seed}), mean ± standard deviation; "
          f"online: the last {ONLINE_SPAN:,} impressions; worst window: the lowest mean "
          f"difference to the engine over windows of 200 impressions. Targets: (1) offline >= "
          f"max(no click features, engine) - 0.005, (2) online >= the earlier design's "
          f"default - 0.005, (3) worst window >= -0.02.")
    print("| collection | impressions | clicks | engine offline | earlier default: offline "
          "/ online | learner | offline | no click features | online | worst window | "
          "targets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    misses = []
    for (name, model), by_t in results.items():
        for t in points:
            fig = by_t[t]
            engine = fig["engine"]["offline"]["mean"]
            earlier = fig[EARLIER]
            for learner in LEARNERS:
                mine, bare = fig[learner], fig[f"{learner}, no click features"]
                floor = max(bare["offline"]["mean"], engine)
                checks = [mine["offline"]["mean"] - (floor - 0.005),
                          mine["online"]["mean"] - (earlier["online"]["mean"] - 0.005),
                          mine["worst_window"] + 0.02]
                marks = "".join("✓" if c >= 0 else "✗" for c in checks)
                for number, margin in enumerate(checks, start=1):
                    if margin < 0:
                        misses.append(f"{name}, {model}, {t:,}, {learner}: target {number} "
                                      f"missed by {-margin:.3f}")
                print(f"| {name} | {t:,} | {model} | {engine:.3f} | "
                      f"{_cell(earlier['offline'])} / {_cell(earlier['online'])} | {learner} | "
                      f"{_cell(mine['offline'])} | {_cell(bare['offline'])} | "
                      f"{_cell(mine['online'])} | {mine['worst_window']:+.3f} | {marks} |")
    print("\n" + ("\n".join(misses) if misses else "every target holds"))


if __name__ == "__main__":
    main()
