"""The README's comparison: every learner on MQ2008 fold 1 under the three cascade click
models, 10,000 impressions, 10 runs each (and the Preference Perceptron without its
perturbation); reports per click model and panel figures.

    python examples/mq2008_click_models.py --data ../shared/data/letor4-mq2008 --out mq2008

(the same as three `reranker simulate` calls, plus the combined figure).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reranker.plotting import learning_curve_panels
from reranker.simulation import (
    Settings,
    best_single_feature,
    learner_specs,
    prepare,
    simulate,
    write_reports,
)

CLICK_MODELS = ("perfect", "navigational", "informational")
LEARNERS = ["preference_perceptron", "batch_preference_perceptron",
            "exponentiated_preference_perceptron", "convex_preference_perceptron",
            "second_order_preference_perceptron", "noregret_klrank", "greedy_klrank",
            "online_ranknet"]
#: The Preference Perceptron without the perturbation, as in the paper (Algorithm 1 as is).
UNPERTURBED = {"name": "preference_perceptron", "params": {"swap_probability": 0.0},
               "label": "preference_perceptron, unperturbed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with S1..S5.txt.gz")
    parser.add_argument("--out", type=Path, default=Path("mq2008"))
    parser.add_argument("--learner", action="append", default=None,
                        help="learner to compare (repeatable; default: all of the papers')")
    parser.add_argument("--impressions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    data = prepare([args.data / f"S{i}.txt.gz" for i in (1, 2, 3)], args.data / "S5.txt.gz")
    specs = learner_specs(args.learner or LEARNERS + [UNPERTURBED], {},
                          best_single_feature(data))
    panels = {}
    for click_model in CLICK_MODELS:
        settings = Settings(impressions=args.impressions, runs=args.runs, seed=1,
                            click_model=click_model)
        result = simulate(data, specs, settings)
        write_reports(result, args.out / click_model, {"click_model": click_model})
        panels[click_model] = result.rows
        print(f"{click_model}: done")
    for metric in ("offline_ndcg@10", "online_ndcg@10", "utility_regret"):
        path = args.out / f"{metric.replace('@', '_at_')}-click-models.png"
        learning_curve_panels(panels, [s.key for s in specs], metric, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
