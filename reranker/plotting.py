"""Learning-curve plots (matplotlib, rendered off screen)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def learning_curves(rows: list[dict], learners: list[str], metric: str, title: str, path: Path,
                    *, log_time: bool = True, xlabel: str = "impressions t") -> None:
    """One metric against ``t``: every learner on the same axes, the mean over runs as a
    line and one standard error either side shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    drawn = False
    for learner in learners:
        by_t: dict[int, list[float]] = {}
        for row in rows:
            value = row.get(metric)
            if row["learner"] == learner and value is not None and not math.isnan(value):
                by_t.setdefault(row["t"], []).append(value)
        if not by_t:
            continue
        ts = np.array(sorted(by_t))
        mean = np.array([np.mean(by_t[t]) for t in ts])
        stderr = np.array([np.std(by_t[t], ddof=1) / math.sqrt(len(by_t[t]))
                           if len(by_t[t]) > 1 else 0.0 for t in ts])
        line, = ax.plot(ts, mean, label=learner, linewidth=1.6)
        ax.fill_between(ts, mean - stderr, mean + stderr, color=line.get_color(), alpha=0.2,
                        linewidth=0)
        drawn = True
    if log_time:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data for this metric", ha="center", va="center",
                transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
