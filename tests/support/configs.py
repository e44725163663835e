"""Config files for the tests: the generated corpus with section overrides, the documents to
index, and the experiments' arms."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

#: The tests simulate many users from one address, faster than any person: without limits
#: per client, nor the per-client budget of training, unless a test sets them (or passes
#: ``security=None`` for the defaults).
UNLIMITED = {"searches_per_minute": 0, "clicks_per_minute": 0, "client_budget": 0,
             "address_searches_per_minute": 0, "address_clicks_per_minute": 0,
             "address_budget": 0}


def write_config(folder: Path, **sections) -> Path:
    """A config file in ``folder`` for the generated corpus, with section overrides (None:
    the section's defaults)."""
    data = {
        "backend": {"type": "embedded", "path": "index", "fields": ["title", "body"]},
        "features": {"numeric_fields": ["popularity"]},
        "learner": {"name": "preference_perceptron", "params": {}},
        "store": {"path": "events.sqlite", "models": "models"},
        "trainer": {"feedback_window": 0.0, "interval": 0.1},
        "security": dict(UNLIMITED),
    }
    for name, values in sections.items():
        if values is None:
            data.pop(name, None)
        else:
            data.setdefault(name, {}).update(values)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def write_docs(folder: Path, documents) -> Path:
    path = folder / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps(doc) + "\n")
    return path


# -- experiments ---------------------------------------------------------------------------------

PERCEPTRON = {"name": "preference_perceptron", "params": {}}
RANDOM = {"name": "random"}
ENGINE = {"name": "backend_order"}


def experiment_config(workdir, mode="interleave", arms=None, store=None, trainer=None,
                      learner=None, **extra):
    arms = arms or {"perceptron": PERCEPTRON, "random": RANDOM}
    sections = {name: value for name, value in (("store", store), ("trainer", trainer),
                                                ("learner", learner)) if value}
    return write_config(workdir, experiment={"mode": mode, "name": "trial", "arms": arms,
                                             "window": 50, **extra}, **sections)
