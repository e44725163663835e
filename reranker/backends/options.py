"""What a search asks of its hits besides their order, checked once for every backend: the
fields of each hit's document to return, highlighted fragments of its text fields, and a
sort by a field instead of the learned order::

    "source": ["title", "price"]                       # only these fields (dotted paths, *)
    "source": {"include": ["*"], "exclude": ["internal.*"]}
    "source": false                                    # no document at all
    "highlight": ["title", "body"]                     # or, with its options:
    "highlight": {"fields": ["body"], "pre_tag": "<mark>", "post_tag": "</mark>",
                  "fragment_size": 120}
    "sort": [{"price": "asc"}]                         # or "price", or {"price": "desc"}

A highlight names searched text fields (``backend.fields``); each hit then carries
``"highlight": {FIELD: [FRAGMENT, ...]}`` for the fields where the query matched, its text
HTML-escaped and the matched words between the tags (Elasticsearch's own highlighter;
the embedded engine's snippets, one fragment per field). A sort names a filter or numeric
field (``backend.filter_fields``, ``features.numeric_fields``); the page is then the engine's
order by that field, documents without a value last, and no learner learns from it.
"""

from __future__ import annotations

import fnmatch
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reranker.backends.filters import bad_value
from reranker.core.errors import BadRequestError, field_path, quoted_path, shorten

#: Highlight tags when none are given (Elasticsearch's).
PRE_TAG, POST_TAG = "<em>", "</em>"
#: Characters of a highlighted fragment when no size is given (Elasticsearch's).
FRAGMENT_SIZE = 100
#: Bounds of ``fragment_size`` and of a tag's length.
MAX_FRAGMENT_SIZE, MAX_TAG_LENGTH = 10_000, 100
#: Paths in ``source``, at most.
MAX_SOURCE_PATHS = 100
#: The orders a sort takes.
ORDERS = ("asc", "desc")


@dataclass(frozen=True)
class SourceFields:
    """Which fields of a hit's document to return: paths matching ``include`` (all when
    empty) and no path matching ``exclude``; dotted paths reach into objects, ``*`` matches
    any characters. ``none`` returns no document."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    none: bool = False

    def apply(self, source: dict[str, Any]) -> dict[str, Any] | None:
        """The part of ``source`` to return (None for no document)."""
        if self.none:
            return None
        return _select(source, "", self.include, self.exclude)


@dataclass(frozen=True)
class Highlight:
    """Highlighted fragments asked for: the text fields, the tags around a matched word and
    the fragments' size in characters."""

    fields: tuple[str, ...]
    pre_tag: str = PRE_TAG
    post_tag: str = POST_TAG
    fragment_size: int = FRAGMENT_SIZE

    def mark(self, text: str, spans: Sequence[tuple[int, int]]) -> str:
        """``text`` HTML-escaped, with the character ``spans`` between the tags."""
        out, at = [], 0
        for start, end in sorted(spans):
            if start < at or end <= start:
                continue
            out += [html.escape(text[at:start]), self.pre_tag, html.escape(text[start:end]),
                    self.post_tag]
            at = end
        out.append(html.escape(text[at:]))
        return "".join(out)


@dataclass(frozen=True)
class SortKey:
    """A sort by ``field``, ``asc`` or ``desc``."""

    field: str
    order: str = "asc"

    def to_dict(self) -> dict[str, str]:
        return {self.field: self.order}


def parse_source(raw: Any) -> SourceFields | None:
    """Check a search's ``source``: true (the whole document, as without it), false, a list
    of paths, or ``{"include": [...], "exclude": [...]}``; None when the whole document is
    returned."""
    if raw is None or raw is True:
        return None
    if raw is False:
        return SourceFields(none=True)
    if isinstance(raw, list):
        return SourceFields(include=_paths(raw, ["source"]))
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"include", "exclude"})
        if unknown:
            raise bad_value(["source", unknown[0]], "is not a key of source (include, exclude)")
        return SourceFields(include=_paths(raw.get("include", []), ["source", "include"]),
                            exclude=_paths(raw.get("exclude", []), ["source", "exclude"]))
    raise bad_value(["source"], f"must be true, false, a list of field paths or {{\"include\": "
                           f"[...], \"exclude\": [...]}}, got {shorten(raw)}")


def parse_highlight(raw: Any, text_fields: Sequence[str]) -> Highlight | None:
    """Check a search's ``highlight``: a list of text fields, or ``{"fields": [...],
    "pre_tag", "post_tag", "fragment_size"}``."""
    if raw is None:
        return None
    options: dict[str, Any] = {}
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"fields", "pre_tag", "post_tag", "fragment_size"})
        if unknown:
            raise bad_value(["highlight", unknown[0]], "is not a key of highlight (fields, "
                                                  "pre_tag, post_tag, fragment_size)")
        options = {k: v for k, v in raw.items() if k != "fields"}
        fields, path = raw.get("fields"), ["highlight", "fields"]
    else:
        fields, path = raw, ["highlight"]
    if not isinstance(fields, list) or not fields:
        raise bad_value(path, f"must be a non-empty list of text fields, got {shorten(fields)}")
    for i, name in enumerate(fields):
        if name not in text_fields:
            raise bad_value([*path, i], f"is {shorten(name)}, not a searched text field (text "
                                   f"fields: {', '.join(text_fields)})")
    if len(set(fields)) != len(fields):
        raise bad_value(path, "names a field twice")
    for tag in ("pre_tag", "post_tag"):
        value = options.get(tag)
        if value is not None and not (isinstance(value, str)
                                      and len(value) <= MAX_TAG_LENGTH):
            raise bad_value(["highlight", tag], f"must be a string of at most {MAX_TAG_LENGTH} "
                                           f"characters, got {shorten(value)}")
    size = options.get("fragment_size", FRAGMENT_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) \
            or not 1 <= size <= MAX_FRAGMENT_SIZE:
        raise bad_value(["highlight", "fragment_size"], f"must be an integer from 1 to "
                                                   f"{MAX_FRAGMENT_SIZE}, got {shorten(size)}")
    return Highlight(tuple(fields), options.get("pre_tag") or PRE_TAG,
                     options.get("post_tag") or POST_TAG, size)


def parse_sort(raw: Any, sortable: Sequence[str]) -> tuple[SortKey, ...]:
    """Check a search's ``sort``: a field name, ``{FIELD: "asc" | "desc"}``, or a list of
    either (the first decides, the next break its ties)."""
    if raw is None:
        return ()
    entries = raw if isinstance(raw, list) else [raw]
    if not entries:
        raise bad_value(["sort"], "must name at least one field")
    keys: list[SortKey] = []
    for i, entry in enumerate(entries):
        path: list[str | int] = ["sort", i] if isinstance(raw, list) else ["sort"]
        if isinstance(entry, str):
            name, order = entry, "asc"
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, order), = entry.items()
            path = [*path, name]
            if order not in ORDERS:
                raise bad_value(path, f"must be \"asc\" or \"desc\", got {shorten(order)}")
        else:
            raise bad_value(path, f"must be a field name or {{FIELD: \"asc\" | \"desc\"}}, got "
                             f"{shorten(entry)}")
        if name not in sortable:
            known = ", ".join(sortable) if sortable else \
                "none: set backend.filter_fields or features.numeric_fields"
            raise BadRequestError(f"{quoted_path(path)}: {shorten(name)} is not a field a "
                                  f"search can sort by (filter and numeric fields: {known})",
                                  field=field_path(path))
        if any(key.field == name for key in keys):
            raise bad_value(["sort"], "names a field twice")
        keys.append(SortKey(name, order))
    return tuple(keys)


def _paths(raw: Any, path: list[str | int]) -> tuple[str, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_SOURCE_PATHS:
        raise bad_value(path, f"must be a list of at most {MAX_SOURCE_PATHS} field paths, got "
                         f"{shorten(raw)}")
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not item:
            raise bad_value([*path, i], f"must be a field path such as \"title\" or "
                                   f"\"author.name\", got {shorten(item)}")
    return tuple(raw)


def _select(value: dict[str, Any], prefix: str, include: tuple[str, ...],
            exclude: tuple[str, ...]) -> dict[str, Any]:
    """The keys of ``value`` (at dotted ``prefix``) that ``include`` and ``exclude`` keep:
    a key whose path an include pattern matches is kept whole (less what an exclude
    pattern matches within it); an object that a pattern may still reach into is walked."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}{key}"
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in exclude):
            continue
        inside = f"{path}."
        kept = not include or any(fnmatch.fnmatchcase(path, p) for p in include)
        if isinstance(item, dict) and (
                (not kept and any(p.startswith(inside) or "*" in p for p in include))
                or (kept and any(p.startswith(inside) or "*" in p for p in exclude))):
            inner = _select(item, inside, () if kept else include, exclude)
            if inner or kept:
                out[key] = inner
        elif kept:
            out[key] = item
    return out
