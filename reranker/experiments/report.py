"""Rendering the experiment report (:class:`.report_model.ExperimentReport`, computed once
from the status document that ``GET /experiments`` answers): a terminal table, a standalone
HTML report and the live dashboard page, which lays out the same model from the document's
``report``. The renderers only lay the model out: the numbers as they read, the verdicts and
their sentences all come from :mod:`reranker.experiments.report_model`. Every text is
untrusted: it is escaped in HTML and never read as rich markup.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reranker.experiments.report_model import (
    ArmReport,
    Cell,
    Column,
    ExperimentReport,
    PairReport,
    build_report,
)

#: One colour per arm, in the arms' order (the dashboard's light palette).
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#aa4499", "#8c6d00", "#332288", "#882255",
           "#3a8f84")


def _model(report: ExperimentReport | Mapping[str, Any]) -> ExperimentReport:
    """The report itself, or the report of a status document."""
    return report if isinstance(report, ExperimentReport) else build_report(report)


# ---- the live dashboard ----

def dashboard_page() -> str:
    """The live dashboard: one self-contained HTML page that fetches ``experiments`` (relative
    to its own address) and renders it, refreshing every ``?refresh=`` seconds (default 5)."""
    return resources.files("reranker.experiments").joinpath("dashboard.html").read_text(
        encoding="utf-8")


# ---- the terminal report ----

def _table(title: str, columns: Iterable[Column], rows: Iterable[tuple[Cell, ...]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(Text(column.heading), justify="left" if column.text else "right",
                         no_wrap=not column.text, overflow="fold")
    for cells in rows:
        # a measure's interval on a line of its own, as the dashboard shows it
        table.add_row(*(Text(cell.text + (f"\n{cell.detail}" if cell.detail else ""),
                             style="bold green" if "yes" in cell.css.split() else "")
                        for cell in cells))
    return table


def render_table(status: ExperimentReport | Mapping[str, Any], console: Console) -> None:
    """Print the report (of a status document): a header line, the pairs with their
    verdicts, the arms, the notes, the history and the test used."""
    model = _model(status)
    summary = {item.key: item.text for item in model.summary}
    header = Text()
    header.append(model.name, style="bold")
    header.append(f" \u00b7 mode {summary['mode']}")
    header.append(f" \u00b7 {summary['status']}")
    header.append(f" \u00b7 {summary['impressions']} impressions")
    header.append(f" \u00b7 computed {summary['updated']}")
    header.append(f" \u00b7 promoted: {summary['promoted']}")
    console.print(header)
    console.print(Text(f"Traffic: {summary['traffic']}"))
    if model.pairs:
        console.print(_table("Pairs", model.pair_columns, (pair.cells for pair in model.pairs)))
        for pair in model.pairs:
            console.print(Text(pair.sentence, style="bold" if pair.verdict == "beats" else ""))
    else:
        console.print(model.empty["pairs"])
    if model.arms:
        console.print(_table("Arms", model.arm_columns, (arm.cells for arm in model.arms)))
    else:
        console.print(model.empty["arms"])
    for note in model.notes:
        console.print(Text(note.text, style="bold yellow" if note.kind == "warning" else ""))
    if model.history:
        console.print(_table("History", model.history_columns,
                             (entry.cells for entry in model.history)))
    console.print(Text(model.significance_note, style="dim"))


# ---- the standalone HTML report ----

def _mpl_text(text: str, limit: int = 40) -> str:
    """A label matplotlib shows literally (no mathtext, not hidden from the legend), cut to
    ``limit`` characters so that a long label cannot squeeze the plot away."""
    if len(text) > limit:
        text = text[:limit - 1] + "\u2026"
    text = text.replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def _svg_markup(figure: Any, prefix: str, title: str) -> str:
    """``figure`` as inline SVG markup for an HTML page: without the XML prologue and the
    namespace declarations (HTML does not need them), with ids prefixed so that two plots in
    one page cannot collide, its style sheet scoped to the plot, and a title."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None,
                                                   "Format": None, "Type": None})
    markup = buffer.getvalue()
    markup = markup[markup.index("<svg"):]
    markup = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", markup)
    markup = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', markup)
    markup = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', markup)
    markup = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", markup)
    markup = markup.replace("*{stroke-linejoin", f"#{prefix}-figure_1 *{{stroke-linejoin")
    end = markup.index(">")
    return (f'{markup[:end]} class="plot" role="img" aria-label="{html.escape(title)}">'
            f"<title>{html.escape(title)}</title>{markup[end + 1:]}")


def _plot_svg(prefix: str, title: str, draw: Any, size: tuple[float, float]) -> str:
    import matplotlib
    from matplotlib.figure import Figure

    # A bare Figure renders off screen without pyplot, its global state or a GUI backend.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix,
                                "font.size": 9}):
        figure = Figure(figsize=size, dpi=100, layout="constrained")
        draw(figure.add_subplot())
        return _svg_markup(figure, prefix, title)


def _forest_plot(pairs: tuple[PairReport, ...]) -> str:
    def draw(ax: Any) -> None:
        ax.axvline(0.5, color="#555d6b", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_xlabel("win rate of the first arm (95% interval)")
        ax.grid(axis="x", alpha=0.3)
        if not pairs:
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no pairs compared yet", ha="center", va="center",
                    transform=ax.transAxes)
            return
        for row, pair in enumerate(pairs):
            y = len(pairs) - 1 - row
            colour = "#17703a" if pair.significant else "#555d6b"
            if pair.interval is not None:
                ax.plot(pair.interval, (y, y), color=colour, linewidth=4,
                        solid_capstyle="round")
            if pair.win_rate is not None:
                ax.plot([pair.win_rate], [y], marker="o", color="#1a1d23", markersize=6)
            else:
                ax.text(0.5, y, "no data yet", ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(pairs)), [_mpl_text(pair.label) for pair in pairs][::-1])
        ax.set_ylim(-0.6, len(pairs) - 0.4)

    height = 1.0 + 0.45 * max(1, len(pairs))
    return _plot_svg("forest", "Win rate of each pair with its interval, against 0.5", draw,
                     (7.5, height))


def _curves_plot(arms: tuple[ArmReport, ...]) -> str:
    def draw(ax: Any) -> None:
        drawn = False
        for arm in arms:
            if not any(point.value is not None for point in arm.curve):
                continue
            ax.plot([point.impressions for point in arm.curve],
                    [math.nan if point.value is None else point.value for point in arm.curve],
                    marker="o", markersize=3, linewidth=1.8, label=_mpl_text(arm.label),
                    color=PALETTE[arm.colour % len(PALETTE)])
            drawn = True
        ax.axhline(0.5, color="#555d6b", linestyle="--", linewidth=1)
        ax.set_xlabel("impressions")
        ax.set_ylabel("win rate")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no curve data yet", ha="center", va="center",
                    transform=ax.transAxes)

    return _plot_svg("curves", "Win rate of every arm against the impressions so far", draw,
                     (7.5, 3.8))


def _attr(name: str, value: Any) -> str:
    """`` name="value"`` with the raw JSON value (the dashboard's data-value rules), or ''."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        raw = ",".join("" if x is None else json.dumps(x) for x in value)
    elif isinstance(value, str):
        raw = value
    else:
        raw = json.dumps(value)
    return f' {name}="{html.escape(raw)}"'


def _cell(cell: Cell, tag: str = "td", inner: str = "") -> str:
    scope = ' scope="row"' if tag == "th" else ""
    detail = ("" if cell.detail is None else
              f' <span class="sub">{html.escape(cell.detail)}</span>')
    return (f'<{tag} class="{html.escape(cell.css)}"{scope}{_attr("data-value", cell.value)}'
            f'{_attr("data-interval", cell.interval)}>{inner}{html.escape(cell.text)}'
            f"{detail}</{tag}>")


def _table_html(table_id: str, columns: tuple[Column, ...], rows: list[str],
                empty: str) -> str:
    head = "".join(f'<th scope="col" class="{"text" if column.text else ""}">'
                   f"{html.escape(column.heading)}</th>" for column in columns)
    body = "\n".join(rows) or (f'<tr class="empty"><td class="empty" colspan="{len(columns)}">'
                               f"{html.escape(empty)}</td></tr>")
    return (f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n'
            "</tbody></table>")


def _pairs_table(model: ExperimentReport) -> str:
    rows = [f'<tr{_attr("data-arms", "|".join(pair.arms))}>{_cell(pair.cells[0], "th")}'
            + "".join(_cell(cell) for cell in pair.cells[1:]) + "</tr>"
            for pair in model.pairs]
    return _table_html("pairs", model.pair_columns, rows, model.empty["pairs"])


def _verdicts(model: ExperimentReport) -> str:
    items = "".join(f'<li class="{html.escape(pair.verdict)}"'
                    f'{_attr("data-arms", "|".join(pair.arms))}>{html.escape(pair.sentence)}'
                    "</li>" for pair in model.pairs)
    return f'<ul id="verdicts">{items}</ul>' if items else ""


def _arms_table(model: ExperimentReport) -> str:
    rows = []
    for arm in model.arms:
        swatch = (f'<span class="swatch" aria-hidden="true" style="background: '
                  f'{PALETTE[arm.colour % len(PALETTE)]}"></span>')
        rows.append(f'<tr{_attr("data-arm", arm.label)}>'
                    + _cell(Cell("label", arm.label), "th", swatch)
                    + "".join(_cell(cell) for cell in arm.cells[1:]) + "</tr>")
    return _table_html("arms", model.arm_columns, rows, model.empty["arms"])


def _history_table(model: ExperimentReport) -> str:
    rows = [f'<tr{_attr("data-action", entry.action)}>'
            + "".join(_cell(cell) for cell in entry.cells) + "</tr>" for entry in model.history]
    return _table_html("history", model.history_columns, rows, model.empty["history"])


def _notes_list(model: ExperimentReport) -> str:
    items = "".join(f'<li class="{note.kind}"{_attr("data-arm", note.arm)}>'
                    f"{html.escape(note.text)}</li>" for note in model.notes)
    return f'<ul id="arm-notes">{items}</ul>' if items else ""


def _stylesheet() -> str:
    """The dashboard's style sheet, so that the report looks the same."""
    match = re.search(r"<style>(.*?)</style>", dashboard_page(), re.DOTALL)
    extra = ("svg.plot { display: block; max-width: 100%; height: auto; background: #fff;"
             " border-radius: 6px; }\n")
    return (match.group(1) if match else "") + extra


def html_report(status: ExperimentReport | Mapping[str, Any]) -> str:
    """The standalone HTML report (of a status document) as a string (see
    :func:`write_html`)."""
    model = _model(status)
    items = "\n".join(f'<div><dt>{html.escape(item.heading)}</dt><dd id="experiment-'
                      f'{item.key}">{html.escape(item.text)}</dd></div>'
                      for item in model.summary)
    test = (f'<div class="wide"><dt>Test</dt><dd>{html.escape(model.test)}'
            f", &alpha; = {html.escape(model.alpha)}</dd></div>")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{html.escape(model.title)}</title>
<style>
{_stylesheet()}
</style>
</head>
<body>
<header class="page-header">
  <div>
    <p class="eyebrow">Learner comparison</p>
    <h1 id="experiment-name">{html.escape(model.name)}</h1>
  </div>
</header>
<main>
<section class="card" aria-label="Summary">
<dl class="summary">
{items}
{test}
</dl>
</section>
<section class="card" aria-labelledby="pairs-heading">
<h2 id="pairs-heading">Pairwise comparisons</h2>
<p class="note">{html.escape(model.significance_note)}</p>
<div class="table-wrap">
{_pairs_table(model)}
</div>
{_verdicts(model)}
<figure>
{_forest_plot(model.pairs)}
</figure>
</section>
<section class="card" aria-labelledby="arms-heading">
<h2 id="arms-heading">Arms</h2>
<p class="note">Click measures are shown with their 95% intervals.</p>
<div class="table-wrap">
{_arms_table(model)}
</div>
{_notes_list(model)}
</section>
<section class="card" aria-labelledby="history-heading">
<h2 id="history-heading">Promotions and holds</h2>
<div class="table-wrap">
{_history_table(model)}
</div>
</section>
<section class="card" aria-labelledby="curves-heading">
<h2 id="curves-heading">Win rate over time</h2>
<figure>
{_curves_plot(model.arms)}
<figcaption class="note">Each arm&rsquo;s win rate per window against the impressions of the
experiment so far; the dashed line marks 0.5.</figcaption>
</figure>
</section>
</main>
</body>
</html>
"""


def write_html(status: ExperimentReport | Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write the standalone HTML report (of a status document; tables and plots inline,
    nothing fetched from elsewhere) to ``path``; returns the path."""
    target = Path(path)
    target.write_text(html_report(status), encoding="utf-8")
    return target
