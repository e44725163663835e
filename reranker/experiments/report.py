"""Presenting an experiment's status document: a terminal table, a standalone HTML report and
the live dashboard page.

All three read the document that ``GET /experiments`` answers (the experiment's name, mode,
status, test and alpha, one entry per arm and one per pair of arms) and format numbers with
the same rules (the helpers below, mirrored by the dashboard's script): counts as integers,
rates, intervals and p-values with three decimals, p-values below 0.001 as ``<0.001`` and
missing values (``null``) as an en dash. Every text in the document is treated as untrusted:
it is escaped in HTML and never read as rich markup.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

#: What a missing value (``null``) is shown as.
DASH = "\u2013"

#: Display names of the metrics the experiments report; other keys are shown as they are.
METRIC_NAMES = {"clicks_per_search": "Clicks per search",
                "searches_with_click": "Searches with a click", "abandonment": "Abandonment",
                "mrr": "MRR", "clicks_at_3": "Clicks@3"}

#: One colour per arm, in the arms' order (the dashboard's light palette).
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#aa4499", "#8c6d00", "#332288", "#882255",
           "#3a8f84")

_THOUSANDTH = Decimal("0.001")


# ---- formatting, shared by the terminal and HTML outputs (and mirrored by the dashboard) ----

def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _fixed3(value: float) -> str:
    """Three decimals, rounded like JavaScript's ``toFixed(3)`` (the exact binary value, ties
    away from zero), so the terminal, the report and the dashboard always agree."""
    if value == 0:
        value = 0  # no "-0.000" for a negative zero
    return str(Decimal(value).quantize(_THOUSANDTH, rounding=ROUND_HALF_UP))


def format_int(value: Any) -> str:
    """A count as it is (a non-integer with three decimals); null as a dash."""
    if not _is_number(value):
        return DASH
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if value.is_integer() else _fixed3(value)


def format_rate(value: Any) -> str:
    """A rate or metric value with three decimals; null as a dash."""
    return _fixed3(value) if _is_number(value) else DASH


def format_p(value: Any) -> str:
    """A p-value with three decimals, below 0.001 as ``<0.001``; null as a dash."""
    if not _is_number(value):
        return DASH
    return "<0.001" if value < 0.001 else _fixed3(value)


def interval_bounds(interval: Any) -> tuple[float, float] | None:
    """``(lo, hi)`` of an interval, or None unless it is two numbers."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None
    lo, hi = interval
    return (lo, hi) if _is_number(lo) and _is_number(hi) else None


def format_interval(interval: Any) -> str:
    """``[lo, hi]`` with three decimals each; null (or a bound missing) as a dash."""
    bounds = interval_bounds(interval)
    return DASH if bounds is None else f"[{_fixed3(bounds[0])}, {_fixed3(bounds[1])}]"


def format_bool(value: Any) -> str:
    """``yes`` / ``no``; null as a dash."""
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return DASH


def format_text(value: Any) -> str:
    """A label or name; null (or empty) as a dash."""
    return DASH if value is None or value == "" else str(value)


def format_number(value: Any) -> str:
    """A parameter such as alpha, as short as it reads (``0.05``); null as a dash."""
    if not _is_number(value):
        return DASH
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return repr(float(value))


def format_time(seconds: Any) -> str:
    """A unix time as ``YYYY-MM-DD HH:MM:SS UTC``; null as a dash."""
    if not _is_number(seconds):
        return DASH
    try:
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return DASH
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def format_metric(metric: Any) -> str:
    """A metric ``{"value", "interval"}`` as ``value [lo, hi]`` (the interval when known)."""
    data = metric if isinstance(metric, Mapping) else {}
    text = format_rate(data.get("value"))
    if interval_bounds(data.get("interval")) is not None:
        text += " " + format_interval(data.get("interval"))
    return text


def metric_name(key: str) -> str:
    """The column heading of a metric."""
    return METRIC_NAMES.get(key, key.replace("_", " "))


def metric_class(key: str) -> str:
    """The CSS class of a metric's cells: the key with ``_`` as ``-``."""
    return re.sub(r"[^A-Za-z0-9-]", "-", key.replace("_", "-")) or "metric-unnamed"


# ---- reading the document defensively ----

def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _arms(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(label): _mapping(arm) for label, arm in _mapping(status.get("arms")).items()}


def _notes(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """What the results say about the arms in words (not learning, where they started)."""
    notes = status.get("notes")
    return [_mapping(note) for note in notes] if isinstance(notes, list) else []


def format_learned(arm: Mapping[str, Any]) -> str:
    """The pages an arm's model learned from in the experiment: those that changed it, of
    those it applied."""
    learning = _mapping(arm.get("learning"))
    if not learning:
        return DASH
    return f"{format_int(learning.get('updates'))}/{format_int(learning.get('impressions'))}"


def format_traffic(status: Mapping[str, Any]) -> str:
    """The share of the searches since the start that the experiment counted, with the
    searches it did not (served by the control alone, the promoted arm or the engine's
    order)."""
    traffic = _mapping(status.get("traffic"))
    searches = traffic.get("searches")
    if not _is_number(searches):
        return DASH
    share = traffic.get("share")
    # rounded half up, as the dashboard rounds
    percent = f"{math.floor(100 * share + 0.5)}%" if _is_number(share) else DASH
    return (f"{percent} of {format_int(searches)} searches "
            f"({format_int(traffic.get('outside'))} outside the experiment; configured "
            f"share {format_number(traffic.get('configured_share'))})")


def _history(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Promotions, holds and what the guard held back or (dry run) would have done, newest
    first."""
    history = status.get("history")
    return [_mapping(entry) for entry in reversed(history)] if isinstance(history, list) else []


#: The history's columns: heading, key, formatter.
HISTORY_COLUMNS = (("When", "at", format_time), ("Action", "action", format_text),
                   ("Arm", "arm", format_text), ("Closed pages", "impressions", format_int),
                   ("Why", "because", format_text))


def _pairs(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pairs = status.get("pairs")
    return [_mapping(pair) for pair in pairs] if isinstance(pairs, list) else []


def _pair_arms(pair: Mapping[str, Any]) -> list[str]:
    arms = pair.get("arms")
    return [format_text(arm) for arm in arms] if isinstance(arms, list) else []


def _metric_keys(arms: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every metric key of any arm, in the order they first appear."""
    keys: list[str] = []
    for arm in arms.values():
        for key in _mapping(arm.get("metrics")):
            if key not in keys:
                keys.append(str(key))
    return keys


def _curve(arm: Mapping[str, Any]) -> list[tuple[float, float | None]]:
    """An arm's curve as sorted ``(impressions, value)`` points; a missing value is None."""
    points = []
    curve = arm.get("curve")
    for point in curve if isinstance(curve, list) else []:
        point = _mapping(point)
        x, y = point.get("impressions"), point.get("value")
        if _is_number(x):
            points.append((float(x), float(y) if _is_number(y) else None))
    return sorted(points, key=lambda p: p[0])


def _significance_note(status: Mapping[str, Any]) -> str:
    return (f"Test: {format_text(status.get('test'))}, alpha = "
            f"{format_number(status.get('alpha'))}. \"Significant\" uses the always-valid "
            "p-value (safe to watch continuously); the sign-test p-value is for reference only.")


# ---- the live dashboard ----

def dashboard_page() -> str:
    """The live dashboard: one self-contained HTML page that fetches ``experiments`` (relative
    to its own address) and renders it, refreshing every ``?refresh=`` seconds (default 5)."""
    return resources.files("reranker.experiments").joinpath("dashboard.html").read_text(
        encoding="utf-8")


# ---- the terminal report ----

def render_table(status: dict, console: Console) -> None:
    """Print the experiment: a header line, the pairs, the arms and the test used."""
    arms = _arms(status)
    header = Text()
    header.append(format_text(status.get("experiment")), style="bold")
    header.append(f" \u00b7 mode {format_text(status.get('mode'))}")
    header.append(f" \u00b7 {format_text(status.get('status'))}")
    header.append(f" \u00b7 {format_int(status.get('impressions'))} impressions")
    header.append(f" \u00b7 computed {format_time(status.get('updated'))}")
    header.append(f" \u00b7 promoted: {format_text(status.get('promoted'))}")
    console.print(header)
    console.print(f"Traffic: {format_traffic(status)}")

    pairs = _pairs(status)
    if pairs:
        table = Table(title="Pairs", title_justify="left")
        table.add_column("Arms")
        for name in ("Wins", "Losses", "Ties", "Win rate", "95% interval", "Sign-test p",
                     "Always-valid p"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("Significant", justify="center")
        table.add_column("Winner")
        for pair in pairs:
            significant = pair.get("significant") is True
            table.add_row(
                Text(" vs ".join(_pair_arms(pair))),
                format_int(pair.get("wins")),
                format_int(pair.get("losses")),
                format_int(pair.get("ties")),
                format_rate(pair.get("win_rate")),
                format_interval(pair.get("interval")),
                format_p(pair.get("p_value")),
                format_p(pair.get("always_valid_p")),
                Text(format_bool(pair.get("significant")),
                     style="bold green" if significant else ""),
                Text(format_text(pair.get("winner")), style="bold" if significant else ""),
            )
        console.print(table)
    else:
        console.print("No pairs compared yet.")

    if arms:
        keys = _metric_keys(arms)
        table = Table(title="Arms", title_justify="left")
        table.add_column("Arm")
        table.add_column("Learner")
        for name in ("Version", "Learned", "Impressions", "Clicks", "Credited"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("Status")
        for key in keys:
            table.add_column(Text(metric_name(key)), justify="right", no_wrap=True)
        for label, arm in arms.items():
            metrics = _mapping(arm.get("metrics"))
            table.add_row(
                Text(label, style="bold"),
                Text(format_text(arm.get("learner"))),
                format_int(arm.get("model_version")),
                format_learned(arm),
                format_int(arm.get("impressions")),
                format_int(arm.get("clicks")),
                format_int(arm.get("credited_clicks")),
                Text(format_text(arm.get("status"))),
                *(format_metric(metrics.get(key)) for key in keys),
            )
        console.print(table)
    else:
        console.print("No arms.")
    for note in _notes(status):
        console.print(Text(format_text(note.get("text")),
                           style="bold yellow" if note.get("kind") == "warning" else ""))
    history = _history(status)
    if history:
        table = Table(title="History", title_justify="left")
        for heading, _, _ in HISTORY_COLUMNS:
            table.add_column(heading, justify="right" if heading == "Closed pages" else "left")
        for entry in history:
            table.add_row(*(Text(show(entry.get(key))) for _, key, show in HISTORY_COLUMNS))
        console.print(table)
    console.print(Text(_significance_note(status), style="dim"))


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


def _forest_plot(pairs: list[Mapping[str, Any]]) -> str:
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
        labels = []
        for row, pair in enumerate(pairs):
            y = len(pairs) - 1 - row
            labels.append(_mpl_text(" vs ".join(_pair_arms(pair))))
            colour = "#17703a" if pair.get("significant") is True else "#555d6b"
            bounds = interval_bounds(pair.get("interval"))
            if bounds is not None:
                ax.plot(bounds, (y, y), color=colour, linewidth=4, solid_capstyle="round")
            rate = pair.get("win_rate")
            if _is_number(rate):
                ax.plot([rate], [y], marker="o", color="#1a1d23", markersize=6)
            else:
                ax.text(0.5, y, "no data yet", ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(pairs)), labels[::-1])
        ax.set_ylim(-0.6, len(pairs) - 0.4)

    height = 1.0 + 0.45 * max(1, len(pairs))
    return _plot_svg("forest", "Win rate of each pair with its interval, against 0.5", draw,
                     (7.5, height))


def _curves_plot(arms: Mapping[str, Mapping[str, Any]]) -> str:
    def draw(ax: Any) -> None:
        drawn = False
        for index, (label, arm) in enumerate(arms.items()):
            points = _curve(arm)
            if not any(y is not None for _, y in points):
                continue
            xs = [x for x, _ in points]
            ys = [math.nan if y is None else y for _, y in points]
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.8, label=_mpl_text(label),
                    color=PALETTE[index % len(PALETTE)])
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


def _cell(css: str, text: str, value: Any = None, tag: str = "td") -> str:
    scope = ' scope="row"' if tag == "th" else ""
    return (f'<{tag} class="{html.escape(css)}"{scope}{_attr("data-value", value)}>'
            f"{html.escape(text)}</{tag}>")


def _rows(rows: Iterable[str], empty: str, columns: int) -> str:
    rows = list(rows)
    if rows:
        return "\n".join(rows)
    return f'<tr class="empty"><td class="empty" colspan="{columns}">{html.escape(empty)}</td></tr>'


def _pairs_table(pairs: list[Mapping[str, Any]]) -> str:
    headings = ["Arms", "Wins", "Losses", "Ties", "Win rate", "95% interval", "Sign-test p",
                "Always-valid p", "Significant", "Winner"]
    rows = []
    for pair in pairs:
        arms = pair.get("arms") if isinstance(pair.get("arms"), list) else []
        yes = " yes" if pair.get("significant") is True else ""
        rows.append(
            f'<tr{_attr("data-arms", "|".join(str(arm) for arm in arms))}>'
            + _cell("arms", " vs ".join(_pair_arms(pair)), tag="th")
            + _cell("wins", format_int(pair.get("wins")), pair.get("wins"))
            + _cell("losses", format_int(pair.get("losses")), pair.get("losses"))
            + _cell("ties", format_int(pair.get("ties")), pair.get("ties"))
            + _cell("win-rate", format_rate(pair.get("win_rate")), pair.get("win_rate"))
            + _cell("interval", format_interval(pair.get("interval")), pair.get("interval"))
            + _cell("p-value", format_p(pair.get("p_value")), pair.get("p_value"))
            + _cell("always-valid-p", format_p(pair.get("always_valid_p")),
                    pair.get("always_valid_p"))
            + _cell("significant" + yes, format_bool(pair.get("significant")),
                    pair.get("significant"))
            + _cell("winner text", format_text(pair.get("winner")), pair.get("winner"))
            + "</tr>")
    head = "".join(f'<th scope="col" class="{"text" if h in ("Arms", "Winner") else ""}">'
                   f"{h}</th>" for h in headings)
    return (f'<table id="pairs"><thead><tr>{head}</tr></thead><tbody>\n'
            f"{_rows(rows, 'No comparisons yet.', len(headings))}\n</tbody></table>")


def _arms_table(arms: Mapping[str, Mapping[str, Any]]) -> str:
    keys = _metric_keys(arms)
    headings = [("Arm", "text"), ("Learner", "text"), ("Model version", ""), ("Learned", ""),
                ("Impressions", ""), ("Clicks", ""), ("Credited clicks", ""),
                ("Status", "text")] + [(metric_name(key), "") for key in keys]
    rows = []
    for index, (label, arm) in enumerate(arms.items()):
        metrics = _mapping(arm.get("metrics"))
        cells = [
            f'<th class="label" scope="row"><span class="swatch" aria-hidden="true" '
            f'style="background: {PALETTE[index % len(PALETTE)]}"></span>'
            f"{html.escape(label)}</th>",
            _cell("learner text", format_text(arm.get("learner")), arm.get("learner")),
            _cell("model-version", format_int(arm.get("model_version")),
                  arm.get("model_version")),
            _cell("learned", format_learned(arm), _mapping(arm.get("learning")).get("updates")),
            _cell("impressions", format_int(arm.get("impressions")), arm.get("impressions")),
            _cell("clicks", format_int(arm.get("clicks")), arm.get("clicks")),
            _cell("credited-clicks", format_int(arm.get("credited_clicks")),
                  arm.get("credited_clicks")),
            _cell("status text", format_text(arm.get("status")), arm.get("status")),
        ]
        for key in keys:
            metric = _mapping(metrics.get(key))
            bounds = interval_bounds(metric.get("interval"))
            interval = ("" if bounds is None else
                        f' <span class="sub">{html.escape(format_interval(bounds))}</span>')
            cells.append(f'<td class="{metric_class(key)} metric"'
                         f'{_attr("data-metric", key)}{_attr("data-value", metric.get("value"))}'
                         f'{_attr("data-interval", bounds)}>'
                         f"{html.escape(format_rate(metric.get('value')))}{interval}</td>")
        rows.append(f'<tr{_attr("data-arm", label)}>{"".join(cells)}</tr>')
    head = "".join(f'<th scope="col" class="{css}">{html.escape(name)}</th>'
                   for name, css in headings)
    return (f'<table id="arms"><thead><tr>{head}</tr></thead><tbody>\n'
            f"{_rows(rows, 'No arms.', len(headings))}\n</tbody></table>")


def _history_table(status: Mapping[str, Any]) -> str:
    rows = [f'<tr{_attr("data-action", entry.get("action"))}>'
            + "".join(_cell(key + (" text" if key in ("action", "arm", "because") else ""),
                            show(entry.get(key)), entry.get(key))
                      for _, key, show in HISTORY_COLUMNS) + "</tr>"
            for entry in _history(status)]
    head = "".join(f'<th scope="col" class="{"" if key in ("at", "impressions") else "text"}">'
                   f"{heading}</th>" for heading, key, _ in HISTORY_COLUMNS)
    return (f'<table id="history"><thead><tr>{head}</tr></thead><tbody>\n'
            f"{_rows(rows, 'No promotion or hold yet.', len(HISTORY_COLUMNS))}\n"
            "</tbody></table>")


def _notes_list(status: Mapping[str, Any]) -> str:
    items = "".join(f'<li class="{"warning" if note.get("kind") == "warning" else "info"}"'
                    f'{_attr("data-arm", note.get("arm"))}>'
                    f'{html.escape(format_text(note.get("text")))}</li>'
                    for note in _notes(status))
    return f'<ul id="arm-notes">{items}</ul>' if items else ""


def _stylesheet() -> str:
    """The dashboard's style sheet, so that the report looks the same."""
    match = re.search(r"<style>(.*?)</style>", dashboard_page(), re.DOTALL)
    extra = ("svg.plot { display: block; max-width: 100%; height: auto; background: #fff;"
             " border-radius: 6px; }\n")
    return (match.group(1) if match else "") + extra


def html_report(status: dict) -> str:
    """The standalone HTML report of ``status`` as a string (see :func:`write_html`)."""
    arms = _arms(status)
    pairs = _pairs(status)
    name = format_text(status.get("experiment"))
    summary = [
        ("Mode", format_text(status.get("mode"))),
        ("Status", format_text(status.get("status"))),
        ("Impressions", format_int(status.get("impressions"))),
        ("Traffic share", format_traffic(status)),
        ("Promoted arm", format_text(status.get("promoted"))),
        ("Computed", format_time(status.get("updated"))),
    ]
    items = "\n".join(f"<div><dt>{html.escape(term)}</dt><dd>{html.escape(value)}</dd></div>"
                      for term, value in summary)
    test = (f'<div class="wide"><dt>Test</dt><dd>{html.escape(format_text(status.get("test")))}'
            f", &alpha; = {html.escape(format_number(status.get('alpha')))}</dd></div>")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{html.escape(name)} &middot; learner comparison</title>
<style>
{_stylesheet()}
</style>
</head>
<body>
<header class="page-header">
  <div>
    <p class="eyebrow">Learner comparison</p>
    <h1 id="experiment-name">{html.escape(name)}</h1>
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
<p class="note">{html.escape(_significance_note(status))}</p>
<div class="table-wrap">
{_pairs_table(pairs)}
</div>
<figure>
{_forest_plot(pairs)}
</figure>
</section>
<section class="card" aria-labelledby="arms-heading">
<h2 id="arms-heading">Arms</h2>
<p class="note">Metrics are shown with their 95% intervals.</p>
<div class="table-wrap">
{_arms_table(arms)}
</div>
{_notes_list(status)}
</section>
<section class="card" aria-labelledby="history-heading">
<h2 id="history-heading">Promotions and holds</h2>
<div class="table-wrap">
{_history_table(status)}
</div>
</section>
<section class="card" aria-labelledby="curves-heading">
<h2 id="curves-heading">Win rate over time</h2>
<figure>
{_curves_plot(arms)}
<figcaption class="note">Each arm&rsquo;s win rate per window against the impressions of the
experiment so far; the dashed line marks 0.5.</figcaption>
</figure>
</section>
</main>
</body>
</html>
"""


def write_html(status: dict, path: str | os.PathLike) -> Path:
    """Write the standalone HTML report of ``status`` (tables and plots inline, nothing
    fetched from elsewhere) to ``path``; returns the path."""
    target = Path(path)
    target.write_text(html_report(status), encoding="utf-8")
    return target
