"""``reranker ubi``: the event log in the User Behavior Insights schema
(:mod:`reranker.evaluation.ubi`), as JSON lines or into the cluster's ``ubi_*`` indices."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from reranker.commands.options import config_option, window_options
from reranker.core.config import load_config


@click.group()
def ubi() -> None:
    """User Behavior Insights (UBI 1.3): the logged searches and clicks as UBI queries and
    events."""


@ubi.command("export")
@config_option
@window_options
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write ubi_queries.jsonl and ubi_events.jsonl into this folder (made if "
                   "missing).")
@click.option("--to-cluster", is_flag=True,
              help="Index them into the search cluster's ubi_queries and ubi_events indices "
                   "(the Elasticsearch backend's connection).")
@click.option("--application", default="reranker", show_default=True,
              help="The UBI application name of every record.")
@click.option("--impression-events/--no-impression-events", default=True, show_default=True,
              help="An 'impression' event per shown result besides the 'click' events (what "
                   "the Search Relevance Workbench's click models count).")
def export(config_path: str | None, days: float | None, arm: str | None,
           out_dir: Path | None, to_cluster: bool, application: str,
           impression_events: bool) -> None:
    """Every closed page as a UBI query (its id, query, client, shown results in order, and
    the arm, learner, model version and randomised pairs that served it), its clicks, and
    each shown result, as UBI events with their ranks."""
    from reranker.core.plugins import backend_class, get_plugin_manager
    from reranker.evaluation.analytics import arm_names
    from reranker.evaluation.ubi import EVENTS_INDEX, QUERIES_INDEX, ubi_records
    from reranker.models.arms import arms_from_config
    from reranker.stores import open_event_store

    if (out_dir is None) == (not to_cluster):
        raise click.UsageError("give one of --out-dir FOLDER and --to-cluster")
    if len(application) > 100:
        raise click.BadParameter("at most 100 characters (UBI's bound)",
                                 param_hint="--application")
    config = load_config(config_path)
    pm = get_plugin_manager()
    arms = arm_names(arms_from_config(config, pm), arm) if arm is not None else None
    backend = None
    if to_cluster:
        kind = backend_class(pm, config.backend.type)
        if not hasattr(kind, "write_records"):
            raise click.UsageError(f"backend.type {config.backend.type} has no cluster to "
                                   f"write UBI indices into: use --out-dir")
        backend = kind(config)
    since = time.time() - days * 86400.0 if days is not None else 0.0
    events = open_event_store(config, pm, existing=True)
    try:
        records = ubi_records(events, since, arms, application=application,
                              impressions=impression_events)
        if backend is not None:
            written = backend.write_records(records)
        else:
            out_dir.mkdir(parents=True, exist_ok=True)
            written = {QUERIES_INDEX: 0, EVENTS_INDEX: 0}
            with open(out_dir / f"{QUERIES_INDEX}.jsonl", "w", encoding="utf-8") as queries, \
                    open(out_dir / f"{EVENTS_INDEX}.jsonl", "w", encoding="utf-8") as others:
                files = {QUERIES_INDEX: queries, EVENTS_INDEX: others}
                for index, record in records:
                    files[index].write(json.dumps(record, allow_nan=False) + "\n")
                    written[index] += 1
    finally:
        events.close()
        if backend is not None:
            backend.close()
    where = "the cluster" if to_cluster else str(out_dir)
    click.echo(f"{written.get(QUERIES_INDEX, 0)} UBI queries and {written.get(EVENTS_INDEX, 0)} "
               f"events written to {where}")


@ubi.command("import")
@config_option
@click.argument("queries", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--actions", default="click,click_through", show_default=True,
              help="The event actions counted as clicks (comma-separated; add_to_cart or "
                   "purchase too, if those are what your site calls a success).")
def import_(config_path: str | None, queries: Path, events: Path, actions: str) -> None:
    """Log UBI queries (JSON lines, one per search, with query_response_hit_ids) and their
    click events (JSON lines) into the event store as pages with clicks: they count in the
    click features (each query's clicks refine its ranking once they judge a result, as the
    service's own pages do), search analytics and judgments. No learner updates its model
    from them: without randomised pairs their clicks would teach the position bias.
    Queries imported before are skipped. Export them from OpenSearch with any tool that
    writes an index as JSON lines (the _source of each document per line)."""
    from reranker.core.plugins import get_plugin_manager
    from reranker.evaluation.ubi import import_ubi, json_lines
    from reranker.features.extraction import FeatureSpec
    from reranker.stores import open_event_store

    wanted = tuple(a.strip() for a in actions.split(",") if a.strip())
    if not wanted:
        raise click.BadParameter("name at least one action", param_hint="--actions")
    config = load_config(config_path)
    names = FeatureSpec.from_config(config).names
    store = open_event_store(config, get_plugin_manager())
    try:
        report = import_ubi(store, json_lines(queries), json_lines(events), names,
                            actions=wanted)
    finally:
        store.close()
    for problem in report.bad[:10]:
        click.echo(f"skipped: {problem}", err=True)
    if len(report.bad) > 10:
        click.echo(f"skipped {len(report.bad) - 10} more records that are not UBI", err=True)
    click.echo(f"imported {report.pages} UBI queries as pages with {report.clicks} clicks "
               f"({', '.join(wanted)}); no learner updates from them (no randomised pairs)")
    notes = [(report.known, "queries imported before"),
             (report.no_results, "queries without results"),
             (report.later_pages, "queries of a later page (their ranks do not start at 1)"),
             (report.not_shown, "click events on a result the query did not show (or not "
                                "at the rank it was shown)"),
             (report.orphans, "click events of a query not in the queries file"),
             (report.refused, "clicks the store refused (their page already closed)")]
    for count, what in notes:
        if count:
            click.echo(f"skipped {count} {what}", err=True)
