"""``reranker judgments``: relevance judgments per (query, document) from the logged clicks,
corrected for position (:mod:`reranker.evaluation.judgments`), in the formats of the tools
that evaluate rankings against a judgment list."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import IO

import click

from reranker.commands.console import output_file
from reranker.commands.options import config_option, window_options
from reranker.core.config import load_config

#: The formats, and whether each needs graded judgments (COEC's figures are not on a scale).
FORMATS = {"json": False, "csv": False, "srw": False, "quepid": True, "trec": True,
           "rank-eval": True}
#: The columns of the csv format.
COLUMNS = ("query", "doc_id", "impressions", "clicks", "expected", "estimate", "low", "high",
           "grade")


@click.command()
@config_option
@window_options
@click.option("--min-impressions", type=click.IntRange(min=1), default=10, show_default=True,
              help="Judge a document for a query once it was shown on this many pages.")
@click.option("--confidence", type=click.FloatRange(0.5, 1.0, max_open=True), default=0.95,
              show_default=True, help="Of each judgment's interval.")
@click.option("--scale", type=click.IntRange(min=2, max=10), default=4, show_default=True,
              help="Grades of the graded formats (0 to SCALE-1): the estimate, a click rate "
                   "where users look, cut in SCALE equal parts.")
@click.option("--estimator", type=click.Choice(["debiased", "coec"]), default="debiased",
              show_default=True,
              help="debiased: clicks over the examination of the ranks shown at, from the "
                   "randomised pairs; coec: clicks over the mean click-through rate of those "
                   "ranks (for comparison).")
@click.option("--format", "output", type=click.Choice(list(FORMATS)), default="json",
              show_default=True,
              help="json or csv (every figure); srw (OpenSearch Search Relevance Workbench's "
                   "imported judgments); quepid (CSV query,docid,rating); trec (qrels, with "
                   "the query numbers in OUT.topics); rank-eval (an Elasticsearch _rank_eval "
                   "body).")
@click.option("--index", "index_name", default=None,
              help="rank-eval: the concrete index the ratings name (_rank_eval matches a "
                   "hit's own index; default backend.index, which must then not be an alias "
                   "or a pattern).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              default=None, help="Write to this file instead of standard output.")
def judgments(config_path: str | None, days: float | None, arm: str | None,
              min_impressions: int, confidence: float, scale: int, estimator: str,
              output: str, index_name: str | None, out_path: str | None) -> None:
    """Relevance judgments from the clicks the event store logged, per normalised query and
    document: how often users click the document where they look at it, with the rank it
    was shown at corrected for (the examination of each rank is estimated from the pages'
    randomised pairs), the pages and clicks behind it and an interval. Reads the closed
    pages; the service may be running.
    """
    from reranker.core.plugins import get_plugin_manager
    from reranker.evaluation.analytics import arm_names
    from reranker.evaluation.judgments import judgments as judge
    from reranker.evaluation.judgments import tally_pages
    from reranker.models.arms import arms_from_config
    from reranker.stores import open_event_store

    if estimator == "coec" and FORMATS[output]:
        raise click.BadParameter(f"--format {output} needs graded judgments, and COEC's "
                                 f"figures are relative to the average result, not grades: "
                                 f"use json, csv or srw", param_hint="--estimator")
    config = load_config(config_path)
    pm = get_plugin_manager()
    arms = arm_names(arms_from_config(config, pm), arm) if arm is not None else None
    since = time.time() - days * 86400.0 if days is not None else 0.0
    events = open_event_store(config, pm, existing=True)
    try:
        tally = tally_pages(events, since, arms)
        bias = events.position_bias(0.0)
        found = list(judge(tally, bias, estimator=estimator, min_impressions=min_impressions,
                           confidence=confidence))
        waiting = events.stats()["open_impressions"]
    finally:
        events.close()
    graded = estimator == "debiased"
    with output_file(out_path) as handle:
        write(output, found, handle, scale=scale if graded else None, config=config,
              index=index_name,
              meta={"estimator": estimator, "confidence": confidence,
                    "min_impressions": min_impressions, "pages": tally.pages,
                    "examination": [round(float(t), 4) for t in bias.weights(
                        max(tally.max_rank(), 1))]})
    if output == "trec" and out_path:
        write_topics(found, Path(out_path + ".topics"))
    queries = len({j.query for j in found})
    click.echo(f"{len(found)} judgments of {queries} queries from {tally.pages} pages"
               + (f" ({waiting} more pages are inside their feedback window)" if waiting
                  else ""), err=True)
    if not found:
        click.echo(f"no document was shown on {min_impressions} pages of one query yet: "
                   f"lower --min-impressions, or wait for more searches", err=True)
    if out_path:
        click.echo(f"written: {out_path}", err=True)


def query_numbers(found) -> dict[str, int]:
    """Each query's number (1, 2, ...: the order of the judgments)."""
    numbers: dict[str, int] = {}
    for judgment in found:
        numbers.setdefault(judgment.query, len(numbers) + 1)
    return numbers


def write_topics(found, path: Path) -> None:
    path.write_text("".join(f"{n}\t{query}\n" for query, n in query_numbers(found).items()),
                    encoding="utf-8")


def write(output: str, found, handle: IO[str], *, scale: int | None, config, meta: dict,
          index: str | None = None) -> None:
    """The judgments ``found`` in format ``output``."""
    def grade(judgment):
        return judgment.grade(scale) if scale is not None else None

    if output == "json":
        rows = [{**j.to_dict(), "grade": grade(j)} for j in found]
        handle.write(json.dumps({**meta, "scale": scale, "judgments": rows}, indent=1,
                                allow_nan=False) + "\n")
    elif output == "csv":
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for j in found:
            writer.writerow([j.query, j.doc_id, j.impressions, j.clicks, f"{j.expected:.4f}",
                             f"{j.estimate:.4f}", f"{j.low:.4f}", f"{j.high:.4f}",
                             "" if scale is None else grade(j)])
    elif output == "quepid":
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["query", "docid", "rating"])
        for j in found:
            writer.writerow([j.query, j.doc_id, grade(j)])
    elif output == "trec":
        numbers = query_numbers(found)
        for j in found:
            handle.write(f"{numbers[j.query]} 0 {j.doc_id} {grade(j)}\n")
    elif output == "srw":
        lists: dict[str, list] = {}
        for j in found:
            lists.setdefault(j.query, []).append(
                {"docId": j.doc_id, "rating": f"{min(max(j.estimate, 0.0), 1.0):.3f}"})
        body = {"name": f"reranker {meta['estimator']} judgments "
                        f"{time.strftime('%Y-%m-%d', time.gmtime())}",
                "description": f"From clicks on {meta['pages']} pages, documents shown on "
                               f"{meta['min_impressions']} pages or more",
                "type": "IMPORT_JUDGMENT",
                "judgmentRatings": [{"query": query, "ratings": ratings}
                                    for query, ratings in lists.items()]}
        handle.write(json.dumps(body, indent=1) + "\n")
    else:  # rank-eval
        index = index or config.backend.get("index") or "index"
        fields = list(config.backend.fields)
        numbers = query_numbers(found)
        requests: dict[str, dict] = {}
        for j in found:
            request = requests.setdefault(j.query, {
                "id": f"q{numbers[j.query]}",
                "request": {"query": {"multi_match": {"query": j.query, "fields": fields}}},
                "ratings": []})
            request["ratings"].append({"_index": index, "_id": j.doc_id, "rating": grade(j)})
        body = {"requests": list(requests.values()),
                "metric": {"dcg": {"k": 10, "normalize": True}}}
        handle.write(json.dumps(body, indent=1) + "\n")
