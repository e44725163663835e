"""``reranker rules``: list, add and remove query rules (pin or hide a result for a query),
kept with the models (:mod:`reranker.models.rules`)."""

from __future__ import annotations

import click

from reranker.commands.options import CommandGroup, config_option, wide_console
from reranker.core.config import load_config


def _book(config_path: str | None):
    from reranker.models.database_store import model_place
    from reranker.models.rules import RuleBook

    return RuleBook(model_place(load_config(config_path).store))


def _pin(value: str) -> tuple[str, int]:
    doc_id, _, rank = value.rpartition(":")
    if not doc_id or not rank.isdigit() or int(rank) < 1:
        raise click.BadParameter(f"{value!r} is not DOC_ID:RANK (a rank from 1, e.g. "
                                 f"d42:1)", param_hint="--pin")
    return doc_id, int(rank)


@click.group(cls=CommandGroup)
def rules() -> None:
    """Pin results at a rank or hide them for a query, on top of the learned ranking.

    Every arm honours the rules, a running service reads a change within a second, and
    `POST /explain` shows which rules a search matched. A page whose order a pin changed is
    learned from by no learner. The rules live beside the models: store.models/rules.json,
    or the database with store.model_store: database.
    """


@rules.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_rules(config_path: str | None, as_json: bool) -> None:
    """List the rules, oldest first."""
    import json

    from rich.table import Table

    from reranker.experiments.report_model import format_time

    book = _book(config_path)
    found = book.read()
    if as_json:
        click.echo(json.dumps([rule.to_dict() for rule in found], indent=1))
        return
    if not found:
        click.echo(f"no query rules in {book.path}")
        return
    table = Table()
    for name in ("Id", "Query", "Match", "Pins", "Hides", "Note", "Added"):
        table.add_column(name)
    for rule in found:
        table.add_row(rule.id, rule.query, rule.match,
                      ", ".join(f"{doc_id} at {rank}" for doc_id, rank in rule.pins) or "-",
                      ", ".join(rule.hide) or "-", rule.note or "-", format_time(rule.created))
    wide_console().print(table)


@rules.command("add")
@config_option
@click.option("--query", "-q", required=True, help="The search the rule is for.")
@click.option("--match", type=click.Choice(["is", "contains", "starts_with"]), default="is",
              show_default=True,
              help="is: the same words; contains: the words appear together in a search; "
                   "starts_with: a search starts with them (compared case- and "
                   "punctuation-blind, as the click counts compare queries).")
@click.option("--pin", "pins", multiple=True, metavar="DOC_ID:RANK",
              help="Show DOC_ID at RANK (1 is the top), when the engine retrieved it for the "
                   "search; repeatable.")
@click.option("--hide", "hides", multiple=True, metavar="DOC_ID",
              help="Never show DOC_ID for the search; repeatable.")
@click.option("--note", default="", help="Why the rule exists (shown by `rules list`).")
def add_rule(config_path: str | None, query: str, match: str, pins: tuple[str, ...],
             hides: tuple[str, ...], note: str) -> None:
    """Add a rule. Example: reranker rules add -q "summer sale" --pin d42:1 --hide d7"""
    rule = _book(config_path).add(query, match=match, pins=[_pin(p) for p in pins],
                                  hide=hides, note=note)
    parts = [f"pins {doc_id} at {rank}" for doc_id, rank in rule.pins]
    parts += [f"hides {doc_id}" for doc_id in rule.hide]
    click.echo(f"added rule {rule.id}: {rule.searches()}: {', '.join(parts)}")


@rules.command("remove")
@config_option
@click.argument("rule_id")
def remove_rule(config_path: str | None, rule_id: str) -> None:
    """Remove the rule RULE_ID (as `rules list` shows it)."""
    rule = _book(config_path).remove(rule_id)
    click.echo(f"removed rule {rule.id} ({rule.searches()})")
