"""``reranker index``: load documents into the configured backend."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from reranker.commands.options import config_option
from reranker.core.config import load_config


@click.command()
@config_option
@click.argument("documents", type=click.Path(dir_okay=False))
@click.option("--recreate", is_flag=True, help="Delete the index and build it anew.")
def index(config_path: str | None, documents: str, recreate: bool) -> None:
    """Load DOCUMENTS (JSON Lines, one object per line with an id and text fields) into the
    configured search backend. Documents with an id already in the index replace it."""
    from reranker.backends.documents import checked_documents, read_jsonl
    from reranker.commands.console import progress_bar
    from reranker.core.errors import DataError
    from reranker.core.plugins import backend_class, get_plugin_manager

    config = load_config(config_path)
    if not Path(documents).is_file():  # before the backend creates anything
        raise DataError(f"document file {documents} does not exist")
    backend = backend_class(get_plugin_manager(), config.backend.type)(config)
    unreadable: list[tuple[str, str]] = []
    # (checked before the backend writes or deletes anything)
    checked = checked_documents(read_jsonl(documents, unreadable), config, unreadable,
                                source=documents,
                                adding=not recreate and backend.index_exists() is True,
                                takes_as_number=backend.takes_as_number)
    with progress_bar("indexing documents") as advance:
        report = backend.index_documents(checked, recreate=recreate, progress=advance)
    report.failed[:0] = unreadable
    for where, why in report.failed[:20]:
        click.echo(f"failed: {where}: {why}", err=True)
    if len(report.failed) > 20:
        click.echo(f"... and {len(report.failed) - 20} more failures", err=True)
    click.echo(f"indexed {report.indexed} documents into the {config.backend.type} backend"
               + (f"; {len(report.failed)} failed" if report.failed else ""))
    if report.filter_types:
        click.echo("filter fields, typed from the documents: " + ", ".join(
            f"{name} ({kind})" for name, kind in report.filter_types.items()))
    if report.failed or not report.indexed:
        sys.exit(1)
