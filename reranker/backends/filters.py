"""Per-search filters and facets, checked once for every backend.

A search may narrow its candidates with structured clauses, all of which must hold::

    "filter": [{"term": {"category": "tea"}},
               {"terms": {"brand": ["acme", "zeta"]}},
               {"range": {"price": {"gte": 5, "lte": 20}}}]

A range's bounds are numbers, or on a date field ISO 8601 dates and date-times
(``"2010-01-01"``, ``"2010-01-01T09:30:00Z"``; UTC when no offset is given) or epoch
milliseconds. :func:`check_clause_types` refuses a clause that cannot match its field's type
(a range on a keyword, a date on a number field), on every backend alike.

and ask for facets, the counts of each value of a field over every matching document::

    "facets": ["category", "brand"]   ->   "facets": {"category": {"tea": 12, ...}, ...}

Only the fields of ``backend.filter_fields`` may be named, so a client can neither filter
on a field the index does not hold for filtering nor probe arbitrary fields. The clauses are
data: each backend builds its own query objects from them (the user's values are never
parsed as query syntax).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reranker.core.errors import BadRequestError, field_path, quoted_path, shorten
from reranker.core.suggest import did_you_mean
from reranker.core.times import epoch_millis, iso_text

#: The bounds a range clause takes.
RANGE_BOUNDS = ("gte", "gt", "lte", "lt")
#: Values of one ``terms`` clause, at most.
MAX_TERMS = 1000
#: Characters of one string value of a clause, at most.
MAX_VALUE_LENGTH = 1000
#: Values per facet, at most (the most frequent first).
FACET_SIZE = 100
#: Ranges of one range facet, at most.
MAX_RANGES = 100
#: The prefixes of the facet aggregations' names in a search request: value counts, range
#: counts, stats.
FACET_PREFIX, RANGES_PREFIX, STATS_PREFIX = \
    "reranker_facet:", "reranker_ranges:", "reranker_stats:"

Scalar = str | int | float | bool


@dataclass(frozen=True)
class Clause:
    """One filter clause: ``kind`` is ``term``, ``terms`` or ``range``; ``values`` holds the
    accepted values (one for ``term``), ``bounds`` the range's bounds by name."""

    kind: str
    field: str
    values: tuple[Scalar, ...] = ()
    #: numbers, or ISO 8601 text for a date field (kept as given: Elasticsearch reads it)
    bounds: tuple[tuple[str, float | str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The clause in the request's form (Elasticsearch's Query DSL has the same)."""
        if self.kind == "term":
            return {"term": {self.field: self.values[0]}}
        if self.kind == "terms":
            return {"terms": {self.field: list(self.values)}}
        return {"range": {self.field: dict(self.bounds)}}


def parse_filters(raw: Any, allowed: tuple[str, ...]) -> tuple[Clause, ...]:
    """Check the ``filter`` of a search; a :class:`BadRequestError` names the clause."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequestError(f"'filter' must be a list of clauses such as "
                              f"{{\"term\": {{FIELD: VALUE}}}}, got {shorten(raw)}",
                              field="filter")
    return tuple(_clause(item, i, allowed) for i, item in enumerate(raw))


def _clause(item: Any, i: int, allowed: tuple[str, ...]) -> Clause:
    path: list[str | int] = ["filter", i]
    if not isinstance(item, dict) or len(item) != 1:
        raise bad_value(path, "must be an object with one of term, terms, range, got "
                         f"{shorten(item)}")
    (kind, spec), = item.items()
    if kind not in ("term", "terms", "range"):
        raise BadRequestError(f"{quoted_path(path)}: unknown clause {quoted_path([kind])} "
                              f"(known: term, terms, range)", field=field_path([*path, kind]))
    path = [*path, kind]
    if not isinstance(spec, dict) or len(spec) != 1:
        raise bad_value(path, f"must name one field: {{FIELD: ...}}, got {shorten(spec)}")
    (field, value), = spec.items()
    _check_field(field, allowed, path)
    path = [*path, field]
    if kind == "term":
        return Clause("term", field, (_scalar(value, path),))
    if kind == "terms":
        if not isinstance(value, list) or not value:
            raise bad_value(path, f"must be a non-empty list of values, got {shorten(value)}")
        if len(value) > MAX_TERMS:
            raise bad_value(path, f"holds {len(value)} values; at most {MAX_TERMS}")
        return Clause("terms", field, tuple(_scalar(v, [*path, j])
                                            for j, v in enumerate(value)))
    if isinstance(value, dict):  # (as the request's schema names it)
        unknown = sorted(str(k) for k in set(value) - set(RANGE_BOUNDS))
        if unknown:
            raise BadRequestError(
                f"{quoted_path(path)}: unknown bound {unknown[0]!r}"
                f"{did_you_mean(unknown[0], RANGE_BOUNDS)} (known: "
                f"{', '.join(sorted(RANGE_BOUNDS))})", field=field_path([*path, unknown[0]]))
    if not isinstance(value, dict) or not value:
        raise bad_value(path, f"must be an object of bounds ({', '.join(RANGE_BOUNDS)}) with "
                         f"numbers or dates, got {shorten(value)}")
    bounds: list[tuple[str, float | str]] = []
    for name in RANGE_BOUNDS:
        if name in value:
            bound = value[name]
            if isinstance(bound, str) and epoch_millis(bound) is not None:
                bounds.append((name, bound))
                continue
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) \
                    or not math.isfinite(bound):
                raise bad_value([*path, name], f"must be a finite number or an ISO 8601 date "
                                          f"such as \"2010-01-01\" or "
                                          f"\"2010-01-01T09:30:00Z\", got {shorten(bound)}")
            bounds.append((name, float(bound)))
    return Clause("range", field, bounds=tuple(bounds))


def check_clause_types(clauses: tuple[Clause, ...], types: dict[str, str]) -> None:
    """Refuse (400, naming the clause and the type) a clause that cannot match its field as
    the index keeps it (``types``: a field's ``keyword``, ``number``, ``boolean`` or
    ``date``; a field without one is not checked): a range on a keyword or boolean field, a
    date bound on a number field, a term on a date field that is not a date."""
    for i, clause in enumerate(clauses):
        kind = types.get(clause.field)
        if kind is None:
            continue
        path: list[str | int] = ["filter", i, clause.kind, clause.field]
        if clause.kind == "range":
            if kind not in ("number", "date"):
                raise bad_value(path, f"cannot match: {clause.field!r} is a {kind} field, and a "
                                 f"range needs a number or date field (use term or terms)")
            if kind == "number":
                for name, bound in clause.bounds:
                    if isinstance(bound, str):
                        raise bad_value([*path, name], f"is a date, and {clause.field!r} is a "
                                                  f"number field: give a number")
        elif kind == "date":
            for j, value in enumerate(clause.values):
                if date_value(value) is None:
                    where = path if clause.kind == "term" else [*path, j]
                    raise bad_value(where, f"cannot match: {clause.field!r} is a date field, and "
                                      f"{shorten(value)} is not a date (an ISO 8601 date or "
                                      f"epoch milliseconds)")


def date_value(value: Any) -> float | None:
    """A filter value or bound on a date field as epoch milliseconds: ISO 8601 text, or a
    number taken as epoch milliseconds; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return epoch_millis(value)


@dataclass(frozen=True)
class FacetRange:
    """One bucket of a range facet: ``low`` (included) to ``high`` (excluded), either open
    (None); numbers, or on a date field ISO 8601 text or epoch milliseconds."""

    key: str
    low: float | str | None = None
    high: float | str | None = None


@dataclass(frozen=True)
class Facet:
    """A facet asked for: the ``size`` most frequent values of a field (a name alone), or
    counts in ``ranges``, or the field's ``stats`` (count, min, max; and sum and average on
    a number field) over every matching document."""

    field: str
    size: int = FACET_SIZE
    ranges: tuple[FacetRange, ...] = ()
    stats: bool = False
    #: Its place in the request's ``facets`` (errors name it).
    index: int = 0

    @property
    def values(self) -> bool:
        """Whether it counts values (what every backend answers; ranges and stats need a
        backend that aggregates them)."""
        return not self.ranges and not self.stats


def parse_facets(raw: Any, allowed: tuple[str, ...]) -> dict[str, Facet]:
    """Check the ``facets`` of a search: a list of distinct filter fields, each a name,
    ``{"field": NAME, "size": N}`` (the N most frequent values; :data:`FACET_SIZE` unless
    given), ``{"field": NAME, "ranges": [{"from": A, "to": B, "key": K}, ...]}`` or
    ``{"field": NAME, "stats": true}``; returns each field's :class:`Facet`."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise bad_value(["facets"], f"must be a list of field names, got {shorten(raw)}")
    facets: dict[str, Facet] = {}
    for i, entry in enumerate(raw):
        field, path, facet = entry, ["facets", i], None
        if isinstance(entry, dict):
            field, path = entry.get("field"), ["facets", i, "field"]
            asked = [key for key in ("size", "ranges", "stats") if key in entry]
            if len(asked) > 1:
                raise bad_value(["facets", i], f"asks for {' and '.join(asked)}: a facet is "
                                               f"one of them (name the field once)")
            if "ranges" in entry:
                facet = Facet(field, ranges=_ranges(entry["ranges"], ["facets", i, "ranges"]),
                              index=i)
            elif "stats" in entry:
                if entry["stats"] is not True:
                    raise bad_value(["facets", i, "stats"], f"must be true, got "
                                                            f"{shorten(entry['stats'])}")
                facet = Facet(field, stats=True, index=i)
            else:
                size = entry.get("size", FACET_SIZE)
                if isinstance(size, bool) or not isinstance(size, int) \
                        or not 1 <= size <= FACET_SIZE:
                    raise bad_value(["facets", i, "size"], f"must be an integer from 1 to "
                                                           f"{FACET_SIZE}, got {shorten(size)}")
                facet = Facet(field, size, index=i)
        _check_field(field, allowed, path)
        if field in facets:
            raise bad_value(["facets"], "names a field twice")
        facets[field] = facet or Facet(field, index=i)
    return facets


def _ranges(raw: Any, path: list[str | int]) -> tuple[FacetRange, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_RANGES:
        raise bad_value(path, f"must be a list of 1 to {MAX_RANGES} ranges such as "
                              f"{{\"from\": 10, \"to\": 20}}, got {shorten(raw)}")
    out: list[FacetRange] = []
    for j, item in enumerate(raw):
        where = [*path, j]
        if not isinstance(item, dict) or not item or set(item) - {"from", "to", "key"}:
            raise bad_value(where, f"must be {{\"from\": A, \"to\": B}} (either may be "
                                   f"left out) with an optional \"key\", got {shorten(item)}")
        bounds = []
        for name in ("from", "to"):
            bound = item.get(name)
            if bound is not None and (isinstance(bound, bool) or not (
                    isinstance(bound, (int, float)) and math.isfinite(bound)
                    or isinstance(bound, str) and epoch_millis(bound) is not None)):
                raise bad_value([*where, name], f"must be a finite number or an ISO 8601 "
                                                f"date, got {shorten(bound)}")
            bounds.append(bound)
        key = item.get("key")
        if key is None:
            key = "-".join("*" if b is None else str(b) for b in bounds)
        elif not isinstance(key, str) or not key or len(key) > MAX_VALUE_LENGTH:
            raise bad_value([*where, "key"], f"must be a non-empty string, got {shorten(key)}")
        if any(r.key == key for r in out):
            raise bad_value(where, f"has the key {key!r} of an earlier range: give each a "
                                   f"\"key\" of its own")
        out.append(FacetRange(key, *bounds))
    return tuple(out)


def facet_field(facet: str | Facet) -> str:
    """The field a facet of a backend search names (a name, or a :class:`Facet` of ranges
    or stats)."""
    return facet if isinstance(facet, str) else facet.field


def empty_facet(facet: str | Facet) -> dict[str, Any]:
    """A facet's answer when nothing matches."""
    if isinstance(facet, str) or facet.values:
        return {}
    if facet.ranges:
        return {bucket.key: 0 for bucket in facet.ranges}
    return facet_stats({}, False)


def check_facet_types(facets: tuple[str | Facet, ...], types: dict[str, str]) -> None:
    """Refuse (400, naming the facet and the type) ranges or stats of a field that is not a
    number or date field, and a date bound on a number field."""
    for facet in facets:
        if isinstance(facet, str) or facet.values:
            continue
        kind = types.get(facet.field)
        path: list[str | int] = ["facets", facet.index, "ranges" if facet.ranges else "stats"]
        if kind is not None and kind not in ("number", "date"):
            raise bad_value(path, f"needs a number or date field, and {facet.field!r} is a "
                                  f"{kind} field (count its values instead)")
        for j, bucket in enumerate(facet.ranges):
            for name, bound in (("from", bucket.low), ("to", bucket.high)):
                if kind == "number" and isinstance(bound, str):
                    raise bad_value([*path, j, name], f"is a date, and {facet.field!r} is a "
                                                      f"number field: give a number")


def facet_stats(raw: dict[str, Any], date: bool) -> dict[str, Any]:
    """A stats aggregation's answer as a facet gives it: count, min and max (on a date
    field as ISO 8601 text), and on a number field sum and average; min and max are null
    when no matching document has a value."""
    count = int(raw.get("count") or 0)
    if date:
        return {"count": count, **{k: None if raw.get(k) is None or not count
                                   else iso_text(raw[k]) for k in ("min", "max")}}
    return {"count": count, **{k: None if raw.get(k) is None or not count else float(raw[k])
                               for k in ("min", "max", "sum", "avg")}}


def _check_field(field: Any, allowed: tuple[str, ...], path: list[str | int]) -> None:
    if field not in allowed:
        known = ", ".join(allowed) if allowed else "none: set backend.filter_fields"
        raise BadRequestError(f"{quoted_path(path)}: {shorten(field)} is not a filter field "
                              f"(filter fields: {known})", field=field_path(path))


def _scalar(value: Any, path: list[str | int]) -> Scalar:
    if isinstance(value, bool) or isinstance(value, (int, str)):
        if isinstance(value, str) and len(value) > MAX_VALUE_LENGTH:
            raise bad_value(path, f"is longer than {MAX_VALUE_LENGTH} characters")
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise bad_value(path, f"must be a string, a number or true/false, got {shorten(value)}")


def bad_value(path: list[str | int], problem: str) -> BadRequestError:
    """A 400 for the value at ``path`` (``["filter", 0, "range", "price"]``), its message
    starting with the quoted path (``'filter'[0].range.price must be ...``)."""
    return BadRequestError(f"{quoted_path(path)} {problem}", field=field_path(path))


def filters_key(clauses: tuple[Clause, ...]) -> str:
    """A stable digest of the clauses, in any order (a page's identity, with its query)."""
    text = json.dumps(sorted(json.dumps(c.to_dict(), sort_keys=True) for c in clauses))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def filter_kind(value: Any) -> str | None:
    """``keyword``, ``number``, ``boolean`` or ``date`` (ISO 8601 text): how a filter field
    holding ``value`` is indexed (a list: its items' kind); None for anything else."""
    if isinstance(value, list):
        kinds = {filter_kind(v) for v in value} - {None}
        return kinds.pop() if len(kinds) == 1 else None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "date" if epoch_millis(value) is not None else "keyword"
    return None


def filter_types(fields: tuple[str, ...], documents: Iterable[tuple[str, dict[str, Any]]],
                  look: int = 1000) -> tuple[dict[str, str], Iterable[tuple[str, dict]]]:
    """Each filter field's type, from the first of the first ``look`` documents that holds it
    (a keyword when none does), and the documents again, those read included."""
    types: dict[str, str] = {}
    seen: list[tuple[str, dict[str, Any]]] = []
    iterator = iter(documents)
    for item in iterator:
        seen.append(item)
        doc = item[1] if isinstance(item[1], dict) else {}
        for f in fields:
            kind = filter_kind(doc.get(f))
            if f not in types and kind is not None:
                types[f] = kind
        if len(types) == len(fields) or len(seen) >= look:
            break
    return ({f: types.get(f, "keyword") for f in fields}, itertools.chain(seen, iterator))
