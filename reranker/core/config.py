"""Configuration: one schema of defaults, YAML files on top, environment overrides, validation.

``load_config(path, overrides)`` safe-loads a YAML file, merges it over the defaults of
:data:`SCHEMA`, applies ``RERANKER_<SECTION>_<KEY>`` environment variables and then explicit
overrides, validates every value and returns an immutable :class:`Config`.

Errors name the file and the dotted key (``config.yaml: backend.candidates must be an
integer, got 'many'``). Relative paths resolve against the folder of the config file.
``config/default.yaml`` in the repository is the documented copy of these defaults; a test
keeps the two identical.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reranker.core.errors import ConfigError
from reranker.core.suggest import did_you_mean
from reranker.core.times import parse_time

log = logging.getLogger(__name__)

ENV_PREFIX = "RERANKER_"
#: Seconds between two exchanges of request counts at least (a transaction each).
MIN_LIMITS_EXCHANGE = 0.05


@dataclass(frozen=True)
class Key:
    """One configuration key: its type, default and documentation."""

    type: str  # "str", "int", "float", "bool", "list[str]", "mapping"
    default: Any
    doc: str
    choices: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    path: bool = False  # resolved against the config file's folder
    time: bool = False  # an ISO 8601 date and time (YAML's own unquoted timestamps too)


SCHEMA: dict[str, dict[str, Key]] = {
    "backend": {
        "type": Key("str", "embedded", "Search backend: a name registered by a backend plugin "
                    "(built in: 'embedded')."),
        "path": Key("str", "index", "Index directory of the embedded backend.", path=True),
        "fields": Key("list[str]", ["title", "body"], "Text fields searched; each one also "
                      "gives a per-field score feature."),
        "id_field": Key("str", "id", "Document field holding the unique document id."),
        "filter_fields": Key("list[str]", [], "Fields a search may filter on and count as "
                             "facets (keyword, number, true/false or ISO 8601 date values; "
                             "the embedded backend indexes them for it)."),
        "candidates": Key("int", 100, "Hits retrieved from the backend per search and reranked.",
                          minimum=1, maximum=10000),
        "cache_size": Key("int", 1000, "Embedded backend: distinct searches (analysed query, "
                          "filters, facets) whose candidates each process keeps until the "
                          "index changes, so that a repeated search skips the engine; 0 "
                          "keeps none.", minimum=0),
        "document_cache_mb": Key("float", 32.0, "Embedded backend: megabytes of stored "
                                 "documents (their stored JSON, and about 200 bytes each for "
                                 "keeping it) each process keeps until the index changes, "
                                 "the most recently shown first, so that a result shown "
                                 "again is not read and decompressed from the index again; "
                                 "0 keeps none.", minimum=0.0),
        # -- elasticsearch and opensearch --
        "index": Key("str", None, "Elasticsearch index or alias to search.", nullable=True),
        "hosts": Key("list[str]", ["http://localhost:9200"], "Elasticsearch node URLs."),
        "cloud_id": Key("str", None, "Elastic Cloud id (instead of hosts).", nullable=True),
        "api_key_env": Key("str", None, "Environment variable that holds the API key.",
                           nullable=True),
        "username": Key("str", None, "User for basic authentication.", nullable=True),
        "password_env": Key("str", None, "Environment variable that holds the password.",
                            nullable=True),
        "aws_region": Key("str", None, "OpenSearch backend: sign requests with AWS Signature "
                          "Version 4 for this region (Amazon OpenSearch Service or "
                          "Serverless; credentials from the AWS SDK's chain, needs boto3).",
                          nullable=True),
        "aws_service": Key("str", "es", "OpenSearch backend with backend.aws_region: 'es' "
                           "(Amazon OpenSearch Service) or 'aoss' (Serverless).",
                           choices=("es", "aoss")),
        "verify_certs": Key("bool", True, "Verify the cluster's TLS certificate."),
        "ca_certs": Key("str", None, "CA bundle file for TLS verification.", nullable=True,
                        path=True),
        "request_timeout": Key("float", 2.0, "Seconds an Elasticsearch search may take (its "
                               "candidates and the shown documents' request together) "
                               "before it fails with 503.", minimum=0.001),
        "fetch_sources": Key("str", "shown", "Elasticsearch backend: whose _source a search "
                             "reads: 'shown' (the search asks for the numeric fields alone, "
                             "then a search of their ids reads the shown hits' documents) "
                             "or 'candidates' (every candidate's with the search: one "
                             "request, about 4.5 times the bytes received for 100 "
                             "candidates of 1.4 KB).", choices=("shown", "candidates")),
        "max_retries": Key("int", 1, "Retries of a failed or timed-out request (on another "
                           "node when there are several).", minimum=0),
        "query": Key("mapping", None, "Retrieval query (Query DSL) with {{query}} where the "
                     "user's text goes; default: multi_match over backend.fields.",
                     nullable=True),
        "template": Key("str", None, "Inline Mustache template rendering the retrieval query; "
                        "the user's text is its parameter 'query'.", nullable=True),
        "template_id": Key("str", None, "Id of a stored Mustache search template rendering the "
                           "retrieval query (read at start-up).", nullable=True),
        "template_params": Key("mapping", {}, "More parameters for the template."),
        "feature_queries": Key("mapping", {}, "Named feature queries (Query DSL with "
                               "{{query}}); default: a match query per backend.fields entry."),
        "ltr_featureset": Key("str", None, "Learning to Rank plugin feature set to log instead "
                              "of feature queries.", nullable=True),
        "ltr_store": Key("str", None, "Learning to Rank plugin feature store (default store "
                         "when null).", nullable=True),
        "ltr_features": Key("list[str]", [], "Names of the feature set's features, in order "
                            "(checked at start-up)."),
        "mapping": Key("str", None, "JSON file with the index mapping `reranker index` creates "
                       "(default: text fields, numeric fields, a keyword id).", nullable=True,
                       path=True),
    },
    "features": {
        "numeric_fields": Key("list[str]", [], "Numeric document fields used as features "
                              "(for example a popularity field; on Elasticsearch also a date "
                              "field, in epoch milliseconds)."),
        "missing_value": Key("float", 0.0, "Value of a numeric feature for a document that "
                             "lacks the field."),
        "normalization": Key("str", "per_query_minmax", "How raw features are scaled before "
                             "ranking; recorded with the model.",
                             choices=("per_query_minmax", "zscore", "none")),
        "click_features": Key("bool", True, "Add the click features click_lift:query_doc and "
                              "click_lift:doc: each document's clicks per position-weighted "
                              "exposure relative to the overall rate, for the normalised query "
                              "and over the other queries, counted in the event store from "
                              "earlier searches."),
        "click_smoothing": Key("float", 5.0, "Weight, in exposures, of the overall click rate "
                               "that the click features start from (more: slower to trust "
                               "a document's own clicks).", minimum=0.01),
        "click_refresh": Key("float", 1.0, "Seconds a process reuses the click counts it "
                             "has read; its own clicks and impressions count at once, other "
                             "processes' (workers, machines) within this time (when no other "
                             "process writes, one lookup per period confirms the counts "
                             "kept); 0 reads the event store on every search.", minimum=0.0),
    },
    "learner": {
        "name": Key("str", "preference_perceptron", "Learner plugin that ranks the candidates "
                    "(`reranker learners` lists them)."),
        "params": Key("mapping", {}, "Parameters of the learner, checked against the ones it "
                      "declares."),
        "depth": Key("int", 10, "Depth k of the DCG-style joint feature map.", minimum=1),
        "discount": Key("str", "log2", "Position discount of the joint feature map: "
                        "1/log2(i+1), 1/i, or none.", choices=("log2", "reciprocal", "none")),
        "seed": Key("int", None, "Seed of the learner's random generator (null: fresh "
                    "entropy).", nullable=True),
        "specialize": Key("bool", True, "Keep the general model and each query's own clicks "
                          "apart: the learner ranks every query over the features that hold "
                          "for any query (all but click_lift:query_doc), and a query whose "
                          "clicks judge a result better or worse than its others (at "
                          "learner.confidence) gets that ranking refined by its click lift; "
                          "its clicks teach the learner the judged pairs at the learner's own "
                          "ranking. false: the learner sees both click features and ranks "
                          "alone (earlier versions)."),
        "confidence": Key("float", 0.95, "Confidence at which a query's clicks judge one of "
                          "its results against another (a one-sided test of their click "
                          "rates per position-weighted exposure).", minimum=0.5, maximum=0.999),
        "shrink": Key("bool", True, "Rank with each learned weight shrunk to the share that "
                      "the queries which taught it agree on (a James-Stein factor over "
                      "queries): what one query or a few taught alone leaves the starting "
                      "ranking as it was. Learners with a starting ranking whose weights sum "
                      "their updates; false: the learned weights in full."),
        "query_balance": Key("bool", True, "Learn from each query's pages as if every "
                             "query came equally often: a page of a query searched more "
                             "than the average is learned from with probability the "
                             "average over its count, so the model that ranks new queries is "
                             "not the model of the most frequent ones. false: every page."),
    },
    "experiment": {
        "mode": Key("str", None, "Compare learners on live traffic: interleave (team-draft "
                    "interleaving of two arms), multileave (team-draft multileaving of two or "
                    "more), split (each search shown by one arm, assigned by a sticky hash); "
                    "null: no experiment, the learner section serves alone.", nullable=True,
                    choices=("interleave", "multileave", "split")),
        "name": Key("str", "experiment", "Name of the experiment: its results, promotion and "
                    "held arms are kept under it (a new name starts afresh)."),
        "arms": Key("mapping", {}, "The arms compared: label -> a learner section as "
                    "`learner:` takes it (name, params, depth, discount, seed)."),
        "shares": Key("mapping", {}, "Split mode: label -> relative traffic share (default: "
                      "equal shares)."),
        "assign_by": Key("list[str]", ["user_id", "session_id"], "Request fields that make "
                         "the assignment sticky, first present wins (user_id, session_id); "
                         "a search with neither is assigned at random."),
        "control": Key("str", None, "Label of the arm that serves outside the experiment "
                       "(before start, after stop, the traffic not in share) and that an "
                       "automatic promotion must beat (default: the first arm).",
                       nullable=True),
        "share": Key("float", 1.0, "Share of the traffic in the experiment; the rest is "
                     "served by the control arm alone.", minimum=0.0, maximum=1.0),
        "promote": Key("str", "manual", "manual: `reranker promote ARM` ends the experiment; "
                       "auto (guarded rollout): an arm that beats the control significantly "
                       "is promoted, one that loses significantly is no longer served.",
                       choices=("manual", "auto")),
        "start": Key("str", None, "When the experiment starts (ISO 8601 date and time, UTC "
                     "when no offset is given); null: at once.", nullable=True, time=True),
        "stop": Key("str", None, "When it stops (ISO 8601); null: never.", nullable=True,
                    time=True),
        "alpha": Key("float", 0.05, "Significance level of the always-valid sequential test.",
                     minimum=0.0001, maximum=0.5),
        "mixture": Key("float", 10.0, "h of the Beta(h, h) mixture of the sequential test: "
                       "larger tests small differences faster and large ones slower.",
                       minimum=0.01),
        "window": Key("int", 100, "Impressions per point of the arms' learning curves.",
                      minimum=1),
        "clicks_at": Key("int", 3, "k of the clicks@k metric reported per arm.", minimum=1),
        "min_impressions": Key("int", 1000, "Closed pages of the experiment before the guard "
                               "(promote: auto) may promote an arm.", minimum=0),
        "min_duration": Key("float", 3600.0, "Seconds the experiment has run before the guard "
                            "may promote an arm.", minimum=0.0),
        "guardrails": Key("mapping", {"abandonment": 0.02, "clicks_at_k": 0.05}, "Metric -> "
                          "non-inferiority margin an arm must keep against the control to be "
                          "promoted by the guard: the 95% interval of its abandonment minus "
                          "the control's must stay below the margin, of its clicks@k minus "
                          "the control's above minus the margin ({}: none)."),
        "dry_run": Key("bool", False, "The guard only records and logs what it would promote "
                       "or hold; the experiment goes on."),
        "even_start": Key("bool", False, "Start every arm from its initial model when the "
                          "experiment first runs (the models they learned before are kept "
                          "as older versions); false: arms keep what they learned, and an "
                          "arm that learned before is named with its version."),
    },
    "store": {
        "type": Key("str", "sqlite", "Event store: a name registered by a store plugin (built "
                    "in: 'sqlite', one file on this machine; 'postgresql', a server that the "
                    "processes of several machines share)."),
        "path": Key("str", "reranker.sqlite", "SQLite file of impressions and clicks "
                    "(store.type sqlite).", path=True),
        "dsn": Key("str", None, "PostgreSQL connection string (store.type postgresql), a URL "
                   "(postgresql://user@host:5432/db) or key=value pairs; better set in the "
                   "environment as RERANKER_STORE_DSN, and the password in PGPASSWORD or "
                   "~/.pgpass, out of the file.", nullable=True),
        "pool_size": Key("int", 10, "Connections each process keeps open to PostgreSQL at "
                         "most (a search or click waits for a free one).", minimum=1),
        "timeout": Key("float", 10.0, "Seconds a store operation waits for a lock, a "
                       "connection or the server before it fails with 503.", minimum=0.01),
        "models": Key("str", "models", "Folder of saved model versions (store.model_store "
                      "folder).", path=True),
        "model_store": Key("str", "folder", "Where model versions, pins and arm identities "
                           "live: 'folder' (store.models, on this machine or a file system "
                           "every machine mounts) or 'database' (the PostgreSQL database of "
                           "store.dsn, with store.type postgresql: machines then share "
                           "nothing but that database).", choices=("folder", "database")),
        "keep_models": Key("int", 20, "How many model versions to keep per learner.",
                           minimum=1),
        "max_model_bytes": Key("int", 268435456, "Largest model file a service or trainer "
                               "reads (256 MiB); a larger one is refused, by its size, before "
                               "it is read.", minimum=1024),
        "retention": Key("float", None, "Seconds after its search that an impression every "
                         "arm has learned from is deleted, with its clicks (those of the "
                         "running experiment are compacted instead: their features dropped, "
                         "the page kept for its report), and after which the click counts of "
                         "a query searched no more are forgotten; null keeps every "
                         "impression and count.",
                         minimum=1.0, nullable=True),
        "retention_interval": Key("float", 600.0, "Seconds between two retention passes of "
                                  "the trainer (with store.retention).", minimum=0.01),
    },
    "trainer": {
        "enabled": Key("bool", True, "Run the background trainer inside `reranker serve`."),
        "interval": Key("float", 1.0, "Seconds between two training passes.", minimum=0.01),
        "feedback_window": Key("float", 600.0, "Seconds after a search during which its "
                               "clicks and reward are accepted; the impression is trained on "
                               "after. Ten minutes: a user who reads a result's page and "
                               "comes back to click another is still counted.",
                               minimum=0.0),
        "batch_size": Key("int", 500, "Impressions applied per saved model version at most.",
                          minimum=1),
    },
    "server": {
        "host": Key("str", "127.0.0.1", "Address `reranker serve` listens on."),
        "port": Key("int", 8000, "Port `reranker serve` listens on (0: any free port).",
                    minimum=0, maximum=65535),
        "threads": Key("int", 8, "Worker threads of the HTTP server (of each worker process "
                       "with server.workers).", minimum=1),
        "search_timeout": Key("float", 5.0, "Seconds a search may take before it is answered "
                              "503 (the engine or the event store is slow or stuck); its "
                              "page is then not logged.", minimum=0.1),
        "workers": Key("int", 0, "Worker processes of `reranker serve`: 0 serves from its own "
                       "process (waitress); N runs gunicorn with N worker processes sharing the "
                       "event store and the model folder, one of which runs the trainer.",
                       minimum=0, maximum=256),
        "connection_limit": Key("int", 1000, "Client connections each serving process holds "
                                "open at most (kept alive, idle or still sending); more wait "
                                "in the listen queue until one closes. The limit on open "
                                "files is raised to fit them.", minimum=1, maximum=1000000),
        "idle_timeout": Key("int", 30, "Seconds a connection may stay open without a request "
                            "under way (kept alive after an answer, or silent since it "
                            "opened) before the server closes it.", minimum=1),
        "request_read_timeout": Key("float", 10.0, "Seconds a request (line, headers and "
                                    "body) may take to arrive from its first byte; later, "
                                    "it is answered 408 and the connection closed, however "
                                    "steadily its bytes trickle in.", minimum=0.5),
        "default_size": Key("int", 10, "Hits returned when a search gives no size.",
                            minimum=1),
        "max_size": Key("int", 100, "Largest size a search may ask for.", minimum=1),
        "max_body_bytes": Key("int", 1048576, "Largest request body in bytes; a larger one "
                              "is answered 413 before it is read.", minimum=1024),
        "max_json_depth": Key("int", 32, "Deepest nesting of arrays and objects a JSON body "
                              "may have (a range filter nests 5 deep); deeper is answered 400 "
                              "before the body is parsed.", minimum=5, maximum=200),
        "max_query_bytes": Key("int", 2048, "Longest search query in bytes of UTF-8.",
                               minimum=1),
        "max_query_terms": Key("int", 64, "Most words (runs of letters and digits) a search "
                               "query may hold.", minimum=1),
        "max_filter_clauses": Key("int", 32, "Most clauses in a search's filter.", minimum=1),
        "max_click_batch": Key("int", 1000, "Most clicks in one POST /clicks.", minimum=1),
        "cors_origins": Key("list[str]", [], "Origins (scheme://host[:port]) of the web pages "
                            "that may call /search, /click and /reward from the browser; '*' "
                            "allows any; empty: no CORS headers, same-origin pages only."),
        "cors_explain": Key("bool", False, "Let the origins of server.cors_origins call "
                            "POST /explain too, for a 'why this result' panel on the page "
                            "(with API keys set, /explain still needs one, which a public "
                            "page should not hold)."),
        "cors_max_age": Key("int", 600, "Seconds a browser may cache the answer to a CORS "
                            "preflight request.", minimum=0, maximum=86400),
        "admin_token": Key("str", None, "Token of the operator view, GET /healthz?detail=1 "
                           "with 'Authorization: Bearer <token>' (internal paths, URLs and "
                           "error texts); better set in the environment as "
                           "RERANKER_SERVER_ADMIN_TOKEN. Null: no operator view over HTTP.",
                           nullable=True),
        "log_format": Key("str", "text", "Log lines as text, or json (one object per line, "
                          "with each request's method, path, status and milliseconds).",
                          choices=("text", "json")),
        "ranking_budget_ms": Key("float", 100.0, "Milliseconds a learner may take to rank a "
                                 "search's candidates; slower counts a strike.",
                                 minimum=0.1),
        "breaker_strikes": Key("int", 3, "Rankings over the budget in a row after which the "
                               "arm's searches are served in the backend's order.",
                               minimum=1),
        "breaker_cooldown": Key("float", 30.0, "Seconds the backend's order serves before "
                                "the learner gets another try.", minimum=0.0),
    },
    "security": {
        "signing_keys_env": Key("str", "RERANKER_SIGNING_KEYS", "Environment variable that "
                                "holds the keys impression ids are signed with: kid:secret "
                                "pairs separated by commas, the first signs, every one "
                                "verifies (rotation); unset or empty: a secret made once and "
                                "kept in the event store, shared by every process using it."),
        "impression_ttl": Key("float", 3600.0, "Seconds after its search that a signed "
                              "impression id is accepted by /click and /reward.", minimum=1),
        "clicks_per_impression": Key("int", 10, "Click requests one impression accepts at "
                                     "most.", minimum=1),
        "searches_per_minute": Key("int", 120, "Searches one client (user_id, else "
                                   "session_id, else address) may make per minute, in bursts "
                                   "of as many; 0: no limit.", minimum=0),
        "clicks_per_minute": Key("int", 120, "Clicks and rewards one client may send per "
                                 "minute, as searches_per_minute; 0: no limit.", minimum=0),
        "limits_exchange": Key("float", 0.5, "Seconds between two exchanges of the requests "
                               "each process accepted, through the event store, so that the "
                               "limits above count the requests of every process and "
                               "machine sharing it; 0: each process counts its own; "
                               "else at least 0.05.", minimum=0.0),
        "api_keys_env": Key("str", None, "Environment variable that holds the API keys (comma "
                            "separated) that /search and /explain then require in an "
                            "X-API-Key or Authorization: Bearer header; null: no key.",
                            nullable=True),
        "reports_access": Key("str", None, "Who may read the reports (GET /experiments, "
                              "/analytics, /compare and their pages): "
                              "public; operator (Authorization: Bearer "
                              "<server.admin_token>); api_key (one of the API keys, or the "
                              "operator's token); either also as the password of HTTP Basic "
                              "authentication, which a browser asks for. Null: api_key when "
                              "api_keys_env is set, else public.", nullable=True,
                              choices=("public", "operator", "api_key")),
        "trusted_proxy_header": Key("str", None, "Header whose last address is the client's "
                                    "(X-Forwarded-For behind a proxy that sets it); null: "
                                    "the connection's address.", nullable=True),
        "client_budget": Key("int", 30, "Clicked impressions of one client per client_window "
                             "that training learns from; the rest are passed over; 0: no "
                             "bound.", minimum=0),
        "client_window": Key("float", 3600.0, "Seconds of the windows client_budget counts "
                             "in.", minimum=1),
        "address_budget": Key("int", 300, "Clicked impressions of one network address per "
                              "client_window that training learns from, whatever user or "
                              "session ids its requests claim (without API keys: the ids are "
                              "the client's word); 0: no bound.", minimum=0),
        "query_budget": Key("int", 0, "Clicked impressions of one query (normalised as the "
                            "click features normalise it) per client_window that training "
                            "learns from, whoever sent them: bounds what many addresses "
                            "together can teach through one query; 0: no bound.", minimum=0),
        "address_searches_per_minute": Key("int", 1200, "Searches one network address may "
                                           "make per minute whatever ids it sends (without "
                                           "API keys; with them the site's servers search); "
                                           "0: no limit.", minimum=0),
        "address_clicks_per_minute": Key("int", 1200, "Clicks and rewards one network "
                                         "address may send per minute whatever ids it sends; "
                                         "0: no limit.", minimum=0),
    },
}


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (YAML would silently keep
    the last one)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class Section(Mapping):
    """An immutable section of the configuration with attribute access."""

    def __init__(self, name: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", dict(values))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"config section {self._name!r} has no key {key!r}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("configuration is immutable")

    def __reduce__(self):  # (to a process of its own: built again from its values)
        return type(self), (self._name, self._values)

    def __repr__(self) -> str:
        return f"Section({self._name!r}, {self._values!r})"


@dataclass(frozen=True)
class Config:
    """The validated, immutable configuration."""

    backend: Section
    features: Section
    learner: Section
    experiment: Section
    store: Section
    trainer: Section
    server: Section
    security: Section
    source: Path | None = None  # the YAML file it came from, if any
    #: Where each key given (``section.key``) came from: the file, an environment variable
    #: or an override; keys left at their defaults are not in it.
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    def origin(self, dotted: str) -> str:
        """Where ``section.key`` came from, for an error message: the environment variable
        that set it, else the config file (empty for a config without one)."""
        return self.origins.get(dotted) or (str(self.source) if self.source else "")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain data (paths as strings), for display or YAML."""
        return {name: _plain(dict(getattr(self, name))) for name in SCHEMA}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def defaults() -> dict[str, dict[str, Any]]:
    """The default value of every key, as plain data."""
    return {s: {k: _copy(key.default) for k, key in keys.items()} for s, keys in SCHEMA.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def load_config(path: str | os.PathLike | None = None,
                overrides: Mapping[str, Any] | None = None,
                *, environ: Mapping[str, str] | None = None) -> Config:
    """Load, merge and validate the configuration.

    ``path`` is a YAML file (``None`` for the defaults, with paths relative to the current
    folder). ``overrides`` maps dotted keys (``"server.port"``) or section names to values and
    wins over the file and the environment. ``environ`` defaults to ``os.environ``.
    """
    source = Path(path).resolve() if path is not None else None
    label = str(path) if path is not None else "<defaults>"
    data: Any = {}
    if source is not None:
        if not source.is_file():
            raise ConfigError(f"config file {label} does not exist")
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {label} cannot be read: {exc}") from exc
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 -- a SafeLoader
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {label} is not valid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {label} must hold a mapping of sections, "
                              f"got {type(data).__name__}")
    merged = defaults()
    origins: dict[str, str] = {}
    _merge_file(merged, data, label, origins)
    _merge_env(merged, os.environ if environ is None else environ, origins)
    for dotted, value in (overrides or {}).items():
        _merge_dotted(merged, dotted, value, "override", origins)
    base_dir = source.parent if source is not None else Path.cwd()
    return _validate(merged, label, base_dir, source, origins)


def config_from_dict(data: Mapping[str, Any], base_dir: str | os.PathLike | None = None) -> Config:
    """Validate a configuration given as a dict (as tests and embedding applications do)."""
    merged = defaults()
    origins: dict[str, str] = {}
    _merge_file(merged, dict(data), "<dict>", origins)
    return _validate(merged, "<dict>", Path(base_dir) if base_dir else Path.cwd(), None, origins)


def _merge_file(merged: dict, data: Mapping, label: str, origins: dict[str, str]) -> None:
    for section, values in data.items():
        if section not in SCHEMA:
            raise ConfigError(f"{label}: unknown section {section!r}"
                              f"{did_you_mean(section, SCHEMA)} (known: {', '.join(SCHEMA)})")
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"{label}: section {section!r} must be a mapping, "
                              f"got {type(values).__name__}")
        for key, value in values.items():
            _check_known(section, key, label)
            merged[section][key] = value
            origins[f"{section}.{key}"] = label


def _check_known(section: str, key: Any, label: str) -> None:
    if key not in SCHEMA[section]:
        raise ConfigError(f"{label}: unknown key {section}.{key}"
                          f"{did_you_mean(key, SCHEMA[section], section + '.')} "
                          f"(known in {section}: {', '.join(SCHEMA[section])})")


#: What loading configurations has warned about in this process (a forked worker inherits
#: it, so the warnings of its parent's config are not said again).
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


@contextlib.contextmanager
def warnings_held() -> Iterator[None]:
    """Hold what loading a configuration logs until the block ends, then log it: a command
    that sets up logging from its configuration loads it and sets up logging within the
    block, and the warnings come out in the configured format (JSON lines, say)."""
    held: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)

    handler, propagate = Hold(), log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
        for record in held:
            log.handle(record)


def _merge_env(merged: dict, environ: Mapping[str, str], origins: dict[str, str]) -> None:
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section, _, key = rest.partition("_")
        if section not in SCHEMA or key not in SCHEMA[section]:
            # other RERANKER_* variables (secrets, test switches) are not config keys; one
            # that looks like a misspelt key is said, not taken
            if section in SCHEMA and key:
                import difflib

                close = difflib.get_close_matches(key, list(SCHEMA[section]), n=1, cutoff=0.6)
                if close:
                    _warn_once(f"environment variable {name} is not a config key and is "
                               f"ignored; did you mean {ENV_PREFIX}{section.upper()}_"
                               f"{close[0].upper()}?")
            continue
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"environment variable {name}: not a valid value: {exc}") from exc
        merged[section][key] = value
        origins[f"{section}.{key}"] = f"environment variable {name}"


def _merge_dotted(merged: dict, dotted: str, value: Any, label: str,
                  origins: dict[str, str]) -> None:
    section, _, key = dotted.partition(".")
    if section not in SCHEMA:
        raise ConfigError(f"{label}: unknown section {section!r}{did_you_mean(section, SCHEMA)} "
                          f"(known: {', '.join(SCHEMA)})")
    if not key:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{label}: section {section!r} must be a mapping")
        for k, v in value.items():
            _check_known(section, k, label)
            merged[section][k] = v
            origins[f"{section}.{k}"] = label
        return
    _check_known(section, key, label)
    merged[section][key] = value
    origins[dotted] = label


def _validate(merged: dict, label: str, base_dir: Path, source: Path | None,
              origins: dict[str, str]) -> Config:
    sections = {}
    for section, keys in SCHEMA.items():
        values = {}
        for key, spec in keys.items():
            dotted = f"{section}.{key}"
            values[key] = _check_value(dotted, merged[section][key], spec,
                                       origins.get(dotted, label), base_dir)
        sections[section] = Section(section, values)
    config = Config(**sections, source=source, origins=dict(origins))
    if config.server.default_size > config.server.max_size:
        raise ConfigError(f"{label}: server.default_size ({config.server.default_size}) is "
                          f"larger than server.max_size ({config.server.max_size})")
    if not config.backend.fields:
        raise ConfigError(f"{label}: backend.fields must name at least one text field")
    both = sorted(set(config.backend.fields) & set(config.features.numeric_fields))
    if both:
        raise ConfigError(f"{label}: {both[0]!r} is in both backend.fields and "
                          f"features.numeric_fields; a field is either text or a number")
    sources = [k for k in ("query", "template", "template_id") if config.backend[k] is not None]
    if len(sources) > 1:
        raise ConfigError(f"{label}: give only one of backend.query, backend.template and "
                          f"backend.template_id (got {', '.join(sources)})")
    if config.backend.feature_queries and config.backend.ltr_featureset:
        raise ConfigError(f"{label}: give backend.feature_queries or backend.ltr_featureset, "
                          f"not both")
    if config.backend.ltr_featureset and not config.backend.ltr_features:
        raise ConfigError(f"{label}: backend.ltr_featureset needs backend.ltr_features, the "
                          f"names of its features in order")
    _check_experiment(config.experiment, label)
    if config.store.type == "postgresql" and config.store.dsn is None:
        raise ConfigError(f"{origins.get('store.type', label)}: store.type postgresql needs "
                          f"store.dsn, the server's connection string (or set "
                          f"RERANKER_STORE_DSN)")
    if config.store.model_store == "database" and config.store.type != "postgresql":
        raise ConfigError(f"{origins.get('store.model_store', label)}: store.model_store "
                          f"database keeps the models in the PostgreSQL event store: it "
                          f"needs store.type postgresql, not {config.store.type!r}")
    _check_cors_origins(config.server.cors_origins, origins.get("server.cors_origins", label))
    text_filters = sorted(set(config.backend.fields) & set(config.backend.filter_fields))
    if text_filters:
        raise ConfigError(f"{label}: {text_filters[0]!r} is in both backend.fields and "
                          f"backend.filter_fields; a filter field holds exact values (keep a "
                          f"copy of the text under another name to filter on it)")
    if config.backend.id_field in config.backend.fields + config.features.numeric_fields:
        raise ConfigError(f"{label}: backend.id_field {config.backend.id_field!r} cannot also "
                          f"be a text or numeric feature field")
    if 0 < config.security.limits_exchange < MIN_LIMITS_EXCHANGE:
        raise ConfigError(f"{origins.get('security.limits_exchange', label)}: "
                          f"security.limits_exchange must be 0 (no exchange) or at least "
                          f"{MIN_LIMITS_EXCHANGE:g} seconds, got "
                          f"{config.security.limits_exchange:g}")
    return config


#: The metrics experiment.guardrails may name.
GUARDRAIL_METRICS = ("abandonment", "clicks_at_k")


def serving_description(config, versions: Mapping[str, int] | None = None) -> str:
    """What a serving process serves, for its start-up line: the learner, or the experiment
    with its mode and arms (``versions``: each arm label's model version, when known)."""
    def version(label: str) -> str:
        return f" v{versions[label]}" if versions and label in versions else ""

    experiment = config.experiment
    if experiment.mode is None:
        return f"learner {config.learner.name}{version(config.learner.name)}"
    arms = ", ".join(f"{label} = {section.get('name')}{version(label)}"
                     for label, section in experiment.arms.items())
    return f"experiment {experiment.name} ({experiment.mode}: {arms})"


def _check_experiment(experiment: Section, label: str) -> None:
    """The experiment section's keys that depend on each other; the arms' learner sections
    are checked when the arms are built (:func:`reranker.models.arms.arms_from_config`)."""
    if experiment.mode is None:
        given = [key for key in ("arms", "shares", "control", "promote")
                 if experiment[key] not in (None, {}, [], SCHEMA["experiment"][key].default)]
        if given:  # (it would serve the learner section alone, without a word)
            raise ConfigError(f"{label}: experiment.{given[0]} is given but experiment.mode "
                              f"is not: set experiment.mode (interleave, multileave or split) "
                              f"to run the experiment, or remove the section")
        return
    labels = list(experiment.arms)
    if len(labels) < 2:
        raise ConfigError(f"{label}: experiment.arms must name at least two arms to compare "
                          f"(mode {experiment.mode}), got {labels or 'none'}")
    if experiment.mode == "interleave" and len(labels) != 2:
        raise ConfigError(f"{label}: experiment.mode interleave compares exactly two arms, got "
                          f"{len(labels)}; use multileave for more")
    for name in labels:
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{label}: experiment.arms: label {name!r} must be letters, "
                              f"digits, '-' and '_'")
    if experiment.shares and experiment.mode != "split":
        raise ConfigError(f"{label}: experiment.shares divide the traffic between the arms of "
                          f"a split; with mode {experiment.mode} every arm is on every page "
                          f"(experiment.share is the part of the traffic an experiment takes)")
    for name, share in experiment.shares.items():
        if name not in labels:
            raise ConfigError(f"{label}: experiment.shares.{name}: no arm {name!r} (arms: "
                              f"{', '.join(labels)})")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            raise ConfigError(f"{label}: experiment.shares.{name} must be a positive number, "
                              f"got {share!r}")
    missing = [name for name in labels if name not in experiment.shares]
    if experiment.shares and missing:  # (0.9 for one of two arms would be 47% of the traffic)
        raise ConfigError(f"{label}: experiment.shares gives no share to {', '.join(missing)}: "
                          f"give every arm its share (they are relative: {{a: 9, b: 1}} is "
                          f"90% and 10%), or none for equal shares")
    for metric, margin in experiment.guardrails.items():
        if metric not in GUARDRAIL_METRICS:
            raise ConfigError(f"{label}: experiment.guardrails.{metric}: not a guardrail "
                              f"metric (one of: {', '.join(GUARDRAIL_METRICS)})")
        if isinstance(margin, bool) or not isinstance(margin, int | float) or margin < 0:
            raise ConfigError(f"{label}: experiment.guardrails.{metric} must be a margin of "
                              f"at least 0, got {margin!r}")
    if experiment.control is not None and experiment.control not in labels:
        raise ConfigError(f"{label}: experiment.control {experiment.control!r} is not one of "
                          f"the arms ({', '.join(labels)})")
    for key in experiment.assign_by:
        if key not in ("user_id", "session_id"):
            raise ConfigError(f"{label}: experiment.assign_by: {key!r} is not a request field "
                              f"(user_id, session_id)")
    for key in ("start", "stop"):
        if experiment[key] is not None:
            parse_time(experiment[key], f"{label}: experiment.{key}")
    if experiment.start and experiment.stop and parse_time(experiment.start, "") >= \
            parse_time(experiment.stop, ""):
        raise ConfigError(f"{label}: experiment.stop must come after experiment.start")


_ORIGIN = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*)://"
                     r"(?P<host>\[[0-9a-f:.]+\]|[a-z0-9-]+(\.[a-z0-9-]+)*)"
                     r"(:(?P<port>[0-9]{1,5}))?", re.IGNORECASE)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _check_cors_origins(origins: tuple[str, ...], label: str) -> None:
    """Each entry of ``server.cors_origins`` is ``*`` alone or an origin as a browser sends
    it in its ``Origin`` header: ``scheme://host[:port]``, no path and no default port."""
    for origin in origins:
        if origin == "*":
            if len(origins) > 1:
                raise ConfigError(f"{label}: server.cors_origins: '*' allows every origin; "
                                  f"give it alone, got {list(origins)!r}")
            continue
        match = _ORIGIN.fullmatch(origin)
        if match is None:
            raise ConfigError(f"{label}: server.cors_origins: {origin!r} is not an origin; "
                              f"give scheme://host[:port] (no path, not even a trailing '/'), "
                              f"such as https://shop.example.com, or '*'")
        port = match["port"]
        if port is not None and not 1 <= int(port) <= 65535:
            raise ConfigError(f"{label}: server.cors_origins: {origin!r} has port {port}, "
                              f"outside 1-65535")
        if port is not None and _DEFAULT_PORTS.get(match["scheme"].lower()) == int(port):
            raise ConfigError(f"{label}: server.cors_origins: {origin!r} names the default "
                              f"port; browsers leave it out of the Origin header, so drop "
                              f"':{port}'")


def _check_value(dotted: str, value: Any, spec: Key, label: str, base_dir: Path) -> Any:
    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{label}: {dotted} must be {expected}, got {value!r}")

    if value is None:
        if spec.nullable:
            return None
        raise fail(_expected(spec))
    kind = spec.type
    if spec.time and isinstance(value, datetime.date):
        # YAML reads an unquoted 2026-12-01T09:00:00Z as a timestamp (UTC, without its
        # offset), 2026-12-01 as a date: as ISO 8601 text again
        value = value.isoformat()
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise fail("a non-empty string")
        if spec.choices and value not in spec.choices:
            raise fail("one of " + ", ".join(spec.choices))
        if spec.path:
            path = Path(os.path.expanduser(value))
            return str(path if path.is_absolute() else (base_dir / path).resolve())
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if kind in ("int", "float"):
        ok = isinstance(value, int) if kind == "int" else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise fail(_expected(spec))
        if kind == "float":
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):
                raise fail("a finite number")
        if spec.minimum is not None and value < spec.minimum:
            raise fail(f"at least {spec.minimum:g}")
        if spec.maximum is not None and value > spec.maximum:
            raise fail(f"at most {spec.maximum:g}")
        return value
    if kind == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise fail("a list of non-empty strings")
        if len(set(value)) != len(value):
            raise fail("a list without repeated names")
        return tuple(value)
    if kind == "mapping":
        if not isinstance(value, Mapping):
            raise fail("a mapping")
        return Section(dotted, value)
    raise AssertionError(f"unknown key type {kind}")  # pragma: no cover


def _expected(spec: Key) -> str:
    return {"str": "a non-empty string", "bool": "true or false", "int": "an integer",
            "float": "a number", "list[str]": "a list of non-empty strings",
            "mapping": "a mapping"}[spec.type]
