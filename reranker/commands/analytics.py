"""``reranker analytics``: what users searched and clicked over the last days, from the event
store (:mod:`reranker.evaluation.analytics`), as tables, CSV or JSON."""

from __future__ import annotations

import csv
import json
from typing import IO, Any

import click

from reranker.commands.console import output_file
from reranker.commands.options import config_option
from reranker.core.config import load_config

#: Headings of the figures in the tables.
HEADINGS = {"query": "query", "searches": "searches", "pages": "pages", "clicks": "clicks",
            "ctr": "CTR", "mean_click_rank": "mean click rank", "no_result": "no result",
            "no_click": "no click", "moved": "moved"}
#: Characters of the widest bar of the click-rank distribution.
BAR_WIDTH = 40


@click.command()
@config_option
@click.option("--days", type=float, default=None,
              help="The window: pages logged in the last DAYS days (0.5 is twelve hours; "
                   "default 7).")
@click.option("--top", type=int, default=None, help="Queries per list (1 to 1000; default "
              "20).")
@click.option("--arm", "arm", metavar="LABEL", default=None,
              help="Only the pages this arm showed alone (an experiment's arm label, or the "
                   "learner's name without an experiment); default: every page.")
@click.option("--format", "output", type=click.Choice(["table", "csv", "json"]),
              default="table", show_default=True,
              help="Tables for reading; CSV (one row per query and list, and one per clicked "
                   "rank) or JSON (what GET /analytics answers) for other tools.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="Write to this file instead of standard output.")
def analytics(config_path: str | None, days: float | None, top: int | None, arm: str | None,
              output: str, out_path: str | None) -> None:
    """What users searched and where they clicked, from the event store: the top queries,
    the queries without results and without clicks (with each query's searches, pages,
    clicks, click-through rate and mean click rank), the clicks by rank, and the queries
    whose served ranking moved furthest from the engine's order. Queries are counted in
    their normalised form (case, spacing and punctuation aside). Reads the event store; the
    service may be running.
    """
    from reranker.core.plugins import get_plugin_manager
    from reranker.evaluation.analytics import arm_names, check_window, search_analytics
    from reranker.models.arms import arms_from_config
    from reranker.stores import open_event_store

    days, top = check_window(days, top)
    config = load_config(config_path)
    pm = get_plugin_manager()
    arms = arm_names(arms_from_config(config, pm), arm) if arm is not None else None
    events = open_event_store(config, pm, existing=True)
    try:
        report = search_analytics(events, days, arms=arms, arm=arm, top=top).to_dict()
    finally:
        events.close()
    with output_file(out_path) as handle:
        if output == "json":
            handle.write(json.dumps(report, indent=1, allow_nan=False) + "\n")
        elif output == "csv":
            write_csv(report, handle)
        else:
            render_tables(report, handle, color=out_path is None and handle.isatty())
    if not report["totals"]["pages"] and output != "table":
        click.echo(_nothing(report), err=True)
    if out_path:
        click.echo(f"written: {out_path}", err=True)


def _nothing(report: dict[str, Any]) -> str:
    arm = f" by arm {report['arm']}" if report["arm"] else ""
    return (f"no search was logged{arm} in the last {report['days']:g} days (since "
            f"{report['since']}): nothing to count")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def write_csv(report: dict[str, Any], handle: IO[str]) -> None:
    """One table: a row per query of each list (``section`` says which), then a row per
    rank of the click-rank distribution (``section`` click_ranks, with ``rank`` and
    ``clicks``)."""
    from reranker.evaluation.analytics import COLUMNS, SECTIONS

    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(["section", "rank", *COLUMNS])
    for section in SECTIONS:
        for query in report[section.key]:
            writer.writerow([section.key, "", *("" if query[name] is None else query[name]
                                                for name in COLUMNS)])
    clicks = COLUMNS.index("clicks")
    for entry in report["click_ranks"]:
        row = [""] * len(COLUMNS)
        row[clicks] = entry["clicks"]
        writer.writerow(["click_ranks", entry["rank"], *row])


def render_tables(report: dict[str, Any], handle: IO[str], *, color: bool = False) -> None:
    """The totals, each list and the click-rank distribution as tables."""
    from rich.console import Console
    from rich.table import Table

    from reranker.evaluation.analytics import COLUMNS, SECTIONS

    console = Console(file=handle, width=1000 if not color else None, color_system=None
                      if not color else "auto", highlight=False)
    arm = f", arm {report['arm']}" if report["arm"] else ""
    console.print(f"Search analytics: {report['since']} to {report['until']} "
                  f"({report['days']:g} days{arm})")
    if not report["totals"]["pages"]:
        console.print(_nothing(report))
        return
    totals = Table(title="All queries", title_justify="left")
    for name in report["totals"]:
        totals.add_column(HEADINGS.get(name, name), justify="right")
    totals.add_row(*(_cell(value) for value in report["totals"].values()))
    console.print(totals)
    for section in SECTIONS:
        table = Table(title=section.title, title_justify="left")
        for name in COLUMNS:
            table.add_column(HEADINGS[name], justify="left" if name == "query" else "right",
                             overflow="fold")
        for query in report[section.key]:
            table.add_row(*(_cell(query[name]) for name in COLUMNS))
        if not report[section.key]:
            table.add_row("(none)", *[""] * (len(COLUMNS) - 1))
        console.print(table)
    console.print(rank_table(report["click_ranks"]))


def rank_table(ranks: list[dict[str, int]]):
    """The click-rank distribution, a bar per rank."""
    from rich.table import Table

    table = Table(title="Clicks by rank", title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("clicks", justify="right")
    table.add_column("share", justify="right")
    table.add_column("", justify="left")
    total = sum(entry["clicks"] for entry in ranks)
    most = max((entry["clicks"] for entry in ranks), default=0)
    for entry in ranks:
        share = entry["clicks"] / total if total else 0.0
        bar = "#" * round(BAR_WIDTH * entry["clicks"] / most) if most else ""
        table.add_row(str(entry["rank"]), str(entry["clicks"]), f"{share:.1%}", bar)
    return table

