"""A protocol-level Elasticsearch stand-in for the tests.

A real HTTP server in the test process that speaks the subset of the Elasticsearch REST API
the adapter uses, answering from a real embedded (Tantivy) index so that scores are real
BM25 scores:

* ``GET /`` with a configurable version number; the compatibility headers are checked as a
  real server does (an 8.x server refuses ``compatible-with=9``), and every answer carries
  ``X-Elastic-Product: Elasticsearch``;
* index create / exists / delete / get mapping / field capabilities, aliases, ``_refresh``;
* ``_bulk`` (NDJSON) with per-item errors for values that do not fit the mapping;
* ``_search`` for the Query DSL subset ``bool``, ``match``, ``multi_match``, ``match_all``,
  ``term``, ``terms`` and the Learning to Rank plugin's ``sltr`` with the ``ltr_log``
  extension; named queries with ``include_named_queries_score`` (the 8.8+ map format; the
  older list format otherwise); ``docvalue_fields`` (dates as epoch milliseconds);
  ``_validate/query``; stored scripts; the plugin's feature sets;
* errors in Elasticsearch's JSON format; and faults to inject: a delay, a dropped
  connection, an error status.

With ``distribution="opensearch"`` it answers as OpenSearch 2.x or 3.x does: ``GET /`` says
``"distribution": "opensearch"``, no ``X-Elastic-Product`` header, the Elasticsearch
client's ``vnd.elasticsearch`` media types are refused (406), and named-query scores need
2.13 or later.
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import tantivy

from reranker.backends.documents import field_value as _dotted
from reranker.backends.embedded import _analyzer

ANALYZER = _analyzer()


class ApiError(Exception):
    def __init__(self, status: int, kind: str, reason: str):
        super().__init__(reason)
        self.status, self.kind, self.reason = status, kind, reason

    def body(self) -> dict[str, Any]:
        cause = {"type": self.kind, "reason": self.reason}
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


class Index:
    """Documents and mapping of one index, with a Tantivy index rebuilt on refresh."""

    def __init__(self, name: str, mappings: dict[str, Any]):
        self.name = name
        self.properties = dict(mappings.get("properties", {}))
        self.docs: dict[str, dict[str, Any]] = {}
        self._built: tuple | None = None

    def text_fields(self) -> list[str]:
        return [f for f, spec in self.properties.items() if spec.get("type") == "text"]

    def put(self, doc_id: str, source: dict[str, Any]) -> None:
        for field, spec in self.properties.items():
            value = _dotted(source, field)
            if value is None:
                continue
            kind = spec.get("type")
            if kind in ("float", "double", "integer", "long"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    try:
                        float(value)
                    except (TypeError, ValueError):
                        raise ApiError(400, "document_parsing_exception",
                                       f"[1:1] failed to parse field [{field}] of type "
                                       f"[{kind}] in document with id '{doc_id}'") from None
            if kind == "date" and _epoch_millis(value) is None:
                raise ApiError(400, "document_parsing_exception",
                               f"[1:1] failed to parse field [{field}] of type [date] in "
                               f"document with id '{doc_id}'")
        self.docs[doc_id] = source
        self._built = None

    def doc_value(self, doc_id: str, field: str, fmt: str | None) -> Any:
        """A document's doc value of ``field`` as ``docvalue_fields`` answers it: a date as
        the text of its epoch milliseconds (the only date format the stand-in knows), a
        number as a number."""
        value = _dotted(self.docs[doc_id], field)
        kind = self.properties.get(field, {}).get("type")
        if value is None:
            return None
        if kind == "date":
            if fmt not in (None, "epoch_millis"):
                raise ApiError(400, "illegal_argument_exception",
                               f"the stand-in formats dates as epoch_millis only, not {fmt}")
            return str(_epoch_millis(value))
        if fmt is not None:
            raise ApiError(400, "illegal_argument_exception",
                           f"Field [{field}] of type [{kind}] does not support custom formats")
        return float(value) if kind in ("float", "double") else value

    def build(self):
        if self._built is None:
            builder = tantivy.SchemaBuilder()
            builder.add_text_field("_id", stored=True, tokenizer_name="raw")
            fields = self.text_fields()
            for f in fields:
                builder.add_text_field(f, stored=False, tokenizer_name="standin_en")
            schema = builder.build()
            index = tantivy.Index(schema)
            index.register_tokenizer("standin_en", ANALYZER)
            writer = index.writer(15_000_000, 1)
            for doc_id, source in self.docs.items():
                doc = tantivy.Document()
                doc.add_text("_id", doc_id)
                for f in fields:
                    value = _dotted(source, f)
                    doc.add_text(f, value if isinstance(value, str) else "")
                writer.add_document(doc)
            writer.commit()
            writer.wait_merging_threads()
            index.reload()
            self._built = (index, schema, index.searcher())
            self._ids: dict[tuple[int, int], str] = {}
        return self._built

    def field_scores(self, field: str, text: str, operator: str = "or") -> dict[str, float]:
        """BM25 of ``text`` in ``field`` for every matching document."""
        if field not in self.text_fields():
            if self.properties.get(field, {}).get("type") == "keyword":
                return {d: 1.0 for d, s in self.docs.items() if str(_dotted(s, field)) == text}
            return {}
        index, schema, searcher = self.build()
        terms = list(dict.fromkeys(ANALYZER.analyze(text)))
        if not terms:
            return {}
        occur = tantivy.Occur.Must if operator == "and" else tantivy.Occur.Should
        query = tantivy.Query.boolean_query(
            [(occur, tantivy.Query.term_query(schema, field, t)) for t in terms])
        hits = searcher.search(query, max(1, len(self.docs)), count=False).hits
        return {self._doc_id(searcher, address): score for score, address in hits}

    def _doc_id(self, searcher, address) -> str:
        """A hit's id, read from the stored document once per build of the index."""
        key = (address.segment_ord, address.doc)
        doc_id = self._ids.get(key)
        if doc_id is None:
            doc_id = self._ids[key] = searcher.doc(address)["_id"][0]
        return doc_id


class Standin:
    """The stand-in server; ``url`` is where it listens."""

    def __init__(self, version: str = "8.15.1", distribution: str = "elasticsearch"):
        self.version = version
        self.distribution = distribution
        self.indices: dict[str, Index] = {}
        self.aliases: dict[str, str] = {}
        self.scripts: dict[str, dict[str, Any]] = {}
        self.featuresets: dict[str, list[dict[str, Any]]] = {}  # name -> features
        self.delay = 0.0  # seconds before answering a search
        self.drop = False  # close the connection instead of answering
        self.fail_status: int | None = None  # answer every search with this status
        #: What delay, drop and fail_status hit: every search, or those whose query is
        #: ``ids`` alone (reading documents by id) or not (finding candidates).
        self.faulty = {"ids", "other"}
        #: Requests answered 403, as for an API key without the privilege: ``info`` (``GET
        #: /``, the ``monitor`` cluster privilege), ``exists`` (``HEAD <index>``) and
        #: ``mapping`` (``view_index_metadata``).
        self.forbidden: set[str] = set()
        #: The name of a remote cluster whose ``<cluster>:<index>`` expressions this server
        #: answers from its own indices, as cross-cluster search does: for searches and field
        #: capabilities only; other APIs refuse them, as Elasticsearch's do.
        self.remote_cluster = "remote"
        self._timing = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.bodies: list[tuple[str, str, bytes]] = []  # the raw body of each request
        self.answered_bytes = 0  # bytes of the answers' bodies, all requests together
        self.serving_seconds = 0.0  # time spent answering (from a read request to its answer)
        self.connections: set = set()
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def opensearch(self) -> bool:
        return self.distribution == "opensearch"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def stop(self) -> None:
        """Stop listening and cut every open connection, as a crashed server would."""
        self.server.shutdown()
        self.server.server_close()
        for connection in list(self.connections):
            try:
                connection.shutdown(2)
                connection.close()
            except OSError:
                pass

    def resolve(self, name: str) -> Index:
        name = self.aliases.get(name, name)
        if name not in self.indices:
            raise ApiError(404, "index_not_found_exception", f"no such index [{name}]")
        return self.indices[name]

    # -- queries ------------------------------------------------------------------------------

    def evaluate(self, index: Index, query: dict[str, Any], named: dict[str, dict[str, float]],
                 params: dict[str, Any] | None = None, scoring: bool = True
                 ) -> dict[str, float]:
        """Matching documents with their scores; records named clauses in ``named``. A bool
        query in filter context (``scoring`` False) scores its matches 0, as Elasticsearch
        does not score filters (the clauses inside keep their scores, for ``named``)."""
        if not isinstance(query, dict) or len(query) != 1:
            raise ApiError(400, "parsing_exception", "query malformed, must start with a "
                                                     "single query name")
        kind, spec = next(iter(query.items()))
        name = spec.pop("_name", None) if isinstance(spec, dict) else None
        if name:  # Elasticsearch scores a named query on its own, wherever it sits
            scoring = True
        boost = float(spec.pop("boost", 1.0)) if isinstance(spec, dict) else 1.0
        if kind == "match_all":
            result = {d: 1.0 for d in index.docs}
        elif kind == "match":
            if len(spec) != 1:
                raise ApiError(400, "parsing_exception",
                               "[match] query doesn't support multiple fields, found "
                               f"[{', '.join(spec)}]")
            (field, value), = spec.items()
            if isinstance(value, dict):
                name = value.get("_name", name)
                boost *= float(value.get("boost", 1.0))
                text, operator = value.get("query"), value.get("operator", "or")
            else:
                text, operator = value, "or"
            if not isinstance(text, str):
                raise ApiError(400, "parsing_exception", f"[match] query text must be a string "
                                                         f"for field [{field}]")
            result = index.field_scores(field, text, operator.lower())
        elif kind == "multi_match":
            text = spec.get("query")
            if not isinstance(text, str):
                raise ApiError(400, "parsing_exception", "[multi_match] requires query")
            result = {}
            for entry in spec.get("fields") or index.text_fields():
                field, _, weight = entry.partition("^")
                for doc, score in index.field_scores(field, text).items():
                    scaled = score * (float(weight) if weight else 1.0)
                    result[doc] = max(result.get(doc, 0.0), scaled)  # best_fields
        elif kind == "ids":
            result = {str(v): 1.0 for v in spec.get("values", []) if str(v) in index.docs}
        elif kind in ("term", "terms"):
            (field, value), = spec.items()
            values = value if kind == "terms" else [value.get("value") if isinstance(value, dict)
                                                     else value]
            wanted = {_term_text(v) for v in values}
            result = {}
            for d, source in index.docs.items():
                value = _dotted(source, field)
                if {_term_text(v) for v in (value if isinstance(value, list) else [value])} \
                        & wanted:  # a list field matches when any of its values does
                    result[d] = 1.0
        elif kind == "range":
            (field, bounds), = spec.items()
            checks = {"gte": float.__ge__, "gt": float.__gt__, "lte": float.__le__,
                      "lt": float.__lt__}
            result = {}
            if index.properties.get(field, {}).get("type") == "date":  # dates as epoch ms
                millis = {name: _epoch_millis(bound) for name, bound in bounds.items()}
                if None in millis.values():
                    raise ApiError(400, "parse_exception",
                                   f"failed to parse date field {bounds} with format "
                                   f"[strict_date_optional_time||epoch_millis]")
                for d, source in index.docs.items():
                    value = _epoch_millis(_dotted(source, field))
                    if value is not None and all(checks[name](float(value), float(bound))
                                                 for name, bound in millis.items()):
                        result[d] = 1.0
                bounds = {}
            for d, source in index.docs.items() if bounds else ():
                value = _dotted(source, field)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if all(checks[name](float(value), float(bound))
                       for name, bound in bounds.items()):
                    result[d] = 1.0
        elif kind == "bool":
            result = self._bool(index, spec, named, params, scoring)
        elif kind == "sltr":
            result = self._sltr(index, spec, named)
        else:
            raise ApiError(400, "parsing_exception", f"unknown query [{kind}]")
        if boost != 1.0:
            result = {d: s * boost for d, s in result.items()}
        if name:
            named[name] = result
        return result

    def _bool(self, index, spec, named, params, scoring: bool = True) -> dict[str, float]:
        def clauses(key):
            value = spec.get(key, [])
            return value if isinstance(value, list) else [value]

        must = [self.evaluate(index, q, named) for q in clauses("must")]
        should = [self.evaluate(index, q, named) for q in clauses("should")]
        filters = [self.evaluate(index, q, named, scoring=False) for q in clauses("filter")]
        must_not = [self.evaluate(index, q, named, scoring=False)
                    for q in clauses("must_not")]
        minimum = int(spec.get("minimum_should_match", 0 if (must or filters) else 1))
        required = must + filters
        if not scoring and not required and not must_not and minimum == 1:
            return dict.fromkeys(set().union(*should), 0.0)  # any should clause's match
        candidates = set(min(required, key=len)) if required else set(index.docs)
        for part in required:
            candidates.intersection_update(part)
        for part in must_not:
            candidates.difference_update(part)
        if not scoring and minimum <= 0:
            return dict.fromkeys(candidates, 0.0)
        if not should and minimum <= 0:  # the must clauses' scores alone
            if len(must) == 1:
                return {doc: must[0][doc] for doc in candidates}
            return {doc: sum(part[doc] for part in must) for doc in candidates}
        result = {}
        for doc in candidates:
            matched_should = [part[doc] for part in should if doc in part]
            if len(matched_should) < minimum:
                continue
            result[doc] = (sum(part[doc] for part in must) + sum(matched_should)
                           if scoring else 0.0)
        return result

    def _sltr(self, index, spec, named) -> dict[str, float]:
        features = self.featuresets.get(spec.get("featureset"))
        if features is None:
            raise ApiError(404, "resource_not_found_exception",
                           f"Unknown featureset [{spec.get('featureset')}]")
        keywords = spec.get("params", {}).get("keywords", "")
        per_feature = []
        for feature in features:
            template = json.dumps(feature["template"]).replace("{{keywords}}",
                                                               json.dumps(keywords)[1:-1])
            per_feature.append(self.evaluate(index, json.loads(template), {}))
        self._last_ltr = (features, per_feature)
        return {d: sum(p.get(d, 0.0) for p in per_feature) for d in index.docs}

    def search(self, index: Index, body: dict[str, Any], params: dict[str, str]) -> dict:
        named: dict[str, dict[str, float]] = {}
        self._last_ltr = None
        query = json.loads(json.dumps(body.get("query", {"match_all": {}})))
        matches = self.evaluate(index, query, named)
        order = {d: i for i, d in enumerate(index.docs)}
        ranked = sorted(matches.items(), key=lambda item: (-item[1], order[item[0]]))
        sort = body.get("sort")
        if sort:
            ranked = self._sorted(index, ranked, sort)
        size = int(body.get("size", 10))
        with_scores = params.get("include_named_queries_score") == "true"
        hits = []
        for doc, score in ranked[:size]:
            hit = {"_index": index.name, "_id": doc,
                   "_score": score if not sort or body.get("track_scores") else None}
            if sort:
                hit["sort"] = [_dotted(index.docs[doc], next(iter(key)))
                               for key in sort]
            if body.get("highlight"):
                marked = _highlighted(index.docs[doc], body["highlight"])
                if marked:
                    hit["highlight"] = marked
            source = _filtered_source(index.docs[doc], body.get("_source", True))
            if source is not None:
                hit["_source"] = source
            names = {n: s[doc] for n, s in named.items() if doc in s}
            if names:
                hit["matched_queries"] = names if with_scores else sorted(names)
            for spec in body.get("docvalue_fields", []):
                field = spec["field"] if isinstance(spec, dict) else spec
                value = index.doc_value(doc, field, spec.get("format")
                                        if isinstance(spec, dict) else None)
                if value is not None:
                    hit.setdefault("fields", {})[field] = [value]
            log_specs = body.get("ext", {}).get("ltr_log", {}).get("log_specs")
            if log_specs and self._last_ltr:
                features, values = self._last_ltr
                hit.setdefault("fields", {})["_ltrlog"] = [{log_specs["name"]: [
                    {"name": f["name"], "value": v.get(doc, 0.0)}
                    for f, v in zip(features, values, strict=True)]}]
            hits.append(hit)
        answer = {"took": 1, "timed_out": False,
                  "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                  "hits": {"total": {"value": len(ranked), "relation": "eq"},
                           "max_score": ranked[0][1] if ranked else None, "hits": hits}}
        if body.get("aggs"):
            answer["aggregations"] = self._aggregations(index, body["aggs"], matches)
        return answer

    @staticmethod
    def _numeric_aggregation(index: Index, spec: dict[str, Any], matches) -> dict[str, Any]:
        """A ``range`` aggregation (``from`` included, ``to`` excluded, each bucket keyed as
        asked) or a ``stats`` aggregation over the matching documents."""
        kind, body = next(iter(spec.items()))
        values = _numeric_values(index, body["field"], matches)
        if kind == "stats":
            return {"count": len(values), "min": min(values, default=None),
                    "max": max(values, default=None),
                    "avg": sum(values) / len(values) if values else None,
                    "sum": sum(values)}
        buckets = []
        for r in body["ranges"]:
            low, high = _bound(r.get("from")), _bound(r.get("to"))
            count = sum((low is None or v >= low) and (high is None or v < high)
                        for v in values)
            buckets.append({"key": r.get("key", f"{low or '*'}-{high or '*'}"),
                            **({"from": low} if low is not None else {}),
                            **({"to": high} if high is not None else {}), "doc_count": count})
        return {"buckets": buckets}

    @staticmethod
    def _sorted(index: Index, ranked: list[tuple[str, float]],
                sort: list[dict[str, Any]]) -> list[tuple[str, float]]:
        """The hits in the order of the ``sort`` keys (``{FIELD: {"order": ...}}``),
        documents without a value last, as ``"missing": "_last"`` asks; a text field is
        refused as Elasticsearch refuses it."""
        for key in reversed(sort):  # (stable sorts: the first key decides last)
            (field, spec), = key.items()
            if index.properties.get(field, {}).get("type") == "text":
                raise ApiError(400, "illegal_argument_exception",
                               f"Text fields are not optimised for operations that require "
                               f"per-document field data like aggregations and sorting; "
                               f"[{field}]")
            descending = spec.get("order") == "desc"
            present = [(d, s) for d, s in ranked if _dotted(index.docs[d], field) is not None]
            absent = [(d, s) for d, s in ranked if _dotted(index.docs[d], field) is None]
            present.sort(key=lambda item, f=field: _sort_value(index, item[0], f),
                         reverse=descending)
            ranked = present + absent
        return ranked

    @staticmethod
    def _aggregations(index: Index, aggs: dict[str, Any], matches: dict[str, float]) -> dict:
        """Terms aggregations over the matching documents (keyword, numeric and boolean
        fields; a text field is refused as Elasticsearch refuses it)."""
        out = {}
        for name, spec in aggs.items():
            if "range" in spec or "stats" in spec:
                out[name] = Standin._numeric_aggregation(index, spec, matches)
                continue
            field = spec.get("terms", {}).get("field")
            kind = index.properties.get(field, {}).get("type")
            if kind == "text":
                raise ApiError(400, "illegal_argument_exception",
                               f"Text fields are not optimised for operations that require "
                               f"per-document field data like aggregations; [{field}]")
            counts: dict[Any, int] = {}
            for doc in matches:
                value = _dotted(index.docs[doc], field)
                for item in value if isinstance(value, list) else [value]:
                    if item is not None:
                        counts[item] = counts.get(item, 0) + 1
            ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
            size = int(spec["terms"].get("size", 10))
            buckets = []
            for key, count in ordered[:size]:
                bucket = {"key": int(key) if isinstance(key, bool) else key, "doc_count": count}
                if isinstance(key, bool):
                    bucket["key_as_string"] = "true" if key else "false"
                buckets.append(bucket)
            out[name] = {"doc_count_error_upper_bound": 0,
                         "sum_other_doc_count": sum(c for _, c in ordered[size:]),
                         "buckets": buckets}
        return out


def _numeric_values(index: Index, field: str, matches) -> list[float]:
    """The values of a number or date field (dates as epoch milliseconds) of the matching
    documents; a keyword or text field is refused as Elasticsearch refuses it."""
    kind = index.properties.get(field, {}).get("type")
    if kind in ("text", "keyword", "boolean"):
        raise ApiError(400, "illegal_argument_exception",
                       f"Field [{field}] of type [{kind}] is not supported for aggregation "
                       f"[range]")
    values = []
    for doc in matches:
        value = _dotted(index.docs[doc], field)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                values.append(float(_epoch_millis(item)) if kind == "date" else float(item))
    return values


def _bound(value: Any) -> float | None:
    return None if value is None else float(
        value if isinstance(value, (int, float)) else _epoch_millis(value))


def _term_text(value: Any) -> str:
    """A value as a keyword field indexes it (true -> "true", 5.0 -> "5.0")."""
    return json.dumps(value) if isinstance(value, bool) else str(value)


class _Handler(BaseHTTPRequestHandler):
    standin: Standin
    protocol_version = "HTTP/1.1"
    # Elasticsearch answers with TCP_NODELAY (http.tcp.no_delay); without it, an answer
    # written as headers then body waits about 40 ms on the client's delayed ACK.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.standin.connections.add(self.connection)

    def finish(self) -> None:
        self.standin.connections.discard(self.connection)
        super().finish()

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")

    def do_HEAD(self):
        self._serve("HEAD")

    def _serve(self, method: str) -> None:
        standin = self.standin
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        standin.requests.append((method, url.path, dict(self.headers)))
        standin.bodies.append((method, url.path, raw))
        started = time.perf_counter()
        try:
            self._check_compatibility()
            parts = [unquote(part) for part in url.path.strip("/").split("/")]
            status, body = self._route(method, parts, params, raw)
        except ApiError as exc:
            status, body = exc.status, exc.body()
        except _Drop:
            self.close_connection = True
            return
        self._answer(status, body, method)
        with standin._timing:
            standin.serving_seconds += time.perf_counter() - started

    def _check_compatibility(self) -> None:
        if self.standin.opensearch:
            for header in ("Accept", "Content-Type"):
                value = self.headers.get(header) or ""
                if "vnd.elasticsearch" in value:
                    raise ApiError(406, "media_type_header_exception",
                                   f"{header} header [{value}] is not supported")
            return
        versions = set()
        for header in ("Accept", "Content-Type"):
            match = re.search(r"compatible-with=(\d+)", self.headers.get(header) or "")
            if match:
                versions.add(int(match.group(1)))
        major = self.standin.major
        allowed = {major, major - 1}
        if len(versions) > 1 or (versions and not versions <= allowed):
            raise ApiError(400, "media_type_header_exception",
                           f"Invalid media-type value on headers [Accept, Content-Type]: "
                           f"Accept version must be either version {major} or {major - 1}, "
                           f"but found {max(versions)}")

    def _answer(self, status: int, body: Any, method: str) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        if method != "HEAD":
            self.standin.answered_bytes += len(data)
        self.send_response(status)
        if not self.standin.opensearch:
            self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)

    def _route(self, method: str, parts: list[str], params: dict[str, str],
               raw: bytes) -> tuple[int, Any]:
        standin = self.standin
        body = json.loads(raw) if raw and not parts[-1] == "_bulk" else {}
        if parts == [""]:
            self._refuse("info", "cluster:monitor/main")
            if standin.opensearch:
                return 200, {"name": "standin", "cluster_name": "reranker-tests",
                             "version": {"distribution": "opensearch",
                                         "number": standin.version,
                                         "build_type": "tar", "lucene_version": "9.12.0",
                                         "minimum_wire_compatibility_version": "7.10.0"},
                             "tagline": "The OpenSearch Project: https://opensearch.org/"}
            return 200, {"name": "standin", "cluster_name": "reranker-tests",
                         "version": {"number": standin.version, "build_flavor": "default",
                                     "lucene_version": "9.12.0"},
                         "tagline": "You Know, for Search"}
        if parts[-1] == "_bulk":
            return 200, self._bulk(raw, parts[0] if len(parts) == 2 else None)
        if parts[:2] == ["_cat", "indices"]:  # (format=json, h=index)
            pattern = parts[2] if len(parts) > 2 else "*"
            return 200, [{"index": name} for name in standin.indices
                         if fnmatch.fnmatchcase(name, pattern)]
        if parts[0] == "_scripts":
            if method == "PUT":
                standin.scripts[parts[1]] = body["script"]
                return 200, {"acknowledged": True}
            if parts[1] not in standin.scripts:
                raise ApiError(404, "resource_not_found_exception",
                               f"unable to find script [{parts[1]}]")
            if method == "DELETE":
                del standin.scripts[parts[1]]
                return 200, {"acknowledged": True}
            return 200, {"_id": parts[1], "found": True, "script": standin.scripts[parts[1]]}
        if parts[0] == "_ltr":  # the plugin's feature store: a GET of the stored document
            name = parts[-1]
            features = standin.featuresets.get(name)
            document = {"_index": ".ltrstore", "_id": f"featureset-{name}"}
            if features is None:
                return 404, {**document, "found": False}
            return 200, {**document, "_version": 1, "found": True, "_source": {
                "name": name, "type": "featureset", "featureset": {"name": name, "features": [
                    {"name": f["name"], "template": f["template"]} for f in features]}}}
        name = parts[0]
        if ":" in name:  # another cluster's index: searches and field capabilities only
            cluster, _, name = name.partition(":")
            if cluster != standin.remote_cluster or len(parts) == 1 \
                    or parts[1] not in ("_search", "_field_caps"):
                raise ApiError(400, "illegal_argument_exception",
                               f"Cross-cluster calls are not supported in this context but "
                               f"remote indices were requested: [{parts[0]}]")
        if len(parts) == 1:
            if method == "HEAD":
                self._refuse("exists", "indices:admin/get")
                known = standin.aliases.get(name, name) in standin.indices
                return (200 if known else 404), None
            if method == "PUT":
                if name in standin.indices:
                    raise ApiError(400, "resource_already_exists_exception",
                                   f"index [{name}] already exists")
                standin.indices[name] = Index(name, body.get("mappings", {}))
                return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}
            if method == "DELETE":
                standin.resolve(name)
                del standin.indices[name]
                return 200, {"acknowledged": True}
        index = standin.resolve(name)
        action = parts[1]
        if action == "_mapping":
            self._refuse("mapping", "indices:admin/mappings/get")
            return 200, {index.name: {"mappings": {"properties": index.properties}}}
        if action == "_field_caps":
            fields = {"_id": {"_id": {"type": "_id", "metadata_field": True,
                                      "searchable": True, "aggregatable": True}}}
            for path, kind in _mapped_fields(index.properties, ""):
                fields[path] = {kind: {"type": kind, "metadata_field": False,
                                       "searchable": kind != "object",
                                       "aggregatable": kind not in ("text", "object")}}
            return 200, {"indices": [index.name], "fields": fields}
        if action == "_refresh":
            return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
        if action == "_validate":
            try:
                standin.evaluate(index, json.loads(json.dumps(body.get("query"))), {})
            except ApiError as exc:
                return 200, {"valid": False, "explanations": [
                    {"index": index.name, "valid": False, "error": f"{exc.kind}: {exc.reason}"}]}
            return 200, {"valid": True, "explanations": [{"index": index.name, "valid": True}]}
        if action == "_search":
            self._faults("ids" if "ids" in body.get("query", {}) else "other")
            if "include_named_queries_score" in params and \
                    tuple(int(x) for x in standin.version.split(".")[:2]) < (
                        (2, 13) if standin.opensearch else (8, 8)):
                raise ApiError(400, "illegal_argument_exception",
                               f"request [/{'/'.join(parts)}] contains unrecognized parameter: "
                               f"[include_named_queries_score]")
            return 200, standin.search(index, body, params)
        raise ApiError(400, "illegal_argument_exception",
                       f"unsupported [{method} /{'/'.join(parts)}]")

    def _refuse(self, kind: str, action: str) -> None:
        if kind in self.standin.forbidden:
            raise ApiError(403, "security_exception",
                           f"action [{action}] is unauthorized for API key id [test] of user "
                           f"[reranker]")

    def _faults(self, kind: str) -> None:
        """The fault the stand-in was told to show, if a search of ``kind`` is one it
        applies to."""
        standin = self.standin
        if kind not in standin.faulty:
            return
        if standin.drop:
            raise _Drop()
        if standin.delay:
            time.sleep(standin.delay)
        if standin.fail_status:
            raise ApiError(standin.fail_status, "unavailable_shards_exception",
                           "the stand-in was told to fail")

    def _bulk(self, raw: bytes, default_index: str | None) -> dict[str, Any]:
        lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        items, errors = [], False
        for action, source in zip(lines[::2], lines[1::2], strict=True):
            op, meta = next(iter(action.items()))
            name = meta.get("_index", default_index)
            # (without an _id, the cluster makes one, as for UBI records)
            doc_id = str(meta["_id"]) if "_id" in meta else uuid.uuid4().hex
            try:
                if name not in self.standin.indices:  # auto-create, like Elasticsearch
                    self.standin.indices[name] = Index(name, {})
                self.standin.indices[name].put(doc_id, source)
                items.append({op: {"_index": name, "_id": doc_id, "status": 201,
                                   "result": "created"}})
            except ApiError as exc:
                errors = True
                items.append({op: {"_index": name, "_id": doc_id, "status": exc.status,
                                   "error": {"type": exc.kind, "reason": exc.reason}}})
        return {"took": 1, "errors": errors, "items": items}


def _epoch_millis(value: Any) -> int | None:
    """A date as Elasticsearch's default format reads it (an ISO 8601 date or date and
    time, UTC unless it says otherwise, or a number of epoch milliseconds), in epoch
    milliseconds; None when it is not a date."""
    from datetime import datetime, timezone

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _sort_value(index: Index, doc: str, field: str) -> Any:
    kind = index.properties.get(field, {}).get("type")
    value = _dotted(index.docs[doc], field)
    return _epoch_millis(value) if kind == "date" else value


def _highlighted(source: dict[str, Any], spec: dict[str, Any]) -> dict[str, list[str]]:
    """The ``highlight`` of a hit as Elasticsearch answers it: per field, fragments of the
    field's text with the words the ``highlight_query``'s texts analyse to between the tags
    (HTML-escaped with ``"encoder": "html"``); the stand-in's fragment is the text from its
    first match, cut at ``fragment_size`` characters."""
    import html

    texts: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "query" and isinstance(value, str):
                    texts.append(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(spec.get("highlight_query", {}))
    terms = {t for text in texts for t in ANALYZER.analyze(text)}
    escape = html.escape if spec.get("encoder") == "html" else (lambda text: text)
    pre, post = spec.get("pre_tags", ["<em>"])[0], spec.get("post_tags", ["</em>"])[0]
    out = {}
    for field, options in spec.get("fields", {}).items():
        text = _dotted(source, field)
        if not isinstance(text, str):
            continue
        words = [m for m in re.finditer(r"\w+", text) if set(ANALYZER.analyze(m.group())) & terms]
        if not words:
            continue
        start = words[0].start()
        end = min(len(text), start + int(options.get("fragment_size", 100)))
        parts, at = [], start
        for m in words:
            if m.end() > end:
                break
            parts += [escape(text[at:m.start()]), pre, escape(m.group()), post]
            at = m.end()
        parts.append(escape(text[at:end]))
        out[field] = ["".join(parts)]
    return out


def _mapped_fields(properties: dict[str, Any], prefix: str) -> list[tuple[str, str]]:
    """Every field path of a mapping with its type (objects' sub-fields and multi-fields
    such as ``title.keyword`` included)."""
    out = []
    for name, spec in properties.items():
        path = prefix + name
        out.append((path, spec.get("type", "object")))
        out += _mapped_fields(spec.get("properties", {}), path + ".")
        out += _mapped_fields(spec.get("fields", {}), path + ".")
    return out


def _filtered_source(source: dict[str, Any], spec: Any) -> dict[str, Any] | None:
    """A search hit's ``_source`` as the body's ``_source`` asks: ``false`` none, ``true``
    all, a field, a list of fields or ``{"includes": [...]}`` those (dotted paths keep
    their objects)."""
    if spec is False:
        return None
    if spec is True:
        return source
    includes = spec.get("includes", []) if isinstance(spec, dict) else spec
    includes = [includes] if isinstance(includes, str) else list(includes)
    if not includes:
        return source
    out: dict[str, Any] = {}
    missing = object()
    for path in includes:
        value: Any = source
        for part in path.split("."):
            value = value.get(part, missing) if isinstance(value, dict) else missing
        if value is missing:
            continue
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


class _Drop(Exception):
    """Close the connection without an answer."""
