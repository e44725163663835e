"""Every learner on MQ2008 fold 1 under the protocol of the online learning-to-rank
literature's reference implementation (HarrieO/OnlineLearningToRank, which produced the
published PDGD and TD-DBGD numbers): train S1-S3, offline NDCG@10 on S5 after 10,000
impressions, models from zero, no click features, 10 results shown, cascade clicks with a
stop coin at every examined position (the `-every` click models), 10 runs. Prints mean ±
standard deviation over the runs beside the published numbers where there are some.

    python examples/mq2008_reference_protocol.py --data ../shared/data/letor4-mq2008

(the same as `reranker simulate --start zero --no-click-features --click-model
informational-every ...`, for every learner and click model.)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from reranker.commands.console import progress_bar
from reranker.core.plugins import get_plugin_manager, learner_classes
from reranker.offline.simulation import (
    Settings,
    best_single_feature,
    learner_specs,
    prepare,
    simulate,
    summarize,
)

CLICK_MODELS = ("perfect", "navigational", "informational")
#: Oosterhuis & de Rijke, CIKM 2018, Table 2 (MQ2008, offline NDCG@10, mean ± std).
PUBLISHED = {"pdgd": ((0.716, 0.007), (0.714, 0.006), (0.709, 0.008)),
             "dbgd": ((0.706, 0.007), (0.697, 0.010), (0.665, 0.032))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder with S1..S5.txt.gz")
    parser.add_argument("--out", type=Path, default=Path("mq2008-reference"))
    parser.add_argument("--learner", action="append", default=None,
                        help="learner to run (repeatable; default: every registered one)")
    parser.add_argument("--impressions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    data = prepare([args.data / f"S{i}.txt.gz" for i in (1, 2, 3)], args.data / "S5.txt.gz")
    names = args.learner or sorted(set(learner_classes(get_plugin_manager()))
                                   - {"random", "backend_order"})
    feature = best_single_feature(data)
    specs = learner_specs(names, {}, feature)
    table: dict[str, dict[str, tuple[float, float]]] = {}
    total = len(CLICK_MODELS) * len(specs) * args.runs * args.impressions
    with progress_bar("simulating impressions", total) as advance:
        summaries = {}
        for click_model in CLICK_MODELS:
            settings = Settings(impressions=args.impressions, runs=args.runs, seed=0,
                                click_model=f"{click_model}-every", start="zero",
                                click_features=False, checkpoints=1, backend_feature=feature)
            summaries[click_model] = summarize(simulate(data, specs, settings,
                                                        progress=advance))
    for click_model, summary in summaries.items():
        for key, stats in summary.items():
            value = stats["offline_ndcg@10"]
            table.setdefault(key, {})[click_model] = (
                value["mean"], value["stderr"] * math.sqrt(args.runs))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.json").write_text(json.dumps(table, indent=1))
    print(f"MQ2008 fold 1, offline NDCG@10 on S5 after {args.impressions:,} impressions, "
          f"mean ± std over {args.runs} runs (published: Oosterhuis & de Rijke 2018)")
    print("| learner | " + " | ".join(CLICK_MODELS) + " |")
    print("|---|" + "---|" * len(CLICK_MODELS))
    for key, cells in table.items():
        row = []
        for j, click_model in enumerate(CLICK_MODELS):
            mean, std = cells[click_model]
            text = f"{mean:.3f} ± {std:.3f}"
            if key in PUBLISHED:
                ref, ref_std = PUBLISHED[key][j]
                text += f" (published {ref:.3f} ± {ref_std:.3f})"
            row.append(text)
        print(f"| `{key}` | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
