"""Learning-curve plots (matplotlib, rendered off screen)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, rows: list[dict], learners: list[str], metric: str, log_time: bool) -> bool:
    """Mean over runs as a line, one standard error either side shaded; False if empty.
    Every learner gets its own colour; the floors are dashed."""
    from matplotlib import colormaps

    palette = colormaps["tab10" if len(learners) <= 10 else "tab20"].colors
    drawn = False
    for index, learner in enumerate(learners):
        by_t: dict[int, list[float]] = {}
        for row in rows:
            value = row.get(metric)
            if row["learner"] == learner and value is not None and math.isfinite(value):
                by_t.setdefault(row["t"], []).append(value)
        if not by_t:
            continue
        ts = np.array(sorted(by_t))
        mean = np.array([np.mean(by_t[t]) for t in ts])
        stderr = np.array([np.std(by_t[t], ddof=1) / math.sqrt(len(by_t[t]))
                           if len(by_t[t]) > 1 else 0.0 for t in ts])
        floor = learner.startswith(("random", "backend_order"))
        line, = ax.plot(ts, mean, label=learner, linewidth=1.6,
                        color=palette[index % len(palette)], linestyle="--" if floor else "-")
        ax.fill_between(ts, mean - stderr, mean + stderr, color=line.get_color(), alpha=0.2,
                        linewidth=0)
        drawn = True
    if log_time:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    return drawn


def learning_curves(rows: list[dict], learners: list[str], metric: str, title: str, path: Path,
                    *, log_time: bool = True, xlabel: str = "impressions t") -> None:
    """One metric against ``t``, every learner on the same axes."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    if _draw(ax, rows, learners, metric, log_time):
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data for this metric", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def learning_curve_panels(panels: dict[str, list[dict]], learners: list[str], metric: str,
                          path: Path, *, log_time: bool = True) -> None:
    """Side-by-side panels (for example one per click model) of one metric, shared y axis."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 2.6, 3.8), dpi=110,
                             sharey=True, squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels.items(), strict=True):
        _draw(ax, rows, learners, metric, log_time)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("impressions t")
    axes[0][0].set_ylabel(metric)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 1 - 2.6 / (4.2 * len(panels) + 2.6), 1))
    fig.savefig(path)
    plt.close(fig)
