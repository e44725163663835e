"""Wrap an existing Elasticsearch index (8.8 and later, 9.x) with the official client.

One ``_search`` request retrieves the top candidates *and* every per-hit feature, with only
the numeric fields of their ``_source``; once they are ranked, one more ``_search`` (an
``ids`` query on the same index, alias or pattern) reads the documents of the hits shown
(``backend.fetch_sources: candidates``: every candidate's ``_source`` with the first):

* the retrieval query (the user's, from ``backend.query``, an inline template or a stored
  template) is the ``must`` clause, named ``backend_score``, so the hits keep its order and
  scores;
* the feature queries sit in a ``filter`` clause, as named ``should`` queries next to a
  ``match_all``: they neither change which documents match nor their scores, and with
  ``include_named_queries_score`` (Elasticsearch 8.8+) every hit's ``matched_queries`` maps
  each query name to its own score. Users of the Learning to Rank plugin may instead log a
  feature set (``sltr`` query and the ``ltr_log`` extension).

The user's text is only ever a parameter: a value placed where the config says
``{{query}}``, or a Mustache template parameter escaped as a JSON string, never text spliced
into JSON.

The 9.x client marks every request as ``compatible-with=9``, which an 8.x server refuses; the
server's version is read first (with an 8-compatible header, which both accept) and requests
to an 8.x server are then sent with ``compatible-with=8``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from reranker import hookimpl
from reranker.backends import Backend, Candidates, IndexReport, numeric_value
from reranker.backends.documents import field_value
from reranker.backends.filters import (
    FACET_PREFIX,
    FACET_SIZE,
    RANGES_PREFIX,
    STATS_PREFIX,
    Clause,
    Facet,
    check_clause_types,
    check_facet_types,
    facet_stats,
    filter_types,
)
from reranker.backends.options import Highlight, SortKey
from reranker.core.errors import BackendError, BackendUnavailableError

log = logging.getLogger(__name__)

#: Hits the search that reads the shown documents asks for at most, and per id: room for an
#: id that several indices behind an alias or pattern hold.
SOURCE_SEARCH_SIZE, SAME_ID_ROOM = 10_000, 4
#: Highlighted fragments of a field per hit, at most.
HIGHLIGHT_FRAGMENTS = 3

#: Seconds between two log lines about searches answered in part.
PARTIAL_LOG_SECONDS = 60.0

PLACEHOLDER = "{{query}}"
PROBE_TEXT = "reranker start-up check"
MINIMUM_VERSION = (8, 8)
_COMPAT = re.compile(r"application/(json|x-ndjson)")


#: Loggers of the Elasticsearch client's transport, and the level the backend gives them when
#: nobody has set one. The transport logs an INFO line per request and, when a request fails,
#: a WARNING with the whole urllib3 traceback before every retry; reranker reports each failure
#: once itself (a clean start-up error, a 503 logged by the service, ``/healthz``). The node
#: pool's one-line warnings about a failing node are kept when there are several hosts, where
#: searches go on through the others and nothing else would say that a node is failing.
CLIENT_LOGGERS = ("elastic_transport.transport", "elastic_transport.node_pool")


def quiet_client_logs(several_nodes: bool) -> None:
    """Keep the client's per-request lines and retry tracebacks out of the service's log.

    Only loggers whose level nobody has set are changed (an application that configures
    ``elastic_transport.transport`` itself, say to ``INFO`` while debugging, keeps its
    choice); the root logger and its handlers are left alone."""
    levels = {"elastic_transport.transport": logging.ERROR,
              "elastic_transport.node_pool": logging.WARNING if several_nodes else logging.ERROR}
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(levels[name])


def _client_class():
    """An Elasticsearch client class that can speak to 8.x servers: once the server's major
    version is known (set on the class, which is made afresh for every connection, because
    the client's ``options()`` builds new instances of the same class), requests ask for that
    version's compatibility mode."""
    from elasticsearch import Elasticsearch

    class VersionedElasticsearch(Elasticsearch):
        server_major: int | None = None

        def perform_request(self, method, path, *, params=None, headers=None, body=None,
                            endpoint_id=None, path_parts=None):
            major = self.server_major
            if major is not None and headers:
                # The client turns application/json into "compatible-with=<its major>";
                # giving the server's own major first leaves that rewrite nothing to do.
                headers = {k: _COMPAT.sub(
                    rf"application/vnd.elasticsearch+\1; compatible-with={major}", v)
                    if k.lower() in ("accept", "content-type") else v
                    for k, v in headers.items()}
            return super().perform_request(method, path, params=params, headers=headers,
                                           body=body, endpoint_id=endpoint_id,
                                           path_parts=path_parts)

    return VersionedElasticsearch


def substitute(node: Any, params: dict[str, Any]) -> Any:
    """A copy of a query with every ``{{name}}`` inside a string value replaced by the
    parameter's value (the whole value when the string is exactly ``{{name}}``). Values are
    placed, never parsed: the query's structure cannot change."""
    if isinstance(node, dict):
        return {k: substitute(v, params) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, params) for v in node]
    if isinstance(node, str) and "{{" in node:
        whole = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", node)
        if whole and whole.group(1) in params:
            return params[whole.group(1)]
        return re.sub(r"\{\{\s*(\w+)\s*\}\}",
                      lambda m: str(params.get(m.group(1), m.group(0))), node)
    return node


def _uses_placeholder(node: Any) -> bool:
    return PLACEHOLDER in json.dumps(node)


class TemplateQuery:
    """A Mustache template that renders the retrieval query (or a search body whose only
    other keys reranker sets itself). Parameters are escaped as JSON strings, as
    Elasticsearch's Mustache engine does for JSON templates; a missing parameter renders
    empty; ``{{#toJson}}name{{/toJson}}`` renders a parameter as JSON. Rendered values are
    never rendered again, so the user's text cannot act as template syntax."""

    #: Keys of a rendered search body that reranker replaces or can drop safely.
    BODY_KEYS = {"query", "size", "from", "_source", "track_total_hits", "timeout"}
    #: Kept: sent with every search, answered in the response's ``aggregations``.
    AGGS_KEYS = {"aggs", "aggregations"}
    _TO_JSON = re.compile(r"\{\{#toJson\}\}\s*([\w.]+)\s*\{\{/toJson\}\}")
    #: Elasticsearch's own Mustache functions besides ``toJson``, which a Mustache renderer
    #: would render as sections of a missing parameter: empty.
    _UNSUPPORTED = re.compile(r"\{\{\s*#\s*(join|url)\b")

    def __init__(self, source: str, params: dict[str, Any], where: str):
        import pystache

        self.where = where
        unsupported = self._UNSUPPORTED.search(source)
        if unsupported:
            raise BackendError(f"{where}: the template uses {{{{#{unsupported.group(1)}}}}}, "
                               f"an Elasticsearch Mustache function reranker does not render "
                               f"(it would render empty); pass the value ready-made as a "
                               f"parameter, or as JSON with {{{{#toJson}}}}")
        self.params = dict(params)
        self._json_params: list[tuple[str, str]] = []

        def to_raw_variable(match: re.Match) -> str:
            slot = f"__reranker_json_{len(self._json_params)}"
            self._json_params.append((slot, match.group(1)))
            return "{{{" + slot + "}}}"  # a raw variable: its value is inserted as it is

        self.source = self._TO_JSON.sub(to_raw_variable, source)
        self._renderer = pystache.Renderer(escape=lambda s: json.dumps(s)[1:-1],
                                           missing_tags="ignore")
        # A variable no parameter gives renders empty, which breaks the JSON or matches
        # nothing; one inside a section of its own name, or with an inverted section (a
        # default: {{x}}{{^x}}1{{/x}}), is meant to be optional.
        variables = {m.group(1).split(".")[0]
                     for m in re.finditer(r"\{\{\{?\s*([A-Za-z_][\w.]*)\s*\}?\}\}", source)}
        guarded = {m.group(1).split(".")[0]
                   for m in re.finditer(r"\{\{\s*[#^]\s*([A-Za-z_][\w.]*)\s*\}\}", source)}
        missing = sorted(variables - guarded - set(self.params) - {"query"}
                         - {name for _, name in self._json_params} - {"toJson"})
        if missing:
            raise BackendError(f"{where}: the template uses {{{{{missing[0]}}}}}, which "
                               f"backend.template_params does not give (a missing parameter "
                               f"renders empty); add it there, or give a default with "
                               f"{{{{^{missing[0]}}}}}...{{{{/{missing[0]}}}}}")

    def render(self, text: str) -> dict[str, Any]:
        """The retrieval query for the user's ``text``."""
        return self.render_search(text)[0]

    def render_search(self, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The retrieval query for the user's ``text`` and the aggregations the template's
        search body asks for (empty when it renders the query alone)."""
        params = {**self.params, "query": text}
        for slot, name in self._json_params:
            params[slot] = json.dumps(field_value(params, name))
        try:
            rendered = self._renderer.render(self.source, params)
        except Exception as exc:  # pystache raises several types for bad templates
            raise BackendError(f"{self.where}: the template does not render: {exc}") from exc
        try:
            body = json.loads(rendered)
        except ValueError as exc:
            raise BackendError(f"{self.where}: the template does not render to JSON: "
                               f"{exc}") from exc
        if not isinstance(body, dict):
            raise BackendError(f"{self.where}: the template must render a JSON object")
        if "query" not in body:
            return body, {}  # the template renders the query itself
        extra = sorted(set(body) - self.BODY_KEYS - self.AGGS_KEYS)
        if extra:
            raise BackendError(f"{self.where}: the template renders a search body with "
                               f"{', '.join(extra)}, which reranker cannot keep (it retrieves "
                               f"with the query and reranks the hits); make the template "
                               f"render the query, and aggregations if any, alone")
        if not isinstance(body["query"], dict):
            raise BackendError(f"{self.where}: the template's query must be an object")
        aggs: dict[str, Any] = {}
        for key in self.AGGS_KEYS & set(body):
            if not isinstance(body[key], dict):
                raise BackendError(f"{self.where}: the template's {key} must be an object")
            aggs.update(body[key])
        clash = sorted(name for name in aggs if name.startswith(FACET_PREFIX))
        if clash:
            raise BackendError(f"{self.where}: aggregation name {clash[0]!r} is reserved for "
                               f"the facets of a search; rename it")
        return body["query"], aggs


class ElasticsearchBackend(Backend):
    """Candidates and features from an existing Elasticsearch index (``backend.index``)."""

    name = "elasticsearch"
    #: The server's name in messages.
    product = "Elasticsearch"
    #: The oldest version that gives every hit its named queries' scores.
    minimum_version = MINIMUM_VERSION
    #: The keys that give the credentials, for a refusal's hint.
    credential_keys = "backend.api_key_env, or backend.username and backend.password_env,"

    def __init__(self, config):
        super().__init__(config)
        backend = config.backend
        if not backend.index:
            raise BackendError("backend.index: the Elasticsearch index or alias to search is "
                               "not set")
        self.index = backend.index
        #: An index expression naming a remote cluster's index (``cluster:index``).
        self.remote = any(":" in part for part in self.index.split(","))
        self.fields = tuple(backend.fields)
        self.numeric_fields = tuple(config.features.numeric_fields)
        #: The numeric fields mapped as dates (read at start-up): their values come as epoch
        #: milliseconds from the documents' doc values, not from ``_source``, where a date
        #: is usually text, and are given in days (:data:`MS_PER_DAY`).
        self.date_fields: tuple[str, ...] = ()
        #: Each filter field's kind as the mapping has it (read at start-up: ``keyword``,
        #: ``number``, ``boolean`` or ``date``), which a search's clauses are checked against
        #: (:func:`reranker.backends.filters.check_clause_types`).
        self.filter_kinds: dict[str, str] = {}
        self.id_field = backend.id_field
        self.timeout = backend.request_timeout
        self.sources_with_search = backend.fetch_sources == "candidates"
        self._template: TemplateQuery | None = None
        if backend.template is not None:
            self._template = TemplateQuery(backend.template, dict(backend.template_params),
                                           "backend.template")
        self._query = _plain(backend.query) if backend.query is not None else None
        if self._query is not None and not _uses_placeholder(self._query):
            raise BackendError("backend.query: no {{query}} placeholder for the user's text")
        if self._query is None and backend.template is None and backend.template_id is None:
            self._query = {"multi_match": {"query": PLACEHOLDER, "fields": list(self.fields)}}
        if backend.ltr_featureset:
            self.feature_names = [f"ltr:{n}" for n in backend.ltr_features]
            self._features: dict[str, Any] = {}
        elif backend.feature_queries:
            self._features = {f"query_score:{name}": _plain(query)
                              for name, query in backend.feature_queries.items()}
            for name, query in self._features.items():
                if not isinstance(query, dict):
                    raise BackendError(f"backend.feature_queries.{name.split(':', 1)[1]}: "
                                       f"must be a query object")
            self.feature_names = list(self._features)
        else:
            self._features = {f"field_score:{f}": {"match": {f: {"query": PLACEHOLDER}}}
                              for f in self.fields}
            self.feature_names = list(self._features)
        self._es = None
        self._partial_logged = -math.inf  # when a partial answer was last logged
        #: Whether the server refused to tell its version (a key without the ``monitor``
        #: privilege): health is then checked with a search of the index.
        self._info_forbidden = False
        self._timeout_clients: dict[int, Any] = {}  # hundredths of a second -> client
        self._lock = threading.Lock()
        self.server_version: str | None = None
        quiet_client_logs(several_nodes=not backend.cloud_id and len(backend.hosts) > 1)

    # -- connection -------------------------------------------------------------------------

    def _connect(self):
        backend = self.config.backend
        # A request that timed out is not retried: a search must answer (or fail with 503)
        # within request_timeout. Connection failures, which are quick, are retried.
        kwargs: dict[str, Any] = {"request_timeout": self.timeout,
                                  "max_retries": backend.max_retries,
                                  "retry_on_timeout": False,
                                  "verify_certs": backend.verify_certs}
        if backend.cloud_id:
            kwargs["cloud_id"] = backend.cloud_id
        else:
            kwargs["hosts"] = list(backend.hosts)
        kwargs.update(self._tls())
        if backend.api_key_env:
            kwargs["api_key"] = _secret(backend.api_key_env, "backend.api_key_env")
        if backend.username:
            kwargs["basic_auth"] = self._user_and_password()
        try:
            return _client_class()(**kwargs)
        except (ValueError, TypeError) as exc:
            raise BackendError(f"backend.hosts/backend.cloud_id: {exc}") from exc

    def _tls(self) -> dict[str, Any]:
        """The client's certificate authority, when ``backend.ca_certs`` names one."""
        path = self.config.backend.ca_certs
        if not path:
            return {}
        if not os.path.isfile(path):
            raise BackendError(f"backend.ca_certs: {path} does not exist")
        return {"ca_certs": path}

    def _user_and_password(self) -> tuple[str, str]:
        """``backend.username`` with the password from ``backend.password_env``."""
        backend = self.config.backend
        if not backend.password_env:
            raise BackendError("backend.username is set but backend.password_env (the "
                               "environment variable with the password) is not")
        return backend.username, _secret(backend.password_env, "backend.password_env")

    @property
    def es(self):
        if self._es is None:
            with self._lock:
                if self._es is None:
                    client = self._connect()
                    self._detect_version(client)
                    self._es = client
        return self._es

    def _with_timeout(self, seconds: float):
        """The client with a request timeout of ``seconds`` rounded down to a hundredth of a
        second (never past the search's deadline, never more than 10 ms short of it),
        kept per value: the client's ``options()`` builds a new client, which costs about
        a tenth of a millisecond. Below a tenth of a second, exactly ``seconds``."""
        if seconds < 0.1:
            return self.es.options(request_timeout=seconds)
        hundredths = int(seconds * 1000.0 + 1e-6) // 10  # (0.3 s is 30, not 29)
        clients = self._timeout_clients
        client = clients.get(hundredths)
        if client is None:
            if len(clients) >= 256:  # timeouts changed (a reloaded configuration): start over
                clients.clear()
            client = clients[hundredths] = self.es.options(request_timeout=hundredths / 100)
        return client

    def _detect_version(self, client) -> None:
        """Read the server's version with a header both 8.x and 9.x accept, then talk to it
        in its own compatibility mode; refuse servers without named-query scores."""
        from elasticsearch import AuthorizationException

        cls = type(client)
        cls.server_major = 8  # both 8.x and 9.x servers accept compatible-with=8

        def info():
            try:
                return client.info()
            except AuthorizationException:
                return None

        info = self._call(info, "reading the server's version")
        if info is None:
            # A key allowed to search the index alone (no ``monitor`` privilege): spoken to
            # in the 8.x compatibility mode, which 8.x and 9.x servers accept; a server older
            # than 8.8 is found out by the start-up search, which it refuses (the parameter
            # include_named_queries_score).
            self._info_forbidden = True
            log.info("Elasticsearch at %s does not tell this key its version (the monitor "
                     "cluster privilege); requests use the 8.x compatibility mode",
                     self._where())
            return
        number = str(info.get("version", {}).get("number", ""))
        match = re.match(r"(\d+)\.(\d+)", number)
        if not match:
            raise BackendError(f"{self.product} at {self._where()} reports no version number")
        major, minor = int(match.group(1)), int(match.group(2))
        if (major, minor) < MINIMUM_VERSION:
            raise BackendError(f"Elasticsearch {number} at {self._where()} is too old: "
                               f"per-hit feature scores need 8.8 or later")
        cls.server_major = major
        self.server_version = number

    def _where(self) -> str:
        """The cluster, for messages: its hosts without any credentials written into them,
        or the Elastic Cloud deployment's name (the part of the cloud id before ``:``; the
        rest encodes its host names)."""
        backend = self.config.backend
        if backend.cloud_id:
            return f"Elastic Cloud deployment {backend.cloud_id.split(':', 1)[0]!r}"
        return ", ".join(re.sub(r"//[^/@]*@", "//", host) for host in backend.hosts)

    def _call(self, func: Callable[[], Any], what: str) -> Any:
        """Run a client call; unreachable or slow clusters become 503s, refusals name what
        the cluster said."""
        try:
            response = func()
        except Exception as exc:
            kind, status, reason = self._failure(exc)
            product = self.product
            if kind == "timeout":
                raise BackendUnavailableError(f"{product} at {self._where()} did not answer "
                                              f"within {self.timeout:g}s while {what}") from exc
            if kind == "unreachable":  # (what failed, without the client's host and port)
                raise BackendUnavailableError(f"{product} at {self._where()} is unreachable "
                                              f"while {what}: {reason}") from exc
            if kind == "refused":
                if status in (429, 502, 503, 504):
                    raise BackendUnavailableError(f"{product} is unavailable while {what}: "
                                                  f"{reason}") from exc
                hint = ""
                if status == 401:  # (which keys give the credentials)
                    hint = f"; check the credentials that {self.credential_keys} name"
                raise BackendError(f"{product} refused {what}: {reason}{hint}",
                                   status=502) from exc
            if kind == "failed":
                raise BackendUnavailableError(f"{product} failed while {what}: "
                                              f"{reason}") from exc
            raise
        return getattr(response, "body", response)

    def _failure(self, exc: Exception) -> tuple[str | None, int | None, str]:
        """What a client's exception says: ``timeout``, ``unreachable``, ``refused`` (an
        answer with an error status), ``failed`` (the transport failed otherwise) or None
        (not the client's); the HTTP status, and the reason in a few words."""
        from elasticsearch import ApiError, ConnectionError, ConnectionTimeout, TransportError

        if isinstance(exc, ConnectionTimeout):
            return "timeout", None, ""
        if isinstance(exc, ConnectionError):
            return "unreachable", None, _connection_failure(exc)
        if isinstance(exc, ApiError):
            return "refused", exc.status_code, _error_reason(exc)
        if isinstance(exc, TransportError):
            return "failed", None, _short(exc)
        return None, None, ""

    def _not_found(self) -> type[Exception]:
        """The client's exception for a 404 answer."""
        from elasticsearch import NotFoundError

        return NotFoundError

    def _bulk(self):
        """The client's bulk helpers, and the client they take."""
        from elasticsearch import helpers

        return helpers, self.es

    # -- start-up ---------------------------------------------------------------------------

    def open(self) -> None:
        es = self.es
        backend = self.config.backend
        self._check_fields()
        if backend.template_id is not None:
            stored = self._call(lambda: es.get_script(id=backend.template_id),
                                f"reading the stored template {backend.template_id!r}")
            source = stored.get("script", {}).get("source")
            if not isinstance(source, str):
                raise BackendError(f"backend.template_id: stored script "
                                   f"{backend.template_id!r} is not a Mustache template")
            self._template = TemplateQuery(source, dict(backend.template_params),
                                           f"backend.template_id {backend.template_id!r}")
        if backend.ltr_featureset:
            self._check_featureset()
        if not self.remote:  # (the validate API reads local indices only)
            for name, query in self._features.items():
                self._validate(substitute(query, {"query": PROBE_TEXT}),
                               f"feature query {name!r}")
            self._validate(self._retrieval(PROBE_TEXT)[0], "the retrieval query")
        try:
            self.search(PROBE_TEXT, 1)  # the whole request runs
        except BackendError as exc:
            if "include_named_queries_score" in exc.message:  # (a version not read: < 8.8)
                raise BackendError(f"{self.product} at {self._where()} refused the per-hit "
                                   f"feature scores (include_named_queries_score): they need "
                                   f"{self.product} {'.'.join(map(str, self.minimum_version))} "
                                   f"or later") from exc
            raise

    def _check_fields(self) -> None:
        """The index, alias or pattern must exist, and every configured field be in its
        mapping (in that of an index behind it, at least), numeric fields as numbers or
        dates: an error names the field and the closest names the mapping has, instead of a
        feature that is always 0. Read with the field capabilities API, which needs no more
        than the search itself (the ``read`` privilege) and answers for remote clusters
        too."""
        from reranker.core.suggest import did_you_mean

        NotFoundError = self._not_found()  # noqa: N806 -- the client's class
        es = self.es

        def field_caps():
            try:
                return es.field_caps(index=self.index, fields="*")
            except NotFoundError:
                return None

        answer = self._call(field_caps, f"reading the fields of {self.index!r}")
        if not answer or not answer.get("indices"):
            raise BackendError(f"backend.index: no index or alias {self.index!r} in "
                               f"{self.product} at {self._where()}; check the name (an existing "
                               f"index, alias or pattern), or run `reranker index` to create it")
        types = {field: sorted(kinds) for field, kinds in (answer.get("fields") or {}).items()
                 if not any(caps.get("metadata_field") for caps in kinds.values())}
        backend = self.config.backend
        checks = [("features.numeric_fields", self.numeric_fields),
                  ("backend.filter_fields", backend.filter_fields)]
        default_retrieval = backend.query is None and backend.template is None \
            and backend.template_id is None  # (a multi_match over backend.fields)
        if default_retrieval or (not backend.feature_queries and not backend.ltr_featureset):
            checks.insert(0, ("backend.fields", self.fields))
        for key, fields in checks:
            for field in fields:
                if field not in types:
                    raise BackendError(
                        f"{key}: the mapping of {self.index!r} has no field {field!r}"
                        f"{did_you_mean(field, types)} (it maps: "
                        f"{', '.join(sorted(types)[:30])})")
        dates = set()
        for field in self.numeric_fields:
            kinds = types[field]
            if set(kinds) <= DATE_TYPES:
                dates.add(field)
            elif not set(kinds) <= NUMERIC_TYPES:
                raise BackendError(f"features.numeric_fields: {self.index!r} maps {field!r} as "
                                   f"{' and '.join(kinds)}, not as a number or a date; map it "
                                   f"as one (or reindex the values as JSON numbers)")
        self.date_fields = tuple(f for f in self.numeric_fields if f in dates)
        for field in backend.filter_fields:  # terms and range clauses, terms aggregations
            kinds = set(types[field])
            if not kinds <= FILTER_TYPES:
                raise BackendError(
                    f"backend.filter_fields: {self.index!r} maps {field!r} as "
                    f"{' and '.join(sorted(kinds))}; filters and facets need a keyword, "
                    f"number, boolean or date field" + (
                        " (a text field often has a keyword sub-field, such as "
                        f"{field + '.keyword'!r})" if "text" in kinds else "") + (
                        " (a field inside a nested object needs nested queries, which "
                        "filters do not make)" if kinds & {"nested", "object"} else ""))
            kind = {_filter_kind(k) for k in kinds}
            if len(kind) == 1 and None not in kind:  # (indices that disagree: not checked)
                self.filter_kinds[field] = kind.pop()
        nested = sorted({f for f in (*self.numeric_fields, *backend.filter_fields)
                         for prefix in _prefixes(f) if "nested" in types.get(prefix, ())})
        if nested:
            raise BackendError(f"{nested[0]!r} is inside a nested field of {self.index!r}: "
                               f"its values are separate documents to {self.product}, which "
                               f"neither _source features nor filters read; copy it to the "
                               f"document itself (or use feature_queries with a nested query)")

    def _validate(self, query: dict[str, Any], what: str) -> None:
        result = self._call(lambda: self.es.indices.validate_query(
            index=self.index, query=query, explain=True), f"validating {what}")
        if not result.get("valid", False):
            explanations = result.get("explanations") or [{}]
            detail = explanations[0].get("error") or result.get("error") or "invalid"
            raise BackendError(f"{what} is not valid for index {self.index!r}: {detail}")

    def _check_featureset(self) -> None:
        backend = self.config.backend
        store = f"_ltr/{backend.ltr_store}" if backend.ltr_store else "_ltr"
        path = f"/{store}/_featureset/{backend.ltr_featureset}"
        NotFoundError = self._not_found()  # noqa: N806 -- the client's class

        def read():
            try:
                return self.es.perform_request("GET", path,
                                               headers={"accept": "application/json"})
            except NotFoundError:
                return None

        found = self._call(read, f"reading feature set {backend.ltr_featureset!r}")
        features = _featureset_features(found)
        if not features:
            raise BackendError(f"backend.ltr_featureset: no feature set "
                               f"{backend.ltr_featureset!r} in the Learning to Rank store")
        names = [f["name"] for f in features]
        if names != list(backend.ltr_features):
            raise BackendError(f"backend.ltr_features is {list(backend.ltr_features)} but "
                               f"feature set {backend.ltr_featureset!r} has {names}")

    # -- search -----------------------------------------------------------------------------

    def _retrieval(self, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The retrieval query and the template's aggregations."""
        if self._template is not None:
            return self._template.render_search(text)
        return substitute(self._query, {"query": text}), {}

    def request_body(self, text: str, n: int, filters: tuple[Clause, ...] = (),
                     facets: tuple[str | Facet, ...] = ()) -> dict[str, Any]:
        """The one search request: retrieval in ``must``, features and the search's filter
        clauses in ``filter``, facets as terms aggregations. A clause that cannot match its
        field's type is a 400 (:func:`reranker.backends.filters.check_clause_types`)."""
        check_clause_types(filters, self.filter_kinds)
        retrieval, aggs = self._retrieval(text)  # a fresh structure for every request
        named = [{"bool": {"must": [retrieval], "_name": "backend_score"}}]
        body: dict[str, Any] = {"size": n, "track_total_hits": True}
        if not self.sources_with_search:  # the shown hits' documents come after ranking
            numbers = [f for f in self.numeric_fields if f not in self.date_fields]
            body["_source"] = numbers or False
        if self.date_fields:
            body["docvalue_fields"] = [{"field": f, "format": "epoch_millis"}
                                       for f in self.date_fields]
        backend = self.config.backend
        if backend.ltr_featureset:
            sltr = {"_name": "reranker_features", "featureset": backend.ltr_featureset,
                    "params": {"keywords": text}}
            if backend.ltr_store:
                sltr["store"] = backend.ltr_store
            should = [{"sltr": sltr}]
            body["ext"] = {"ltr_log": {"log_specs": {"name": "reranker",
                                                     "named_query": "reranker_features"}}}
        else:
            should = [_named(substitute(query, {"query": text}), name)
                      for name, query in self._features.items()]
        body["query"] = {"bool": {"must": named,
                                  "filter": [{"bool": {"should": should + [{"match_all": {}}]}},
                                             *(clause.to_dict() for clause in filters)]}}
        check_facet_types(facets, self.filter_kinds)
        for f in facets:  # built from checked field names only, never from the user's text
            if isinstance(f, str) or f.values:
                name = f if isinstance(f, str) else f.field
                aggs[FACET_PREFIX + name] = {"terms": {"field": name, "size": FACET_SIZE}}
            elif f.ranges:
                aggs[RANGES_PREFIX + f.field] = {"range": {"field": f.field, "ranges": [
                    {"key": r.key, **{k: v for k, v in (("from", r.low), ("to", r.high))
                                      if v is not None}} for r in f.ranges]}}
            else:
                aggs[STATS_PREFIX + f.field] = {"stats": {"field": f.field}}
        if aggs:
            body["aggs"] = aggs
        return body

    def search(self, query: str, n: int, filters: tuple[Clause, ...] = (),
               facets: tuple[str | Facet, ...] = ()) -> Candidates:
        deadline = time.monotonic() + self.timeout
        body = self.request_body(query, n, filters, facets)
        es = self.es
        response = self._call(lambda: es.search(index=self.index, include_named_queries_score=True,
                                                **body), "searching")
        return self.candidates_from_response(response, deadline)

    def fetch(self, query: str, ids: Sequence[str], filters: tuple[Clause, ...] = ()
              ) -> Candidates:
        """The documents ``ids`` that pass ``filters``: the search's own request with an
        ``ids`` filter, and the retrieval query optional, so that the retrieval and feature
        queries score them as they score candidates (0 where they do not match). It is one
        more request, with its own ``backend.request_timeout``."""
        deadline = time.monotonic() + self.timeout
        unique = list(dict.fromkeys(str(doc_id) for doc_id in ids))
        body = self.request_body(query, len(unique), filters)
        # The retrieval query scores them where it matches (0 elsewhere: no backend_score
        # among a hit's named queries), the ids query finds them without scoring.
        clauses = body["query"]["bool"]
        clauses["should"] = clauses.pop("must")
        clauses["filter"].append({"ids": {"values": unique}})
        body.pop("aggs", None)  # (a template's aggregations: this search's are the search's)
        body["track_total_hits"] = False
        es = self.es
        response = self._call(lambda: es.search(index=self.index, include_named_queries_score=True,
                                                **body), "reading the pinned documents")
        candidates = self.candidates_from_response(response, deadline)
        return dataclasses.replace(candidates, total=None, facets={}, aggregations={})

    def search_sorted(self, query: str, n: int, filters: tuple[Clause, ...],
                      facets: tuple[str | Facet, ...], sort: tuple[SortKey, ...]) -> Candidates:
        """The search's request sorted by the keys (documents without a value last), with
        ``track_scores`` so that the hits keep their relevance scores as features."""
        deadline = time.monotonic() + self.timeout
        body = self.request_body(query, n, filters, facets)
        body["sort"] = [{key.field: {"order": key.order, "missing": "_last"}} for key in sort]
        body["track_scores"] = True
        es = self.es
        response = self._call(lambda: es.search(index=self.index, include_named_queries_score=True,
                                                **body), "searching")
        return self.candidates_from_response(response, deadline)

    def highlight(self, query: str, ids: Sequence[str], sources: Sequence[dict[str, Any]],
                  request: Highlight) -> list[dict[str, list[str]]]:
        """Elasticsearch's highlighter: one search of the shown ids, highlighting the
        request's fields with the retrieval query (HTML-escaped text, the request's tags,
        up to :data:`HIGHLIGHT_FRAGMENTS` fragments of ``fragment_size`` characters)."""
        if not ids:
            return []
        unique = list(dict.fromkeys(str(doc_id) for doc_id in ids))
        retrieval, _ = self._retrieval(query)
        highlight = {"highlight_query": retrieval, "encoder": "html",
                     "pre_tags": [request.pre_tag], "post_tags": [request.post_tag],
                     "fields": {f: {"fragment_size": request.fragment_size,
                                    "number_of_fragments": HIGHLIGHT_FRAGMENTS}
                                for f in request.fields}}
        es = self.es
        response = self._call(lambda: es.search(
            index=self.index, query={"ids": {"values": unique}}, highlight=highlight,
            size=min(SOURCE_SEARCH_SIZE, SAME_ID_ROOM * len(unique)), source=False,
            track_total_hits=False), "highlighting the shown documents")
        found: dict[str, dict[str, list[str]]] = {}
        for hit in response.get("hits", {}).get("hits", []):
            found.setdefault(str(hit.get("_id")), hit.get("highlight") or {})
        return [dict(found.get(str(doc_id), {})) for doc_id in ids]

    def candidates_from_response(self, response: dict[str, Any],
                                 deadline: float | None = None) -> Candidates:
        """Features from a search response: ``_score``, the named queries' scores (or the
        Learning to Rank log) and the numeric fields of ``_source``; the shown hits'
        documents as the response has them, or (``fetch_sources: shown``) read by
        :meth:`read_sources` before ``deadline``."""
        hits, ids = _first_of_each_id(response.get("hits", {}).get("hits", []))
        self._note_partial(response)
        n = len(hits)
        # A sorted search answers no _score: then scores falling with the rank carry the
        # engine's order, as for application candidates without scores.
        scores = np.array([float(n - i if hit.get("_score") is None else hit["_score"])
                           for i, hit in enumerate(hits)])
        field_scores = np.zeros((n, len(self.feature_names)))
        ltr = bool(self.config.backend.ltr_featureset)
        for i, hit in enumerate(hits):
            if ltr:
                values = _ltr_values(hit)
            else:
                matched = hit.get("matched_queries") or {}
                if isinstance(matched, list):
                    raise BackendError(f"{self.product} answered matched_queries as a list: the "
                                       "server does not support include_named_queries_score")
                values = matched
                scores[i] = float(matched.get("backend_score", scores[i]))
            for j, name in enumerate(self.feature_names):
                value = values.get(name.split(":", 1)[1] if ltr else name)
                if value is not None:
                    field_scores[i, j] = float(value)
        numeric = np.full((n, len(self.numeric_fields)), np.nan)
        dates = self.date_fields
        for i, hit in enumerate(hits):
            source = hit.get("_source") or {}
            for j, field in enumerate(self.numeric_fields):
                if field in dates:  # epoch milliseconds, as text: in days
                    value = ((hit.get("fields") or {}).get(field) or [None])[0]
                    numeric[i, j] = numeric_value(value) / MS_PER_DAY
                else:
                    numeric[i, j] = numeric_value(field_value(source, field))
        total = response.get("hits", {}).get("total")
        total = total.get("value") if isinstance(total, dict) else total
        facets, aggregations = {}, {}
        for name, agg in (response.get("aggregations") or {}).items():
            if name.startswith(FACET_PREFIX):
                facets[name[len(FACET_PREFIX):]] = {
                    str(b.get("key_as_string", _facet_key(b.get("key")))):
                        int(b.get("doc_count", 0)) for b in agg.get("buckets", [])}
            elif name.startswith(RANGES_PREFIX):  # (the keys as the request gave them)
                facets[name[len(RANGES_PREFIX):]] = {
                    str(b.get("key")): int(b.get("doc_count", 0)) for b in agg.get("buckets", [])}
            elif name.startswith(STATS_PREFIX):
                field = name[len(STATS_PREFIX):]
                facets[field] = facet_stats(agg, self.filter_kinds.get(field) == "date")
            else:  # the template's own, as answered
                aggregations[name] = agg

        def load_sources(indices: Sequence[int]) -> list[dict[str, Any]]:
            if self.sources_with_search:
                return [hits[i].get("_source") or {} for i in indices]
            return self.read_sources([hits[i] for i in indices], deadline)

        return Candidates(ids=ids, scores=scores, field_scores=field_scores, numeric=numeric,
                          load_sources=load_sources, total=total, facets=facets,
                          aggregations=aggregations)

    def _note_partial(self, response: dict[str, Any]) -> None:
        """A search some shards failed or timed out on still serves the hits the others
        answered (Elasticsearch's default, ``allow_partial_search_results``, which the
        cluster's operator may turn off): the page is valid feedback all the same. It is
        logged, at most once every :data:`PARTIAL_LOG_SECONDS`, with how many shards failed
        and the first reason."""
        shards = response.get("_shards") or {}
        failed = shards.get("failed") or 0
        if not failed and not response.get("timed_out"):
            return
        now = time.monotonic()
        if now - self._partial_logged < PARTIAL_LOG_SECONDS:
            return
        self._partial_logged = now
        reason = ""
        failures = shards.get("failures") or []
        if failures and isinstance(failures[0], dict):
            cause = failures[0].get("reason") or {}
            reason = f": {cause.get('type', 'error')}: {cause.get('reason', '')}" \
                if isinstance(cause, dict) else f": {cause}"
        what = (f"{failed} of {shards.get('total', '?')} shards failed" if failed
                else "the search timed out")
        log.warning("%s answered a search of %r in part (%s%s); the hits the "
                    "other shards found are served", self.product, self.index, what, reason)

    def read_sources(self, hits: Sequence[dict[str, Any]],
                     deadline: float | None = None) -> list[dict[str, Any]]:
        """The ``_source`` of search ``hits``, read by one search of ``backend.index`` for
        their ids: the index, alias or pattern the candidates came from, so that it needs
        no more than their search does (a key allowed to read an alias only, remote
        clusters, filtered aliases, custom routing). Matched by index and id; a document
        deleted since the candidates' search has none (``{}``): its hit still stands for
        the ranked result. The search and this read share ``backend.request_timeout``
        (``deadline``, a :func:`time.monotonic` time)."""
        if not hits:
            return []
        ids = list(dict.fromkeys(str(hit["_id"]) for hit in hits))
        timeout = self.timeout if deadline is None else deadline - time.monotonic()
        if timeout <= 0:
            raise BackendUnavailableError(f"{self.product} at {self._where()} did not answer "
                                          f"within {self.timeout:g}s while reading the shown "
                                          f"documents")
        es = self._with_timeout(timeout)
        # room for an id held by several indices behind an alias or pattern
        size = min(SOURCE_SEARCH_SIZE, SAME_ID_ROOM * len(ids))
        response = self._call(lambda: es.search(
            index=self.index, query={"ids": {"values": ids}}, size=size,
            track_total_hits=False), "reading the shown documents")
        found = {(hit.get("_index"), str(hit.get("_id"))): hit.get("_source") or {}
                 for hit in response.get("hits", {}).get("hits", [])}
        return [found.get((hit.get("_index"), str(hit["_id"])), {}) for hit in hits]

    # -- indexing ---------------------------------------------------------------------------

    def default_mapping(self) -> dict[str, Any]:
        properties: dict[str, Any] = {self.id_field: {"type": "keyword"}}
        for f in self.fields:
            properties[f] = {"type": "text", "analyzer": "english"}
        for f in self.numeric_fields:
            properties[f] = {"type": "double"}
        return {"properties": properties}

    def _mapping(self) -> dict[str, Any]:
        path = self.config.backend.mapping
        if path is None:
            return self.default_mapping()
        try:
            mapping = json.loads(open(path, encoding="utf-8").read())
        except FileNotFoundError:
            raise BackendError(f"backend.mapping: {path} does not exist") from None
        except (OSError, ValueError) as exc:
            raise BackendError(f"backend.mapping: {path} is not readable JSON: {exc}") from exc
        if not isinstance(mapping, dict):
            raise BackendError(f"backend.mapping: {path} must hold a JSON object")
        return mapping.get("mappings", mapping)

    def takes_as_number(self, field: str, value: Any) -> bool:
        """A number, a number as text (which Elasticsearch indexes as a number), or any
        text in a field ``backend.mapping`` maps as a date (Elasticsearch parses it, and
        refuses a bad one for that document alone)."""
        if isinstance(value, str):
            if field in self._mapped_dates():
                return True
            return math.isfinite(numeric_value(value))
        return super().takes_as_number(field, value)

    def _mapped_dates(self) -> set[str]:
        """The fields the mapping ``reranker index`` creates maps as dates."""
        if self.__dict__.get("_dates_mapped") is None:
            dates, todo = set(), [("", self._mapping().get("properties") or {})]
            while todo:
                prefix, properties = todo.pop()
                for name, spec in properties.items():
                    if isinstance(spec, dict):
                        if spec.get("type") in DATE_TYPES:
                            dates.add(prefix + name)
                        todo.append((f"{prefix}{name}.", spec.get("properties") or {}))
            self._dates_mapped = dates
        return self._dates_mapped

    def index_documents(self, documents: Iterable[tuple[str, dict[str, Any]]], *,
                        recreate: bool = False,
                        progress: Callable[[int], None] | None = None) -> IndexReport:
        helpers, bulk_client = self._bulk()
        es = self.es
        exists = bool(self._call(lambda: es.indices.exists(index=self.index),
                                 f"checking index {self.index!r}"))
        if exists and recreate:
            self._call(lambda: es.indices.delete(index=self.index), f"deleting {self.index!r}")
            exists = False
        created = not exists
        inferred: dict[str, str] = {}
        if not exists:
            documents = iter(documents)
            mapping = self._mapping()
            if self.config.backend.mapping is None and self.config.backend.filter_fields:
                types, documents = filter_types(self.config.backend.filter_fields, documents)
                es_types = {"keyword": "keyword", "number": "double", "boolean": "boolean",
                            "date": "date"}
                for field, kind in types.items():
                    if field not in mapping["properties"]:
                        mapping["properties"][field] = {"type": es_types[kind]}
                        inferred[field] = kind
            self._call(lambda: es.indices.create(index=self.index, mappings=mapping),
                       f"creating index {self.index!r}")
        report = IndexReport(filter_types=inferred)
        # Where each document came from, per id and in input order (an id may repeat).
        where_of: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)

        def actions():
            for where, doc in documents:
                doc_id = doc.get(self.id_field)
                if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
                    report.failed.append((where, f"field {self.id_field!r} must be a non-empty "
                                                 f"string or integer, got {doc_id!r}"))
                    continue
                where_of[str(doc_id)].append(where)
                yield {"_index": self.index, "_id": str(doc_id), "_source": doc}

        def run():
            pending = 0
            for ok, item in helpers.streaming_bulk(bulk_client, actions(), chunk_size=500,
                                                   raise_on_error=False,
                                                   raise_on_exception=True, max_retries=2):
                result = next(iter(item.values()))
                doc_id = str(result.get("_id"))
                queue = where_of.get(doc_id)
                where = queue.popleft() if queue else f"document {doc_id}"
                if ok:
                    report.indexed += 1
                else:
                    report.failed.append((f"{where} (id {doc_id})",
                                          _item_error(result.get("error"))))
                pending += 1
                if progress and pending == 500:
                    progress(pending)
                    pending = 0
            if progress and pending:
                progress(pending)

        try:
            self._call(run, f"bulk-loading into {self.index!r}")
            if created and not report.indexed:
                raise _NothingIndexed()
        except BaseException as exc:
            if created:  # a failed first load leaves no half-made index behind
                try:
                    es.indices.delete(index=self.index)
                except Exception:  # noqa: BLE001 -- the load's own error is the one to report
                    log.warning("could not delete the index %r after a failed load", self.index)
            if isinstance(exc, _NothingIndexed):
                return report
            raise
        self._call(lambda: es.indices.refresh(index=self.index), f"refreshing {self.index!r}")
        return report

    def write_records(self, records: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, int]:
        """Index ``(index, document)`` records into the cluster in bulk (each index made as
        the cluster makes an index on first write, with its own mappings where a plugin
        made it first, as OpenSearch's UBI plugin does for ``ubi_queries`` and
        ``ubi_events``); how many each index took. A record the cluster refuses is an
        error naming its index and why."""
        helpers, bulk_client = self._bulk()
        es = self.es
        written: dict[str, int] = collections.Counter()

        def run():
            for ok, item in helpers.streaming_bulk(
                    bulk_client, ({"_index": index, "_source": doc} for index, doc in records),
                    chunk_size=500, raise_on_error=False, raise_on_exception=True,
                    max_retries=2):
                result = next(iter(item.values()))
                if not ok:
                    raise BackendError(f"the cluster refused a record for index "
                                       f"{result.get('_index')!r}: "
                                       f"{_item_error(result.get('error'))}")
                written[result.get("_index")] += 1

        self._call(run, "bulk-writing records")
        for index in written:
            self._call(lambda index=index: es.indices.refresh(index=index),
                       f"refreshing {index!r}")
        return dict(written)

    def index_exists(self) -> bool:
        es = self.es
        return bool(self._call(lambda: es.indices.exists(index=self.index),
                               f"checking index {self.index!r}"))

    # -- health -----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        state: dict[str, Any] = {"type": self.name, "index": self.index,
                                 "version": self.server_version}
        try:  # (the index itself answers: a missing alias, or a cluster too slow, shows)
            client = self.es.options(request_timeout=min(self.timeout, 1.0))
            self._call(lambda: client.search(index=self.index, size=0, track_total_hits=False),
                       "checking health")
            state["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 -- health reports, never raises
            state["status"] = "unavailable"
            state["error"] = str(getattr(exc, "message", exc))
        return state

    def close(self) -> None:
        if self._es is not None:
            self._es.close()


NUMERIC_TYPES = {"long", "integer", "short", "byte", "double", "float", "half_float",
                 "scaled_float", "unsigned_long"}
#: What a filter or facet works on (terms and range clauses, terms aggregations).
FILTER_TYPES = {"keyword", "constant_keyword", "boolean", "ip", *NUMERIC_TYPES, "date",
                "date_nanos"}


def _filter_kind(es_type: str) -> str | None:
    """A mapping type as a filter's kind (:mod:`reranker.backends.filters`); None for one
    the filters' checks leave alone (``ip``)."""
    if es_type in ("keyword", "constant_keyword"):
        return "keyword"
    if es_type in NUMERIC_TYPES:
        return "number"
    if es_type in ("date", "date_nanos"):
        return "date"
    return "boolean" if es_type == "boolean" else None


def _prefixes(field: str) -> list[str]:
    """The object paths above a dotted field: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = field.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


#: Read as epoch milliseconds from doc values (:attr:`ElasticsearchBackend.date_fields`),
#: and given as days since 1970-01-01 (a fraction for the time of day): in milliseconds, a
#: date after 2001 would be beyond the features' bound of 1e12
#: (:attr:`reranker.features.extraction.FeatureSpec.LIMIT`).
DATE_TYPES = {"date", "date_nanos"}
MS_PER_DAY = 86_400_000.0


class _NothingIndexed(Exception):
    """Every document of a first load failed."""


def _facet_key(key: Any) -> str:
    if isinstance(key, float) and key.is_integer():
        return str(int(key))
    return str(key)


def _named(query: dict[str, Any], name: str) -> dict[str, Any]:
    """Wrap a query so that it carries ``_name`` whatever its type."""
    return {"bool": {"must": [query], "_name": name}}


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _secret(variable: str, key: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise BackendError(f"{key}: environment variable {variable} is not set")
    return value


def _first_of_each_id(hits: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The hits without those whose id an earlier (better) hit has, and their ids: two
    indices behind an alias or pattern may hold a document of the same id, and a page shows
    an id once."""
    first: list[dict[str, Any]] = []
    ids: list[str] = []
    seen: set[str] = set()
    for hit in hits:
        doc_id = str(hit["_id"])
        if doc_id not in seen:
            seen.add(doc_id)
            first.append(hit)
            ids.append(doc_id)
    return first, ids


def _featureset_features(answer: Any) -> list[dict[str, Any]] | None:
    """The features of the Learning to Rank plugin's answer to ``GET
    _ltr/_featureset/<name>``: the stored document (``found`` and its ``_source``), or,
    as some versions of the plugin answer, a search of the feature store."""
    if not isinstance(answer, dict):
        return None
    if "_source" in answer:
        document = answer if answer.get("found", True) else None
    else:
        hits = (answer.get("hits") or {}).get("hits") or []
        document = hits[0] if hits else None
    if document is None:
        return None
    return ((document.get("_source") or {}).get("featureset") or {}).get("features")


def _ltr_values(hit: dict[str, Any]) -> dict[str, float]:
    logs = (hit.get("fields") or {}).get("_ltrlog") or []
    entries = logs[0].get("reranker", []) if logs else []
    return {entry["name"]: entry.get("value", 0.0) for entry in entries}


def _connection_failure(exc: Exception) -> str:
    """Why a connection failed, in a few words (the client's text names the host and port,
    which a public answer must not)."""
    text = str(exc).lower()
    for words, reason in (("refused", "connection refused"),
                          ("name or service not known", "the host name does not resolve"),
                          ("nodename nor servname", "the host name does not resolve"),
                          ("temporary failure in name resolution",
                           "the host name does not resolve"),
                          ("certificate", "its TLS certificate was not accepted"),
                          ("ssl", "the TLS handshake failed"),
                          ("reset", "the connection was reset"),
                          ("timed out", "the connection timed out")):
        if words in text:
            return reason
    return "the connection failed"


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 300 else text[:300] + "..."


def _error_reason(exc, body: Any = None) -> str:
    """What the cluster said in an error answer (``body``, by default the exception's own
    ``body``, as the Elasticsearch client keeps it): its root cause, else the status."""
    body = getattr(exc, "body", None) if body is None else body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        cause = (error.get("root_cause") or [error])[0]
        return f"{cause.get('type', 'error')}: {cause.get('reason', error.get('reason'))}"
    return f"status {getattr(exc, 'status_code', '?')}: {_short(exc)}"


def _item_error(error: Any) -> str:
    if isinstance(error, dict):
        reason = error.get("reason", "")
        caused = error.get("caused_by", {})
        if isinstance(caused, dict) and caused.get("reason"):
            reason = f"{reason} ({caused['reason']})"
        return f"{error.get('type', 'error')}: {reason}"
    return str(error)


@hookimpl
def reranker_register_backends():
    return [ElasticsearchBackend]
