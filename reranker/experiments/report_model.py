"""The experiment report as one typed model, computed once in Python from the status document
that ``GET /experiments`` answers (itself computed from the experiment's outcomes): every
number as it reads, every verdict and every sentence. The dashboard lays it out (it receives
it as the document's ``report``), and so do the terminal table and the standalone HTML report
(:mod:`reranker.experiments.report`); none of them computes a statistic, decides a verdict
or words a sentence of its own, so they cannot disagree.

The formatting rules: counts as integers, rates, intervals and p-values with three decimals,
p-values below 0.001 as ``<0.001`` and missing values (``null``) as an en dash. Every text
of the document is treated as untrusted: the renderers escape it and never read it as rich
markup.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

#: What a missing value (``null``) is shown as.
DASH = "\u2013"

#: Display names of the click measures the experiments report per arm (the document's
#: ``metrics``); other keys are shown as they are.
CLICK_MEASURE_NAMES = {"clicks_per_search": "Clicks per search",
                       "searches_with_click": "Searches with a click",
                       "abandonment": "Abandonment", "mrr": "MRR", "clicks_at_3": "Clicks@3"}

_THOUSANDTH = Decimal("0.001")


# ---- formatting ----

def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _fixed3(value: float) -> str:
    """Three decimals, rounded half away from zero on the exact binary value."""
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
    """A rate or measure value with three decimals; null as a dash."""
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


def format_measure(measure: Any) -> str:
    """A click measure ``{"value", "interval"}`` as ``value [lo, hi]`` (the interval when
    known)."""
    data = _mapping(measure)
    text = format_rate(data.get("value"))
    if interval_bounds(data.get("interval")) is not None:
        text += " " + format_interval(data.get("interval"))
    return text


def measure_name(key: str) -> str:
    """The column heading of a click measure."""
    return CLICK_MEASURE_NAMES.get(key, key.replace("_", " "))


def css_class(key: str) -> str:
    """A key as a CSS class: ``_`` and anything else outside ``[A-Za-z0-9-]`` as ``-``."""
    return re.sub(r"[^A-Za-z0-9-]", "-", key.replace("_", "-")) or "unnamed"


# ---- reading the document defensively ----

def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


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
    percent = f"{math.floor(100 * share + 0.5)}%" if _is_number(share) else DASH
    return (f"{percent} of {format_int(searches)} searches "
            f"({format_int(traffic.get('outside'))} outside the experiment; configured "
            f"share {format_number(traffic.get('configured_share'))})")


# ---- the model ----

@dataclass(frozen=True)
class Column:
    """A table's column: its heading, and whether it holds text (left-aligned) or numbers."""

    key: str
    heading: str
    text: bool = False


@dataclass(frozen=True)
class Cell:
    """One value as it reads (``text``) with the document's raw value (``value``, None when
    missing); ``css`` starts with the column's key. A click measure also has its interval as
    it reads (``detail``) and its raw bounds."""

    css: str
    text: str
    value: Any = None
    detail: str | None = None
    interval: tuple[float, float] | None = None


@dataclass(frozen=True)
class PairReport:
    """One comparison of two arms: its numbers, the verdict and the sentence saying it.

    ``verdict`` is ``beats`` (significant: ``leader`` won), ``ahead`` (``leader`` has more
    wins, not yet significant), ``even`` (as many wins as losses) or ``undecided`` (no
    decided comparison yet)."""

    arms: tuple[str, ...]
    label: str
    cells: tuple[Cell, ...]
    win_rate: float | None
    interval: tuple[float, float] | None
    significant: bool
    verdict: str
    leader: str | None
    sentence: str
    plot_label: str


@dataclass(frozen=True)
class CurvePoint:
    impressions: float
    value: float | None
    text: str


@dataclass(frozen=True)
class ArmReport:
    """One arm's row (``cells``, in the order of :attr:`ExperimentReport.arm_columns`), its
    colour's index, the id its learner has, its state as a CSS class, and its learning curve
    (win rate per window)."""

    label: str
    colour: int
    learner_id: str | None
    status_class: str
    cells: tuple[Cell, ...]
    curve: tuple[CurvePoint, ...]


@dataclass(frozen=True)
class HistoryEntry:
    action: str | None
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Note:
    """What a reader must not miss about an arm, in words (``kind``: warning or info)."""

    arm: str | None
    kind: str
    text: str


@dataclass(frozen=True)
class SummaryItem:
    key: str
    heading: str
    text: str
    css: str = ""


@dataclass(frozen=True)
class ExperimentReport:
    """The whole report: the summary, the pairs with their verdicts, the arms with their
    click measures, the notes, the promotions and holds (newest first) and the curves."""

    name: str
    title: str
    summary: tuple[SummaryItem, ...]
    test: str
    alpha: str
    significance_note: str
    pair_columns: tuple[Column, ...]
    pairs: tuple[PairReport, ...]
    arm_columns: tuple[Column, ...]
    arms: tuple[ArmReport, ...]
    notes: tuple[Note, ...]
    history_columns: tuple[Column, ...]
    history: tuple[HistoryEntry, ...]
    empty: Mapping[str, str] = field(default_factory=lambda: dict(EMPTY))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (tuples as lists), as the document's ``report``."""
        return dataclasses.asdict(self)


#: What a table or plot says while it has nothing to show.
EMPTY = {"pairs": "No comparisons yet.", "arms": "No arms.",
         "history": "No promotion or hold yet.", "curves": "No curve data yet."}

PAIR_COLUMNS = (Column("wins", "Wins"), Column("losses", "Losses"), Column("ties", "Ties"),
                Column("win-rate", "Win rate"), Column("interval", "95% interval"),
                Column("p-value", "Sign-test p"), Column("always-valid-p", "Always-valid p"),
                Column("significant", "Significant"), Column("winner", "Winner", text=True))

ARM_COLUMNS = (Column("learner", "Learner", text=True),
               Column("model-version", "Model version"), Column("learned", "Learned"),
               Column("impressions", "Impressions"), Column("clicks", "Clicks"),
               Column("credited-clicks", "Credited clicks"),
               Column("status", "Status", text=True))

HISTORY_COLUMNS = (Column("at", "When"), Column("action", "Action", text=True),
                   Column("arm", "Arm", text=True), Column("impressions", "Closed pages"),
                   Column("because", "Why", text=True))


AT_MOST = "\u2264"


def verdict(pair: Mapping[str, Any], alpha: Any) -> tuple[str, str | None, str]:
    """``(verdict, leader, sentence)`` of a pair (see :class:`PairReport`)."""
    arms = [format_text(arm) for arm in _list(pair.get("arms"))] or [DASH, DASH]
    first, second = (arms + [DASH])[:2]
    wins, losses = pair.get("wins"), pair.get("losses")
    numbers = (f"win rate of {first} {format_rate(pair.get('win_rate'))}, 95% interval "
               f"{format_interval(pair.get('interval'))}")
    p = pair.get("always_valid_p")

    def test(relation: str) -> str:
        """The always-valid p-value, and how it compares with alpha when it is known."""
        against = f" {relation} \u03b1 {format_number(alpha)}" if _is_number(p) else ""
        return f"always-valid p {format_p(p)}{against}"

    if not (_is_number(wins) and _is_number(losses)) or wins + losses == 0:
        return ("undecided", None,
                f"{first} vs {second}: no decided comparison yet "
                f"({format_int(pair.get('ties'))} ties).")
    if pair.get("significant") is True and pair.get("winner") is not None:
        # the arm ahead when the sequential test first rejected: the decision stands
        leader = format_text(pair.get("winner"))
        other = second if leader == first else first
        return ("beats", leader,
                f"{leader} beats {other}: {numbers}; significant ({test(AT_MOST)}).")
    if wins == losses:
        return ("even", None,
                f"{first} and {second} are even ({format_int(wins)} wins each); "
                f"not significant ({test('>')}).")
    leader, other = (first, second) if wins > losses else (second, first)
    return ("ahead", leader,
            f"{leader} is ahead of {other}: {numbers}; not yet significant "
            f"({test('>')}).")


def _pair(pair: Mapping[str, Any], alpha: Any) -> PairReport:
    arms = tuple(str(arm) for arm in _list(pair.get("arms")))
    label = " vs ".join(format_text(arm) for arm in _list(pair.get("arms")))
    significant = pair.get("significant") is True
    cells = (
        Cell("arms", label),
        Cell("wins", format_int(pair.get("wins")), pair.get("wins")),
        Cell("losses", format_int(pair.get("losses")), pair.get("losses")),
        Cell("ties", format_int(pair.get("ties")), pair.get("ties")),
        Cell("win-rate", format_rate(pair.get("win_rate")), pair.get("win_rate")),
        Cell("interval", format_interval(pair.get("interval")), pair.get("interval")),
        Cell("p-value", format_p(pair.get("p_value")), pair.get("p_value")),
        Cell("always-valid-p", format_p(pair.get("always_valid_p")),
             pair.get("always_valid_p")),
        Cell("significant yes" if significant else "significant",
             format_bool(pair.get("significant")), pair.get("significant")),
        Cell("winner text", format_text(pair.get("winner")), pair.get("winner")),
    )
    kind, leader, sentence = verdict(pair, alpha)
    rate = pair.get("win_rate")
    return PairReport(
        arms=arms, label=label, cells=cells,
        win_rate=rate if _is_number(rate) else None,
        interval=interval_bounds(pair.get("interval")), significant=significant,
        verdict=kind, leader=leader, sentence=sentence,
        plot_label=(f"{label}: win rate {format_rate(rate)}, 95% interval "
                    f"{format_interval(pair.get('interval'))}"))


def _measure_keys(arms: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every click measure key of any arm, in the order they first appear."""
    keys: list[str] = []
    for arm in arms.values():
        for key in _mapping(arm.get("metrics")):
            if str(key) not in keys:
                keys.append(str(key))
    return keys


def _curve(label: str, arm: Mapping[str, Any]) -> tuple[CurvePoint, ...]:
    """An arm's curve as sorted points; a missing value is None."""
    points = []
    for point in _list(arm.get("curve")):
        point = _mapping(point)
        x, y = point.get("impressions"), point.get("value")
        if _is_number(x):
            y = float(y) if _is_number(y) else None
            points.append(CurvePoint(float(x), y, f"{label}: {format_rate(y)} at "
                                                  f"{format_int(x)} impressions"))
    return tuple(sorted(points, key=lambda p: p.impressions))


def _arm(index: int, label: str, arm: Mapping[str, Any], keys: list[str]) -> ArmReport:
    measures = _mapping(arm.get("metrics"))
    cells = [
        Cell("label", label, label),
        Cell("learner text", format_text(arm.get("learner")), arm.get("learner")),
        Cell("model-version", format_int(arm.get("model_version")), arm.get("model_version")),
        Cell("learned", format_learned(arm), _mapping(arm.get("learning")).get("updates")),
        Cell("impressions", format_int(arm.get("impressions")), arm.get("impressions")),
        Cell("clicks", format_int(arm.get("clicks")), arm.get("clicks")),
        Cell("credited-clicks", format_int(arm.get("credited_clicks")),
             arm.get("credited_clicks")),
        Cell("status text", format_text(arm.get("status")), arm.get("status")),
    ]
    for key in keys:
        measure = _mapping(measures.get(key))
        bounds = interval_bounds(measure.get("interval"))
        cells.append(Cell(f"{css_class(key)} measure", format_rate(measure.get("value")),
                          measure.get("value"),
                          None if bounds is None else format_interval(bounds), bounds))
    learner_id, state = arm.get("id"), arm.get("status")
    return ArmReport(label, index, learner_id if isinstance(learner_id, str) else None,
                     css_class(state) if isinstance(state, str) else "", tuple(cells),
                     _curve(label, arm))


def build_report(status: Mapping[str, Any]) -> ExperimentReport:
    """The report of a status document (what ``GET /experiments`` answers)."""
    arms = {str(label): _mapping(arm) for label, arm in _mapping(status.get("arms")).items()}
    keys = _measure_keys(arms)
    name = format_text(status.get("experiment"))
    state = status.get("status")
    summary = (
        SummaryItem("mode", "Mode", format_text(status.get("mode"))),
        SummaryItem("status", "Status", format_text(state),
                    css_class(state) if isinstance(state, str) else ""),
        SummaryItem("impressions", "Impressions", format_int(status.get("impressions"))),
        SummaryItem("traffic", "Traffic share", format_traffic(status)),
        SummaryItem("promoted", "Promoted arm", format_text(status.get("promoted"))),
        SummaryItem("updated", "Computed", format_time(status.get("updated"))),
    )
    test, alpha = format_text(status.get("test")), format_number(status.get("alpha"))
    history = []
    for entry in reversed(_list(status.get("history"))):
        entry = _mapping(entry)
        action = entry.get("action")
        history.append(HistoryEntry(
            action if isinstance(action, str) else None,
            (Cell("at", format_time(entry.get("at")), entry.get("at")),
             Cell("action text", format_text(action), action),
             Cell("arm text", format_text(entry.get("arm")), entry.get("arm")),
             Cell("impressions", format_int(entry.get("impressions")),
                  entry.get("impressions")),
             Cell("because text", format_text(entry.get("because")), entry.get("because")))))
    notes = []
    for note in _list(status.get("notes")):
        note = _mapping(note)
        arm = note.get("arm")
        notes.append(Note(arm if isinstance(arm, str) else None,
                          "warning" if note.get("kind") == "warning" else "info",
                          format_text(note.get("text"))))
    return ExperimentReport(
        name=name,
        title=f"{'Experiment' if name == DASH else name} \u00b7 learner comparison",
        summary=summary, test=test, alpha=alpha,
        significance_note=(f"Test: {test}, alpha = {alpha}. \"Significant\" uses the "
                           "always-valid p-value (safe to watch continuously); the sign-test "
                           "p-value is for reference only."),
        pair_columns=(Column("arms", "Arms", text=True), *PAIR_COLUMNS),
        pairs=tuple(_pair(_mapping(pair), status.get("alpha"))
                    for pair in _list(status.get("pairs"))),
        arm_columns=(Column("label", "Arm", text=True), *ARM_COLUMNS,
                     *(Column(css_class(key), measure_name(key)) for key in keys)),
        arms=tuple(_arm(index, label, arm, keys) for index, (label, arm)
                   in enumerate(arms.items())),
        notes=tuple(notes),
        history_columns=HISTORY_COLUMNS,
        history=tuple(history),
    )


def with_report(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` with its report as ``report`` (what the dashboard lays out)."""
    document = {key: value for key, value in status.items() if key != "report"}
    document["report"] = build_report(document).to_json()
    return document
