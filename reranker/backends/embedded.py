"""The embedded default backend: a Tantivy index on disk, BM25 per field, no server needed."""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from reranker import hookimpl
from reranker.backends import Backend, Candidates, IndexReport
from reranker.backends.filters import (
    FACET_SIZE,
    Clause,
    Facet,
    check_clause_types,
    check_facet_types,
    date_value,
    empty_facet,
    facet_field,
    facet_stats,
    filter_kind,
    filter_types,
    filters_key,
)
from reranker.backends.options import Highlight, SortKey
from reranker.core.errors import BackendError, BackendUnavailableError, BadRequestError, shorten
from reranker.core.times import iso_text

log = logging.getLogger(__name__)

META_FILE = "reranker-index.json"
META_FORMAT = 1
ANALYZER = "reranker_en"
ID = "_id"
SOURCE = "_source"
#: How a filter field is indexed, from the values of the documents: strings (or lists of
#: strings) as exact keywords, numbers as floats, true/false as booleans, ISO 8601 dates and
#: date-times as their epoch milliseconds (a float).
FILTER_TYPES = ("keyword", "number", "boolean", "date")
#: The document id is also kept as its UTF-8 bytes in this many unsigned 64-bit fast columns
#: (``_id0``, ``_id1``, ...): Tantivy's Python API reads numeric fast fields of many hits in
#: one call but text ones not at all, and reading the id from the stored document would
#: load the whole stored document (its ``_source`` too) of every candidate. An id longer than
#: ``8 * ID_WORDS`` bytes, or holding a NUL byte, is kept as zeros and read from the stored
#: document instead.
ID_WORDS = 4
#: The last field's score is the search's score less the other fields' (see
#: ``EmbeddedBackend._field_scores``); below this fraction of the search's score, what is
#: left is float32 rounding of a field that did not match: 0.
SUM_ROUNDING = 1e-5


def _analyzer() -> tantivy.TextAnalyzer:
    """English analyzer: split on non-alphanumerics, drop tokens over 40 bytes, lowercase,
    Snowball English stemming. The same object tokenises documents and queries."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    return value if isinstance(value, str) else str(value)


def _number(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan  # missing or not a number: the feature takes features.missing_value
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"field {field!r} holds a number too large for a float") from None


class EmbeddedBackend(Backend):
    """Tantivy index at ``backend.path`` with one BM25-scored text field per ``backend.fields``
    and a fast numeric column per ``features.numeric_fields``."""

    name = "embedded"

    def __init__(self, config):
        super().__init__(config)
        self.path = Path(config.backend.path)
        self.fields = tuple(config.backend.fields)
        self.numeric_fields = tuple(config.features.numeric_fields)
        self.filter_fields = tuple(config.backend.filter_fields)
        self.filter_types: dict[str, str] = {}  # read from the index's description
        #: Fast columns of the id (:data:`ID_WORDS`; 0 in an index built before them).
        self.id_words = ID_WORDS
        self.id_field = config.backend.id_field
        for key in ("feature_queries", "ltr_featureset", "query", "template", "template_id"):
            if config.backend[key]:
                raise BackendError(f"backend.{key} is only supported by the elasticsearch "
                                   f"backend; the embedded backend scores each of "
                                   f"backend.fields with BM25")
        for key, names in (("backend.fields", self.fields),
                           ("features.numeric_fields", self.numeric_fields),
                           ("backend.filter_fields", self.filter_fields)):
            for name in names:
                if name in (ID, SOURCE, *_id_columns(ID_WORDS)) \
                        or not tantivy.SchemaBuilder.is_valid_field_name(name):
                    raise BackendError(f"{key}: {name!r} cannot be a field of the embedded "
                                       f"index ({ID}, {ID}0 to {ID}{ID_WORDS - 1} and {SOURCE} "
                                       f"are reserved; names must not start with '-')")
        self._analyzer = _analyzer()
        self._index: tantivy.Index | None = None
        self._schema: tantivy.Schema | None = None
        self._view: _View | None = None  # the searcher, with its caches
        self._meta_mtime = 0
        self._lock = threading.Lock()
        #: The index's files as opened (name -> size, modification time): a file changed
        #: under the service without a commit means damage (:meth:`_check_files`).
        self._files: dict[str, tuple[int, int]] = {}
        #: Why the index cannot be searched (it was damaged under the service), while so.
        self._damaged: str | None = None
        #: The files when the last check of a damaged index failed, and when it ran.
        self._failed_check: tuple[dict[str, tuple[int, int]], float] | None = None
        self._checking: threading.Thread | None = None

    # -- schema and metadata ----------------------------------------------------------------

    def _wanted_meta(self) -> dict[str, Any]:
        return {"format": META_FORMAT, "fields": list(self.fields),
                "numeric_fields": list(self.numeric_fields),
                "filter_fields": dict(self.filter_types), "analyzer": ANALYZER,
                "id_words": self.id_words}

    def _build_schema(self, fields: list[str] | tuple[str, ...] | None = None,
                      numeric_fields: list[str] | tuple[str, ...] | None = None,
                      filter_types: dict[str, str] | None = None) -> tantivy.Schema:
        filter_types = self.filter_types if filter_types is None else filter_types
        builder = tantivy.SchemaBuilder()
        builder.add_text_field(ID, stored=True, tokenizer_name="raw")
        for name in _id_columns(self.id_words):
            builder.add_unsigned_field(name, stored=False, indexed=False, fast=True)
        for f in self.fields if fields is None else fields:
            builder.add_text_field(f, stored=False, tokenizer_name=ANALYZER)
        numeric = list(self.numeric_fields if numeric_fields is None else numeric_fields)
        for f in numeric:  # a numeric feature that is also a filter field is indexed too
            builder.add_float_field(f, stored=False, indexed=filter_types.get(f) == "number",
                                    fast=True)
        for f, kind in filter_types.items():
            if kind == "keyword":
                builder.add_text_field(f, stored=False, tokenizer_name="raw", fast=True)
            elif kind == "boolean":
                builder.add_boolean_field(f, stored=False, indexed=True, fast=True)
            elif f not in numeric:
                builder.add_float_field(f, stored=False, indexed=True, fast=True)
        builder.add_bytes_field(SOURCE, stored=True, indexed=False)
        return builder.build()

    def _read_meta(self) -> dict[str, Any]:
        meta_path = self.path / META_FILE
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BackendError(f"backend.path: {self.path} holds no reranker index "
                               f"({META_FILE} is missing); run `reranker index` first") from None
        except (OSError, ValueError) as exc:
            raise BackendError(f"backend.path: {meta_path} cannot be read: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
            raise BackendError(f"backend.path: {meta_path} is not a reranker index description "
                               f"of format {META_FORMAT}")
        return meta

    def _check_meta(self, meta: dict[str, Any], exact: bool) -> None:
        """Searching needs the configured fields to be in the index (a subset will do, so a
        feature can be added to the config of an index that already holds the field);
        indexing more documents needs the same fields the index was built with."""
        for key, config_key in (("fields", "backend.fields"),
                                ("numeric_fields", "features.numeric_fields"),
                                ("filter_fields", "backend.filter_fields")):
            built, wanted = list(meta.get(key, [])), list(getattr(self, key))
            if built != wanted if exact else not set(wanted) <= set(built):
                raise BackendError(
                    f"{config_key} is {wanted} but the index at {self.path} was built with "
                    f"{built}; run `reranker index --recreate`")

    def _open_index(self, path: Path, schema: tantivy.Schema | None = None) -> tantivy.Index:
        schema = schema or self._build_schema()
        index = tantivy.Index(schema, path=str(path), reuse=True)
        index.register_tokenizer(ANALYZER, self._analyzer)
        self._schema = schema
        return index

    # -- Backend ----------------------------------------------------------------------------

    def open(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise BackendError(f"backend.path: {self.path} is a file, not an index folder")
        if not self.path.is_dir():
            raise BackendError(f"backend.path: index directory {self.path} does not exist; "
                               f"run `reranker index` first")
        meta = self._read_meta()
        self._check_meta(meta, exact=False)
        self.filter_types = dict(meta.get("filter_fields", {}))
        self.id_words = int(meta.get("id_words", 0))
        files = _index_files(self.path)
        try:
            self._index = self._open_index(self.path, self._build_schema(
                meta.get("fields"), meta.get("numeric_fields"), self.filter_types))
            self._view = self._new_view(self._index.searcher())
        except (OSError, ValueError) as exc:
            raise BackendError(f"backend.path: cannot open the index at {self.path}: "
                               f"{exc}") from exc
        except BaseException as exc:
            if not _is_panic(exc):
                raise
            raise BackendError(f"backend.path: the index at {self.path} is damaged: {exc}; "
                               f"rebuild it (`reranker index --recreate`)") from None
        self._meta_mtime = self._mtime()
        self._files, self._damaged, self._failed_check = files, None, None

    def _mtime(self) -> int:
        try:
            return os.stat(self.path / "meta.json").st_mtime_ns
        except OSError:
            return -1

    def _new_view(self, searcher: tantivy.Searcher) -> _View:
        backend = self.config.backend
        return _View(searcher, _Lru(backend.cache_size),
                     _Lru(int(backend.document_cache_mb * 2 ** 20), weigh=_stored_size))

    def _current_view(self) -> _View:
        """The searcher of the index as last committed, with its caches: a new one, with
        empty caches, once `reranker index` has committed new documents (a search or a
        page already under way keeps the view it started with)."""
        if self._index is None:
            self.open()
        if self._damaged is not None:
            self._check_damaged()
            raise BackendUnavailableError(self._damaged)
        mtime = self._mtime()
        if mtime < 0:
            raise BackendUnavailableError(f"embedded index at {self.path} is unavailable "
                                          f"(its meta.json is gone)")
        if mtime != self._meta_mtime:
            with self._lock:
                if mtime != self._meta_mtime:
                    self._reopen()
        else:
            self._check_files()
        return self._view

    def _reopen(self) -> None:
        """A new commit (meta.json changed): open the index anew, as a new process would,
        its description checked again (another index swapped in for this one is refused)."""
        try:
            self.open()
        except BackendError as exc:
            self._damage(f"embedded index at {self.path} cannot be searched since it "
                         f"changed: {exc.message}")
            raise BackendUnavailableError(self._damaged) from None

    def _check_files(self) -> None:
        """Refuse to read an index whose files changed under the service without a commit
        (truncated, overwritten or deleted): Tantivy maps them into memory, and reading a
        truncated one would end the process (SIGBUS). A few stat calls per search."""
        for name, (size, mtime) in self._files.items():
            try:
                stat = os.stat(self.path / name)
            except OSError:
                self._damage(f"embedded index at {self.path} is damaged: its file {name} is "
                             f"gone")
                break
            if stat.st_size != size or stat.st_mtime_ns != mtime:
                self._damage(f"embedded index at {self.path} is damaged: its file {name} "
                             f"changed under the service ({size} bytes, now "
                             f"{stat.st_size}) without a commit")
                break
        if self._damaged is not None:
            raise BackendUnavailableError(self._damaged)

    def _damage(self, why: str) -> None:
        """Stop searching the index: every search answers 503 with ``why`` (and health
        says it) until the files change again and a check in a child process finds the
        index sound (:meth:`_check_damaged`)."""
        if self._damaged is None:
            log.error("%s; searches answer 503 until the index is restored or rebuilt "
                      "(`reranker index --recreate`)", why)
        self._damaged = (f"{why}; searches answer 503 until its files are restored or it is "
                         f"rebuilt (`reranker index --recreate`)")
        self._failed_check = (_index_files(self.path), time.monotonic())

    def _check_damaged(self) -> None:
        """While damaged: once the files changed since the last check (restored, rebuilt),
        check the index in a child process (where a damaged file can only end the child),
        and reopen it when the child found it sound. One check at a time, in the
        background: searches go on answering 503 meanwhile."""
        files, at = self._failed_check or ({}, -math.inf)
        if time.monotonic() - at < DAMAGE_RECHECK or _index_files(self.path) == files:
            return
        with self._lock:
            if self._checking is not None and self._checking.is_alive():
                return
            self._failed_check = (_index_files(self.path), time.monotonic())
            self._checking = threading.Thread(target=self._recover, daemon=True,
                                              name="embedded index check")
            self._checking.start()

    def _recover(self) -> None:
        problem = check_index(self.path)
        if problem is not None:
            log.warning("embedded index at %s is still damaged: %s", self.path, problem)
            return
        try:
            with self._lock:
                self.open()
            log.warning("embedded index at %s is sound again: searches go on", self.path)
        except BackendError as exc:
            log.warning("%s", exc.message)

    def _current_searcher(self) -> tantivy.Searcher:
        return self._current_view().searcher

    def _terms(self, query: str) -> list[str]:
        return list(dict.fromkeys(self._analyzer.analyze(query)))

    def _field_query(self, fields: Sequence[str], terms: list[str]) -> tantivy.Query:
        # The user's text is analysed into terms and never parsed as query syntax.
        clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, f, t))
                   for f in fields for t in terms]
        return tantivy.Query.boolean_query(clauses)

    def _filter_query(self, clauses: tuple[Clause, ...]) -> tantivy.Query:
        """The clauses as one zero-scoring query that every candidate must match."""
        check_clause_types(clauses, self.filter_types)
        parts = []
        for i, clause in enumerate(clauses):  # (in the request's order)
            kind = self.filter_types.get(clause.field)
            where = f"'filter' on {clause.field!r} ({kind} field)"
            path = f"filter[{i}].{clause.kind}.{clause.field}"
            if clause.kind == "range":
                bounds = {name: date_value(bound) if kind == "date" else bound
                          for name, bound in clause.bounds}
                low = bounds.get("gte", bounds.get("gt", -math.inf))
                high = bounds.get("lte", bounds.get("lt", math.inf))
                parts.append(tantivy.Query.range_query(
                    self._schema, clause.field, tantivy.FieldType.Float, low, high,
                    "gte" in bounds or "gt" not in bounds, "lte" in bounds or "lt" not in bounds))
                continue
            terms = [tantivy.Query.term_query(self._schema, clause.field, _filter_value(
                kind, v, where, path if clause.kind == "term" else f"{path}[{j}]"))
                for j, v in enumerate(clause.values)]
            parts.append(terms[0] if len(terms) == 1 else tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, t) for t in terms]))
        return tantivy.Query.const_score_query(
            tantivy.Query.boolean_query([(tantivy.Occur.Must, p) for p in parts]), 0.0)

    def _facets(self, searcher: tantivy.Searcher, query: tantivy.Query,
                facets: tuple[str | Facet, ...]) -> dict[str, dict[str, Any]]:
        """Tantivy's aggregations over every document ``query`` matches: a terms
        aggregation per field named, a range or stats aggregation per :class:`Facet`."""
        check_facet_types(facets, self.filter_types)
        out: dict[str, dict[str, Any]] = {}
        for facet in facets:
            f = facet_field(facet)
            date = self.filter_types.get(f) == "date"  # (its values as ISO 8601 text)
            if isinstance(facet, str) or facet.values:
                buckets = searcher.aggregate(query, {f: {"terms": {"field": f,
                                                                   "size": FACET_SIZE}}})
                out[f] = {iso_text(b["key"]) if date else _facet_key(b): int(b["doc_count"])
                          for b in buckets[f]["buckets"]}
            elif facet.ranges:
                ranges = [{key: date_value(bound) if date else bound
                           for key, bound in (("from", r.low), ("to", r.high))
                           if bound is not None} for r in facet.ranges]
                buckets = searcher.aggregate(query, {f: {"range": {"field": f,
                                                                   "ranges": ranges}}})
                counts = [int(b["doc_count"]) for b in buckets[f]["buckets"]]
                out[f] = {r.key: count for r, count in zip(facet.ranges, counts, strict=True)}
            else:
                found = searcher.aggregate(query, {f: {"stats": {"field": f}}})
                out[f] = facet_stats(found[f], date)
        return out

    def search(self, query: str, n: int, filters: tuple[Clause, ...] = (),
               facets: tuple[str | Facet, ...] = ()) -> Candidates:
        return self._search(query, n, filters, facets, ())

    def search_sorted(self, query: str, n: int, filters: tuple[Clause, ...],
                      facets: tuple[str | Facet, ...], sort: tuple[SortKey, ...]) -> Candidates:
        """The top ``n`` by one field (Tantivy orders by one fast field), documents
        without a value last; the candidates' scores are still their BM25 scores."""
        if len(sort) > 1:
            raise BadRequestError("'sort': the embedded backend sorts by one field; name "
                                  "one", field="sort")
        missing = [key.field for key in sort
                   if key.field not in self.filter_types and key.field not in self.numeric_fields]
        if missing:
            raise BackendError(f"{missing[0]!r} is not a filter or numeric field of the index "
                               f"at {self.path}; run `reranker index --recreate`")
        return self._search(query, n, filters, facets, sort)

    def _search(self, query: str, n: int, filters: tuple[Clause, ...],
                facets: tuple[str | Facet, ...], sort: tuple[SortKey, ...]) -> Candidates:
        try:
            view = self._current_view()
            searcher = view.searcher
            missing = [f for f in [c.field for c in filters] + [facet_field(f) for f in facets]
                       if f not in self.filter_types]
            if missing:
                raise BackendError(f"backend.filter_fields: {missing[0]!r} is not a filter "
                                   f"field of the index at {self.path}; run `reranker index "
                                   f"--recreate`")
            terms = self._terms(query)
            if not terms:
                return self._empty(facets)
            # (filters_key: JSON of the clauses, so True, 1 and 1.0 stay apart)
            key = (tuple(terms), n, filters_key(filters), tuple(facets), sort)
            found = view.searches.get(key)
            if found is not None:  # kept unchanged: hand out copies of its lists
                return dataclasses.replace(found, ids=list(found.ids),
                                           facets=copy.deepcopy(found.facets))
            text_query = self._field_query(self.fields, terms)
            if filters:
                text_query = tantivy.Query.boolean_query([
                    (tantivy.Occur.Must, text_query),
                    (tantivy.Occur.Must, self._filter_query(filters))])
            if sort:
                result = searcher.search(text_query, n, order_by_field=sort[0].field,
                                         order=tantivy.Order.Asc if sort[0].order == "asc"
                                         else tantivy.Order.Desc)
            else:
                result = searcher.search(text_query, n)
            addresses = [address for _, address in result.hits]
            ids = self._ids(searcher, addresses)
            if sort:  # the hits' values are the field's: their relevance, searched again
                scores = self._scores_of(searcher, text_query, ids, addresses)
            else:
                scores = np.array([score for score, _ in result.hits], dtype=np.float64)
            field_scores = self._field_scores(searcher, terms, ids, addresses, scores)
            numeric = self._numeric(searcher, addresses)
            facet_counts = self._facets(searcher, text_query, facets) if facets else {}
        except (OSError, ValueError, RuntimeError) as exc:
            raise BackendUnavailableError(f"embedded index at {self.path} failed to answer: "
                                          f"{exc}") from exc
        except BaseException as exc:
            raise self._panicked(exc) from None
        candidates = Candidates(ids=ids, scores=scores, field_scores=field_scores,
                                numeric=numeric, load_sources=self._loader(view, addresses),
                                total=result.count, facets=facet_counts)
        if view.searches.capacity:
            for array in (scores, field_scores, numeric):
                array.setflags(write=False)
            view.searches.put(key, dataclasses.replace(candidates, ids=list(ids),
                                                       facets=copy.deepcopy(facet_counts)))
        return candidates

    def fetch(self, query: str, ids: Sequence[str], filters: tuple[Clause, ...] = ()
              ) -> Candidates:
        """The documents ``ids`` that pass ``filters`` (found by their id terms), with the
        search's features: each searched field's BM25 score for ``query``'s terms (0 where
        they do not match), restricted to them as :meth:`_field_scores` restricts."""
        try:
            view = self._current_view()
            searcher = view.searcher
            only = tantivy.Query.boolean_query(
                [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, ID, doc_id))
                 for doc_id in dict.fromkeys(ids)])
            if filters:
                only = tantivy.Query.boolean_query([(tantivy.Occur.Must, only),
                                                    (tantivy.Occur.Must,
                                                     self._filter_query(filters))])
            addresses = [a for _, a in searcher.search(only, len(ids), count=False).hits]
            found = self._ids(searcher, addresses)
            terms = self._terms(query)
            scores = self._scores_of(searcher, self._field_query(self.fields, terms), found,
                                     addresses) if terms else np.zeros(len(found))
            field_scores = self._field_scores(searcher, terms, found, addresses, scores) \
                if terms else np.zeros((len(found), len(self.fields)))
            numeric = self._numeric(searcher, addresses)
        except (OSError, ValueError, RuntimeError) as exc:
            raise BackendUnavailableError(f"embedded index at {self.path} failed to answer: "
                                          f"{exc}") from exc
        except BaseException as exc:
            raise self._panicked(exc) from None
        return Candidates(ids=found, scores=scores, field_scores=field_scores,
                          numeric=numeric, load_sources=self._loader(view, addresses))

    def _numeric(self, searcher: tantivy.Searcher,
                 addresses: list[tantivy.DocAddress]) -> np.ndarray:
        """The numeric fields of the hits at ``addresses`` (NaN where one has none)."""
        numeric = np.full((len(addresses), len(self.numeric_fields)), np.nan)
        for j, f in enumerate(self.numeric_fields):
            values = searcher.fast_field_values(f, addresses)
            numeric[:, j] = [np.nan if v is None else v for v in values]
        return numeric

    def _loader(self, view: _View, addresses: list[tantivy.DocAddress]
                ) -> Callable[[Sequence[int]], list[dict[str, Any]]]:
        """``load_sources`` of the hits at ``addresses``: only the shown hits' stored
        documents are ever read (each parsed anew, so no caller shares one with another)."""
        def load_sources(indices: Sequence[int]) -> list[dict[str, Any]]:
            try:
                return [json.loads(view.stored(addresses[i])) for i in indices]
            except BaseException as exc:
                raise self._panicked(exc) from None

        return load_sources

    def _panicked(self, exc: BaseException) -> BaseException:
        """What to raise for ``exc`` from the engine: a Tantivy panic (its files hold what
        it cannot read) marks the index damaged and answers 503; anything else as it is."""
        if not _is_panic(exc):
            return exc
        self._damage(f"embedded index at {self.path} is damaged: the engine failed reading "
                     f"it ({exc})")
        return BackendUnavailableError(self._damaged)

    def _ids(self, searcher: tantivy.Searcher,
             addresses: list[tantivy.DocAddress]) -> list[str]:
        """The ids of the hits at ``addresses``, from the id's fast columns (one call per
        column for all hits); from the stored document only for an id the columns cannot
        hold, or in an index built without them."""
        if not addresses:
            return []
        if not self.id_words:
            return [searcher.doc(a)[ID][0] for a in addresses]
        words = np.array([searcher.fast_field_values(name, addresses)
                          for name in _id_columns(self.id_words)], dtype=">u8")
        # Column-major words to one 8 * id_words byte string per hit; numpy's bytes type
        # drops the zero padding.
        packed = np.ascontiguousarray(words.T).view(f"S{8 * self.id_words}").ravel()
        ids = [raw.decode("utf-8") for raw in packed.tolist()]
        for i, doc_id in enumerate(ids):
            if not doc_id:  # too long for the columns (an id is never empty)
                ids[i] = searcher.doc(addresses[i])[ID][0]
        return ids

    def _field_scores(self, searcher: tantivy.Searcher, terms: list[str], ids: list[str],
                      addresses: list[tantivy.DocAddress], scores: np.ndarray) -> np.ndarray:
        """Each searched field's BM25 score of exactly the candidates, shape ``(n, fields)``.

        The search's query is a disjunction of one term query per (field, term), and Tantivy
        scores a disjunction as the sum of its matching clauses (a filter adds 0), so a
        candidate's ``scores`` are the sum of its per-field scores: the last field's is that
        sum less the others' (to float32 rounding, about 1e-7 of the score; what is left
        below :data:`SUM_ROUNDING` of it is a field that did not match, 0). Every other
        field takes a search of its terms restricted to the candidate ids by a zero-scoring
        disjunction of their id terms (one term lookup per candidate, whatever the size of
        the index; the score is the field's alone): one search fewer than there are fields,
        none for one field."""
        field_scores = np.zeros((len(ids), len(self.fields)))
        if not ids:
            return field_scores
        for j, f in enumerate(self.fields[:-1]):
            field_scores[:, j] = self._scores_of(searcher, self._field_query([f], terms), ids,
                                                 addresses)
        last = scores - field_scores[:, :-1].sum(axis=1)
        last[last <= SUM_ROUNDING * scores] = 0.0
        field_scores[:, -1] = last
        return field_scores

    def _scores_of(self, searcher: tantivy.Searcher, query: tantivy.Query, ids: list[str],
                   addresses: list[tantivy.DocAddress]) -> np.ndarray:
        """``query``'s scores of exactly the documents ``ids`` (at ``addresses``), 0 where
        it does not match: a search of ``query`` restricted to them by a zero-scoring
        disjunction of their id terms."""
        scores = np.zeros(len(ids))
        if not ids:
            return scores
        slot = {(a.segment_ord, a.doc): i for i, a in enumerate(addresses)}
        only = tantivy.Query.const_score_query(tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, ID, doc_id))
             for doc_id in ids]), 0.0)
        q = tantivy.Query.boolean_query([(tantivy.Occur.Must, query),
                                         (tantivy.Occur.Must, only)])
        for score, a in searcher.search(q, len(ids), count=False).hits:
            scores[slot[(a.segment_ord, a.doc)]] = score
        return scores

    def highlight(self, query: str, ids: Sequence[str], sources: Sequence[dict[str, Any]],
                  request: Highlight) -> list[dict[str, list[str]]]:
        """Tantivy's snippets: per field, the fragment of at most ``fragment_size``
        characters where the query's terms are densest, read from the stored document's
        text (a list of strings is read as one text)."""
        out: list[dict[str, list[str]]] = [{} for _ in sources]
        terms = self._terms(query)
        if not terms or not sources:
            return out
        try:
            searcher = self._current_view().searcher
            for field in request.fields:
                generator = tantivy.SnippetGenerator.create(
                    searcher, self._field_query([field], terms), self._schema, field)
                generator.set_max_num_chars(request.fragment_size)
                for i, source in enumerate(sources):
                    text = _text_of(source.get(field))
                    if not text:
                        continue
                    snippet = generator.snippet_from_doc(tantivy.Document(**{field: text}))
                    spans = [(r.start, r.end) for r in snippet.highlighted()]
                    if spans:
                        out[i][field] = [request.mark(*_characters(snippet.fragment(), spans))]
        except BaseException as exc:
            raise self._panicked(exc) from None
        return out

    def _empty(self, facets: tuple[str | Facet, ...] = ()) -> Candidates:
        return Candidates(ids=[], scores=np.empty(0), field_scores=np.empty((0, len(self.fields))),
                          numeric=np.empty((0, len(self.numeric_fields))),
                          load_sources=lambda indices: [], total=0,
                          facets={facet_field(f): empty_facet(f) for f in facets})

    def index_documents(self, documents: Iterable[tuple[str, dict[str, Any]]], *,
                        recreate: bool = False,
                        progress: Callable[[int], None] | None = None) -> IndexReport:
        if self.path.exists() and not self.path.is_dir():
            raise BackendError(f"backend.path: {self.path} is a file, not an index folder")
        if recreate and self.path.exists():
            if not (self.path / META_FILE).exists() and any(self.path.iterdir()):
                raise BackendError(f"backend.path: {self.path} is not empty and holds no reranker "
                                   f"index; refusing to delete it")
            shutil.rmtree(self.path)
        documents = iter(documents)
        created = not (self.path.exists() and any(self.path.iterdir()))
        try:
            return self._index_documents(documents, created, progress)
        except BaseException:
            if created:  # a failed first load leaves nothing behind to break the next one
                shutil.rmtree(self.path, ignore_errors=True)
                self._index = None
            raise

    def _index_documents(self, documents: Iterator[tuple[str, dict[str, Any]]], created: bool,
                         progress: Callable[[int], None] | None) -> IndexReport:
        if not created:
            meta = self._read_meta()
            self._check_meta(meta, exact=True)
            self.filter_types = dict(meta.get("filter_fields", {}))
            self.id_words = int(meta.get("id_words", 0))
        else:  # a new index: the filter fields' types from the first documents that have them
            self.id_words = ID_WORDS
            self.filter_types, documents = filter_types(self.filter_fields, documents)
            for f in set(self.filter_types) & set(self.numeric_fields):
                self.filter_types[f] = "number"  # a numeric feature: a number, or missing
        self.path.mkdir(parents=True, exist_ok=True)
        index = self._open_index(self.path)
        (self.path / META_FILE).write_text(json.dumps(self._wanted_meta(), indent=2) + "\n",
                                           encoding="utf-8")
        report = IndexReport(filter_types=dict(self.filter_types) if created else {})
        writer = index.writer(64_000_000, 1)
        pending = 0
        try:
            for where, doc in documents:
                try:
                    tdoc = self._document(doc)
                except ValueError as exc:
                    report.failed.append((where, str(exc)))
                    continue
                writer.delete_documents_by_term(ID, tdoc[ID][0])
                writer.add_document(tdoc)
                report.indexed += 1
                pending += 1
                if pending == 1000:
                    if progress:
                        progress(pending)
                    pending = 0
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            writer.rollback()
            raise
        if progress and pending:
            progress(pending)
        if created and not report.indexed:
            shutil.rmtree(self.path, ignore_errors=True)  # nothing was indexed
            self._index = None
            return report
        self._index = None  # the next search reopens with the new commit
        return report

    def _document(self, doc: dict[str, Any]) -> tantivy.Document:
        doc_id = doc.get(self.id_field)
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
            raise ValueError(f"field {self.id_field!r} must be a non-empty string or integer, "
                             f"got {doc_id!r}")
        tdoc = tantivy.Document()
        tdoc.add_text(ID, str(doc_id))
        for name, word in zip(_id_columns(self.id_words), _id_to_words(str(doc_id),
                                                                      self.id_words),
                              strict=True):
            tdoc.add_unsigned(name, word)
        for f in self.fields:
            tdoc.add_text(f, _text(doc.get(f)))
        for f in self.numeric_fields:
            tdoc.add_float(f, _number(f, doc.get(f)))
        for f, kind in self.filter_types.items():
            value = doc.get(f)
            if value is None or (f in self.numeric_fields and kind == "number"):
                continue  # (a numeric feature field is filterable as it is)
            for item in value if isinstance(value, list) else [value]:
                _add_filter_value(tdoc, f, kind, item)
        tdoc.add_bytes(SOURCE, json.dumps(doc, ensure_ascii=False).encode("utf-8"))
        return tdoc

    def index_exists(self) -> bool:
        return (self.path / META_FILE).is_file()

    def health(self) -> dict[str, Any]:
        state = {"type": self.name, "path": str(self.path)}
        try:
            state["documents"] = self._current_searcher().num_docs
            state["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 -- health reports, never raises
            state["status"] = "unavailable"
            state["error"] = str(getattr(exc, "message", exc))
        return state


class _Lru:
    """The values put last, up to ``capacity``: each weighs ``weigh(value)`` (1 by default:
    ``capacity`` is a number of values); the least recently used go first, and a value
    heavier than a quarter of the capacity is never kept. ``capacity`` 0 keeps none."""

    def __init__(self, capacity: int, weigh: Callable[[Any], int] | None = None):
        self.capacity = capacity
        self.weigh = weigh
        self.weight = 0
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        #: Gets answered from the cache, and not (for tests and benchmarks).
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key``, or None."""
        if not self.capacity:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        weight = 1 if self.weigh is None else self.weigh(value)
        if not self.capacity or 4 * weight > max(self.capacity, 4):
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.weight -= old[1]
            self._entries[key] = (value, weight)
            self.weight += weight
            while self.weight > self.capacity:
                self.weight -= self._entries.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._entries)


#: What keeping a stored document costs besides its bytes (the entry, its key, the bytes
#: object), counted in ``backend.document_cache_mb``.
STORED_OVERHEAD = 200


def _stored_size(stored: bytes) -> int:
    return len(stored) + STORED_OVERHEAD


@dataclasses.dataclass(frozen=True)
class _View:
    """A searcher of the index and the caches of what it answered, which go with it when
    the index changes: the candidates of the latest distinct searches (analysed terms,
    number of candidates, filters, facets; ``backend.cache_size`` of them, as Elasticsearch's
    shard request cache keeps an answer until the shard's next refresh), read-only, and the
    stored documents (``_source``) read last (``backend.document_cache_mb`` of them, as
    Solr's document cache keeps documents until its next searcher), so that a repeated
    search costs no engine work and a result shown again is not read and decompressed from
    the index's document store."""

    searcher: tantivy.Searcher
    searches: _Lru
    documents: _Lru

    def stored(self, address: tantivy.DocAddress) -> bytes:
        """The ``_source`` JSON of the document at ``address``."""
        key = (address.segment_ord, address.doc)
        stored = self.documents.get(key)
        if stored is None:
            stored = self.searcher.doc(address)[SOURCE][0]
            self.documents.put(key, stored)
        return stored


#: Seconds between two checks of a damaged index whose files changed.
DAMAGE_RECHECK = 1.0


def _is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of the engine's native code (pyo3's PanicException, which
    derives from BaseException so that ``except Exception`` does not catch it)."""
    return type(exc).__name__ == "PanicException"


def _index_files(path: Path) -> dict[str, tuple[int, int]]:
    """The files of the index's committed segments (those meta.json lists; a segment being
    written by an indexer meanwhile grows, and is not one of them): name -> (size,
    modification time)."""
    files: dict[str, tuple[int, int]] = {}
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        segments = {str(s["segment_id"]).replace("-", "") for s in meta["segments"]}
        entries = list(os.scandir(path))
    except (OSError, ValueError, KeyError, TypeError):
        return files
    for entry in entries:
        if entry.name.split(".")[0] not in segments:
            continue
        try:
            stat = entry.stat()
        except OSError:
            continue
        files[entry.name] = (stat.st_size, stat.st_mtime_ns)
    return files


def check_index(path: Path, timeout: float = 60.0) -> str | None:
    """Read every part of the index at ``path`` in a child process -- every stored document,
    the postings of up to 200 terms of each text field, every fast column -- where damage
    can only end the child; None when it read it all, else what went wrong."""
    try:
        done = subprocess.run([sys.executable, "-c", _CHECK, str(path)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"reading it took longer than {timeout:g} s"
    except OSError as exc:
        return f"the check could not run: {exc}"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return (f"the check ended with signal {-done.returncode}" if done.returncode < 0
            else f"the check failed: {last[:300]}")


#: The child's program of :func:`check_index`.
_CHECK = """
import sys, tantivy
index = tantivy.Index.open(sys.argv[1])
searcher = index.searcher()
schema = index.schema
everything = tantivy.Query.all_query()
hits = searcher.search(everything, max(1, searcher.num_docs)).hits
addresses = [address for _, address in hits]
for address in addresses:
    searcher.doc(address)
import json
import logging
meta = json.load(open(sys.argv[1] + "/meta.json"))
for field in meta["schema"]:
    name, options = field["name"], field.get("options", {})
    if options.get("fast"):
        try:
            searcher.fast_field_values(name, addresses)
        except ValueError:
            pass
    if field["type"] == "text" and options.get("indexing"):
        for term, _ in searcher.terms_with_prefix(name, "", limit=200):
            searcher.search(tantivy.Query.term_query(schema, name, term), 10)
"""


def _id_columns(words: int) -> list[str]:
    return [f"{ID}{k}" for k in range(words)]


def _id_to_words(doc_id: str, words: int) -> list[int]:
    """``doc_id``'s UTF-8 bytes, zero-padded, as ``words`` big-endian unsigned 64-bit
    numbers; all zeros for an id that does not fit (or holds a NUL byte, which the padding
    would make ambiguous)."""
    raw = doc_id.encode("utf-8")
    if len(raw) > 8 * words or b"\0" in raw:
        return [0] * words
    raw = raw.ljust(8 * words, b"\0")
    return [int.from_bytes(raw[8 * k: 8 * k + 8], "big") for k in range(words)]


def _add_filter_value(tdoc: tantivy.Document, field: str, kind: str, value: Any) -> None:
    held = filter_kind(value)
    if kind == "date":  # ISO 8601 text, or epoch milliseconds
        millis = date_value(value) if held in ("date", "number") else None
        if millis is None:
            raise ValueError(f"filter field {field!r} holds {value!r}, but the index keeps it "
                             f"as a date (from the first documents that hold it): give an "
                             f"ISO 8601 date such as 2010-01-01 or epoch milliseconds")
        tdoc.add_float(field, millis)
        return
    # (a keyword field takes any text, one that reads as a date too)
    if held != kind and not (kind == "keyword" and held == "date"):
        what = ", a date," if held == "date" else ""
        hint = (": a field of dates needs ISO 8601 dates (or none) in the documents that "
                "come first, which type it") if held == "date" else ""
        raise ValueError(f"filter field {field!r} holds {value!r}{what} but the index keeps "
                         f"it as a {kind} (from the first documents that hold it){hint}")
    if kind == "keyword":
        tdoc.add_text(field, value)
    elif kind == "boolean":
        tdoc.add_boolean(field, value)
    else:
        tdoc.add_float(field, float(value))


def _filter_value(kind: str | None, value: Any, where: str, path: str) -> Any:
    """A request's filter value as the index keeps the field (``path``: where the request
    gives it, for the error)."""
    if kind == "keyword" and not isinstance(value, bool):
        return str(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and date_value(value) is not None:
        return date_value(value)
    raise BadRequestError(f"{where}: {shorten(value)} is not a {kind} value", field=path)


def _facet_key(bucket: dict[str, Any]) -> str:
    """A facet value as a JSON key: the text of a keyword, 'true'/'false', or a number
    without a needless '.0'."""
    if "key_as_string" in bucket:
        return str(bucket["key_as_string"])
    key = bucket["key"]
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    return str(key)


@hookimpl
def reranker_register_backends():
    return [EmbeddedBackend]


def _text_of(value: Any) -> str:
    """A stored field's text to highlight: a string, or a list's strings as one text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(item for item in value if isinstance(item, str))
    return ""


def _characters(fragment: str, spans: list[tuple[int, int]]
                ) -> tuple[str, list[tuple[int, int]]]:
    """``fragment`` and its highlighted ``spans`` in characters (Tantivy gives them in
    bytes of UTF-8)."""
    encoded = fragment.encode("utf-8")
    return fragment, [(len(encoded[:start].decode("utf-8", "ignore")),
                       len(encoded[:end].decode("utf-8", "ignore"))) for start, end in spans]
