"""VCEE against epsilon-Greedy and LinUCB on MQ2008 under the contextual-semibandit protocol of
Krishnamurthy, Agarwal & Dudik (NIPS 2016), section 6: each round a query of S1-S3 drawn at
random, the learner shows its top 6, the feedback of every shown result is its relevance
label, and the round's reward is the sum of the shown labels (or, with --weights dcg, the
labels weighted by 1 / log2(1 + position)). As in the paper, every learner runs over a grid of
its exploration parameter and is shown with the value of best final average reward; the
random lists and the best possible lists are drawn for scale.

    python examples/mq2008_semibandit_protocol.py --data ../shared/data/letor4-mq2008

Prints the table of average reward after the last round (mean ± std over the runs) and
writes it to OUT/table.json, every grid value's curve to OUT/curves.csv and the curves to
OUT/average-reward.png.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from reranker.commands.console import progress_bar
from reranker.offline.plotting import learning_curve_panels
from reranker.offline.semibandit import SemibanditSettings, simulate_semibandits
from reranker.offline.simulation import LearnerSpec, prepare

#: The exploration parameter of each learner and the values tried (the paper tried ten
#: logarithmically spaced values each; four keep the example's run time reasonable).
GRIDS = {"vcee": ("smoothing", (0.1, 0.3, 1.0, 3.0)),
         "epsilon_greedy": ("epsilon", (0.01, 0.03, 0.1, 0.3)),
         "linucb": ("alpha", (0.01, 0.1, 1.0))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with S1..S5.txt.gz")
    parser.add_argument("--out", type=Path, default=Path("mq2008-semibandits"))
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--positions", type=int, default=6, help="results shown (L)")
    parser.add_argument("--weights", choices=("uniform", "dcg"), action="append",
                        help="position weights of the reward (repeatable; default both)")
    parser.add_argument("--oracle", choices=("linear", "trees"), default="linear",
                        help="the regression class of vcee and epsilon_greedy")
    parser.add_argument("--tree-depth", type=int, default=2)
    parser.add_argument("--grid", action="append", default=[], metavar="LEARNER=V1,V2,...",
                        help="the values of a learner's exploration parameter to try")
    args = parser.parse_args()
    grids = dict(GRIDS)
    for entry in args.grid:
        name, _, values = entry.partition("=")
        if name not in grids or not values:
            parser.error(f"--grid {entry!r}: expected one of {', '.join(grids)}=V1,V2,...")
        grids[name] = (grids[name][0], tuple(float(v) for v in values.split(",")))
    data = prepare([args.data / f"S{i}.txt.gz" for i in (1, 2, 3)], args.data / "S5.txt.gz")
    oracle = {"oracle": args.oracle, "tree_depth": args.tree_depth} \
        if args.oracle == "trees" else {}
    specs = [LearnerSpec("random")]
    for name, (param, values) in grids.items():
        extra = oracle if name != "linucb" else {}
        specs += [LearnerSpec(name, {param: value, **extra}, label=f"{name}({param}={value})")
                  for value in values]
    args.out.mkdir(parents=True, exist_ok=True)
    table, panels, curves = {}, {}, []
    kinds = args.weights or ["uniform", "dcg"]
    results = {}
    with progress_bar("learners' runs", len(kinds) * len(specs) * args.runs) as advance:
        for weights in kinds:
            settings = SemibanditSettings(rounds=args.rounds, runs=args.runs,
                                          positions=args.positions, weights=weights)
            results[weights] = simulate_semibandits(data, specs, settings, progress=advance)
    for weights, result in results.items():
        for key, values in result.average_reward.items():
            for run, row in enumerate(values):
                curves += [{"weights": weights, "learner": key, "run": run, "t": int(t),
                            "average_reward": float(v)} for t, v in zip(result.t, row, strict=True)]
        chosen = {"random": "random"}
        for name in GRIDS:  # the value with the best final average reward
            keys = [k for k in result.average_reward if k.startswith(name + "(")]
            chosen[name] = max(keys, key=lambda k: result.average_reward[k][:, -1].mean())
        rows = []
        for label, key in [*chosen.items(), ("best lists", None)]:
            values = result.ideal if key is None else result.average_reward[key]
            rows += [{"learner": label, "run": run, "t": int(t), "average_reward": float(v)}
                     for run, row in enumerate(values) for t, v in zip(result.t, row, strict=True)]
            final = values[:, -1]
            table.setdefault(label, {})[weights] = {
                "setting": key, "mean": float(final.mean()),
                "std": float(final.std(ddof=1)) if len(final) > 1 else 0.0}
        panels[f"reward: {weights} weights, top {args.positions}"] = rows
    learning_curve_panels(panels, ["vcee", "epsilon_greedy", "linucb", "random", "best lists"],
                          "average_reward", args.out / "average-reward.png", log_time=False)
    (args.out / "table.json").write_text(json.dumps(table, indent=1))
    with open(args.out / "curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(curves[0]))
        writer.writeheader()
        writer.writerows(curves)
    print(f"MQ2008 S1-S3, {args.rounds:,} rounds, top {args.positions}, labels as per-item "
          f"feedback, {args.oracle} oracle; average reward after the last round, mean ± std "
          f"over {args.runs} runs (the best setting of each learner's grid)")
    kinds = list(next(iter(table.values())))
    print("| learner | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for label, cells in table.items():
        print(f"| `{label}` | " + " | ".join(
            f"{cells[k]['mean']:.3f} ± {cells[k]['std']:.3f}"
            + (f" ({cells[k]['setting'].split('(', 1)[1][:-1]})"
               if cells[k]["setting"] and "(" in cells[k]["setting"] else "")
            for k in kinds) + " |")


if __name__ == "__main__":
    main()
