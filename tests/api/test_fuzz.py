"""No 5xx from any input: a seeded fuzz campaign of the whole HTTP API over real HTTP, and
malformed HTTP on raw sockets, against the real app behind its real server (waitress).

The server runs over the generated corpus indexed with filter fields (a keyword, a number
and a boolean), an interleaved experiment, API keys, an admin token, a CORS origin and a
trusted proxy header, so that every endpoint has its full behaviour to fuzz.

:func:`test_a_fuzz_campaign_gets_no_5xx_and_only_json_errors` sends :data:`REQUESTS`
requests on one keep-alive session, drawn by a generator seeded with :data:`SEED`: bodies
generated from the request schemas of ``GET /openapi.json`` (``components.schemas``), valid
ones and mutated ones (wrong types, numbers beyond a float's range as raw text, lone
surrogates, NUL bytes, deep nesting, unknown and duplicate keys, truncation, other
encodings), impression ids from real searches mixed with forged ones, other content types
and credentials, every GET endpoint with odd query strings and headers, other methods and
paths, CORS preflights. :func:`test_malformed_http_on_raw_sockets_gets_no_5xx` sends
requests no HTTP client would: bad request lines, huge headers, invalid Content-Length,
bad chunk sizes, transfer codings the server does not implement, truncated bodies,
pipelines, bytes that are not ASCII in the path and the headers.

Every answer must be below 500 (but a 501 for a transfer coding the server does not
implement, which is correct HTTP), and every error answer the project's JSON
``{"error": {"status", "message", "field"?}}``; a number beyond a float's range is a 400
naming the field that holds it. Failures are collected, not stopped at: one run prints
every problem, with the request that caused it and the server's tracebacks.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import socket
import string
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from reranker.core.config import load_config
from reranker.core.errors import field_path
from reranker.core.plugins import backend_class, get_plugin_manager
from tests.support.configs import UNLIMITED, write_config
from tests.support.servers import LiveServer

#: The seed of every random choice: the same requests on every run (the impression ids the
#: server signs differ, the choices among them do not).
SEED = 20240611
#: Requests of the HTTP campaign (the raw-socket cases come on top).
REQUESTS = 10_000
#: Seconds the whole campaign may take: a budget (about 50 s measured on 2 cores), with
#: room for a slower machine; a server that slows down as it serves fails it.
CAMPAIGN_SECONDS = 120
#: Seconds one request may take (a search's own deadline, server.search_timeout, is 5 s).
REQUEST_TIMEOUT = 10
#: Randomly mutated raw requests, beside the hand-written raw cases.
RAW_MUTATIONS = 250

KEYS_ENV = "RERANKER_FUZZ_API_KEYS"
API_KEY = "fuzz-key-0123456789"
ADMIN_TOKEN = "fuzz-admin-token-0123456789"
ORIGIN = "https://shop.example"
FILTER_FIELDS = ("category", "price", "in_stock")
CATEGORIES = ("tea", "kettle", "gear", "b\u00fccher", "\u8336", "two words", "x" * 200)

POST_PATHS = ("/search", "/click", "/clicks", "/reward", "/explain")
GET_PATHS = ("/healthz", "/readyz", "/metrics", "/experiments", "/dashboard",
             "/openapi.json", "/reranker.js")
KEYED = ("/search", "/clicks", "/explain")
#: Request schema (components.schemas) of each POST path.
SCHEMAS = {"/search": ("SearchRequest",), "/click": ("ClickRequest",),
           "/clicks": ("ClicksRequest",), "/reward": ("RewardRequest",),
           "/explain": ("ExplainSearchRequest", "ExplainImpressionRequest")}


# -- the server ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, corpus):
    """A live server over the corpus, indexed with filter fields, with every feature on."""
    folder = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEYS_ENV, f"{API_KEY},second-key")
        path = write_config(
            folder,
            backend={"filter_fields": list(FILTER_FIELDS)},
            server={"cors_origins": [ORIGIN], "admin_token": ADMIN_TOKEN},
            security={**UNLIMITED, "api_keys_env": KEYS_ENV,
                      "trusted_proxy_header": "X-Forwarded-For"},
            experiment={"mode": "interleave", "name": "fuzz", "window": 50,
                        "arms": {"perceptron": {"name": "preference_perceptron",
                                                "params": {}},
                                 "random": {"name": "random"}}})
        backend = backend_class(get_plugin_manager(), "embedded")(load_config(path))
        backend.index_documents(((doc["id"], _shop(i, doc))
                                 for i, doc in enumerate(corpus.documents)), recreate=True)
        backend.close()
        server = LiveServer(path)
        try:
            yield server
        finally:
            server.stop()


def _shop(i: int, doc: dict) -> dict:
    """A corpus document with the filter fields."""
    return {**doc, "category": CATEGORIES[i % len(CATEGORIES)], "price": round(1.5 * i, 2),
            "in_stock": i % 3 != 0}


# -- checking answers ------------------------------------------------------------------------

@dataclass
class Failures:
    """Every problem found, with the request that caused it, to print all at once."""

    items: list[str] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, request: str, status: Any, body: bytes | str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if self.kinds[kind] <= 25:  # the first few of a kind say it; the count says how often
            text = body if isinstance(body, str) else body.decode("utf-8", "replace")
            self.items.append(f"[{kind}] {request}\n    -> {status}: {text[:200]!r}")

    def report(self, records: list[logging.LogRecord]) -> str:
        """The failures, then the server's log's exceptions, once per place raised."""
        lines = [f"{sum(self.kinds.values())} failures: {self.kinds}", *self.items]
        tracebacks: dict[str, str] = {}
        for record in records:
            if record.exc_info and record.exc_info[1] is not None:
                logging.Formatter().format(record)  # fills record.exc_text
                where = traceback.extract_tb(record.exc_info[2])[-1]
                key = f"{type(record.exc_info[1]).__name__} at {where.filename}:{where.lineno}"
                tracebacks.setdefault(key, f"{record.getMessage()}\n{record.exc_text}")
        if tracebacks:
            lines.append(f"{len(tracebacks)} distinct exceptions in the server's log:")
            lines.extend(tracebacks.values())
        return "\n".join(lines)


def error_problem(status: int, content_type: str | None, body: bytes) -> str | None:
    """What is wrong with an error answer (None: the project's error JSON)."""
    if not (content_type or "").startswith("application/json"):
        return "error not JSON"
    try:
        payload = json.loads(body)
    except ValueError:
        return "error not JSON"
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or error.get("status") != status \
            or not isinstance(error.get("message"), str) or not error["message"]:
        return "error JSON malformed"
    if "field" in error and not isinstance(error["field"], str):
        return "error JSON malformed"
    return None


def check_answer(failures: Failures, summary: str, status: int, content_type: str | None,
                 body: bytes, *, head: bool = False, allow_501: bool = False) -> None:
    if status >= 500 and not (allow_501 and status == 501):
        failures.add(f"{status}", summary, status, body)
    if status == 501 and b"not implemented: " not in body:  # it names what is not
        failures.add("501 without its reason", summary, status, body)
    if status >= 400 and not head:
        problem = error_problem(status, content_type, body)
        if problem:
            failures.add(problem, summary, status, body)


# -- generating bodies from the schemas ------------------------------------------------------

MISSING = object()

#: Values a mutation puts anywhere.
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 1.5, -0.0, 2 ** 31, 2 ** 53 + 1, 2 ** 63, -2 ** 63 - 1,
    10 ** 30, 10 ** 299, 1e308, -1e308, 5e-324, 1e-300, "", " ", "\t\n", "\x00", "a\x00b",
    "\ud800", "\udfff", "x\udc00y", "\ud83d\ude00", "\u202e\u0635", "e\u0301" * 50,
    "\ufeff", "\uffff", "\U0010ffff", "x" * 5000, "\u00e9" * 3000, "tea " * 600, "1e999",
    "NaN", "true", "null", "0", "-1", "[]", "{}", "%s%n", "' OR 1=1 --", "<script>",
    "../../etc/passwd", "${jndi:x}", [], {}, [[[]]], [None], [1, "a", None], {"a": {"b": 1}},
    list(range(2000)), ["tea"] * 1001, {str(i): i for i in range(200)}, {"": ""},
    {"__proto__": 1}, {"\x00": 1}, {"gte": None}, {"term": {}},
]
#: Keys a mutation adds.
ODD_KEYS = ["sise", "Query", "QUERY", "", " ", "\x00", "\ud800", "__proto__", "constructor",
            "query ", "z" * 300, "\u00e9", "from ", "filter.0", "$ref", "1"]

#: Raw number texts: (text, beyond a float's range).
NUMBERS = [
    ("1e999", True), ("-1e999", True), ("9" * 400, True), ("-" + "1" * 5000, True),
    ("2" + "0" * 308, True), ("1" + "0" * 309, True), ("1.7976931348623159e308", True),
    ("-1.8e308", True), (str(2 ** 1024), True), (str(2 ** 1024 - 2 ** 970), True),
    ("1e99999999999999999999", True), ("0." + "0" * 400 + "1e999999", True),
    ("0." + "0" * 400 + "1e300", False), ("1.7976931348623157e308", False),
    (str(int(sys.float_info.max)), False), ("1e-999", False), ("-0", False), ("-0.0", False),
    ("0e99999999", False), ("1e2", False), ("10.0", False), ("1.0", False), ("5E+1", False),
    ("9" * 299, False), ("0.1" + "1" * 5000, False), ("1" * 20, False),
    ("-" + "9" * 20, False), ("123456789" * 34 + "e-300", False), ("4.9e-324", False),
    ("2.5e-324", False),
]
#: Number-like texts that are not JSON.
NOT_NUMBERS = ["NaN", "Infinity", "-Infinity", "+1", "01", "1.", ".5", "0x10", "1e", "--1",
               "1_000", "\u0661", "1e+", "Inf", "nan"]

WORDS = ["tea", "kettle", "espresso", "grinder", "hiking", "trail", "chess", "gambit", "zzz",
         "caf\u00e9", "\u8336", "\U0001f375", "a", "the", "tea-pot", "o'neil", "\"quoted\"",
         "AND", "OR", "NOT", "*", "?", "title:tea", "(", ")", "[", "~", "^2", "\\", "/", ":",
         "+", "-", "!", "{", "}", "\u0000", "\u200b", "\ud800"]


class Campaign:
    """The seeded generator of requests, with what the server answered so far (impression
    ids of real pages, to click on)."""

    def __init__(self, rng: random.Random, schemas: dict[str, Any], corpus):
        self.rng = rng
        self.schemas = schemas
        self.queries = [query for query, _ in corpus.queries]
        self.doc_ids = [doc["id"] for doc in corpus.documents]
        self.users = ["u1", "u2", "", "\u00e9l\u00e8ve", "u" * 256]
        self.sessions = ["s1", "s2", ""]
        #: (impression_id, hit ids, user_id, session_id) of pages served.
        self.pages: list[tuple[str, list[str], str | None, str | None]] = []

    # -- values ----------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def text(self, max_length: int = 40) -> str:
        r = self.rng.random()
        if r < 0.5:
            return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 4)))
        if r < 0.8:
            alphabet = string.printable + "\u00e9\u00fc\u8336\U0001f375\u0000\u202e"
            return "".join(self.rng.choice(alphabet)
                           for _ in range(self.rng.randint(1, max(1, min(max_length, 40)))))
        return "".join(chr(self.rng.randint(1, 0x10FFFF)) for _ in range(self.rng.randint(1, 8)))

    def page(self):
        return self.rng.choice(self.pages) if self.pages else None

    def forged_id(self) -> str:
        page = self.page()
        real = page[0] if page else "s.AAAA"
        choice = self.rng.randrange(9)
        if choice == 0:  # one character changed
            i = self.rng.randrange(len(real))
            return real[:i] + self.rng.choice("AZaz09-_.=+/") + real[i + 1:]
        if choice == 1:
            return real[:self.rng.randrange(len(real))]
        if choice == 2:
            return real + self.rng.choice(["=", "==", "A", ".", " ", "\x00"])
        if choice == 3:
            kid, _, rest = real.partition(".")
            return self.rng.choice(["x", "", "s" * 17, "\u00e9", "s.s"]) + "." + rest
        if choice == 4:
            raw = bytes(self.rng.randrange(256) for _ in range(self.rng.choice([0, 8, 44, 45])))
            return "s." + base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if choice == 5:
            return real.replace(".", "")
        if choice == 6:
            return self.rng.choice(["", " ", ".", "..", "s.", ".AAAA", "s.!!!!", "s.\ud800",
                                    "s." + "A" * 255, "s." + "A" * 10000])
        if choice == 7:
            return base64.b64encode(real.encode()).decode()
        return real.upper()

    def impression_id(self) -> str:
        page = self.page()
        if page is not None and self.chance(0.75):
            return page[0]
        return self.forged_id()

    def hint(self, path: tuple, schema: dict) -> Any:
        """A value of the service's domain for the field at ``path``, or MISSING."""
        if not path or not self.chance(0.85):
            return MISSING
        name = path[-1]
        if name == "query":
            return self.rng.choice(self.queries) if self.chance(0.7) else self.text()
        if name == "impression_id":
            return self.impression_id()
        if name == "doc_id":
            return self.rng.choice(self.doc_ids)
        if name == "user_id":
            return self.rng.choice(self.users)
        if name == "session_id":
            return self.rng.choice(self.sessions)
        if name == "size":
            return self.rng.choice([1, 2, 5, 10, 20, 100])
        if name == "from":
            return self.rng.choice([0, 0, 1, 5, 10, 90, 99])
        if name == "value":
            return self.rng.choice([0, 1, -1, 0.5, 3.25, 1e6, -1e-6])
        if name == "facets":
            return self.rng.sample(FILTER_FIELDS, self.rng.randint(1, 3))
        if len(path) >= 2 and path[-2] in ("term", "terms", "range") \
                and name in FILTER_FIELDS + ("popularity", "title", "id"):
            return self.filter_value(path[-2], name)
        return MISSING

    def filter_value(self, kind: str, name: str) -> Any:
        def scalar():
            if name == "category" and self.chance(0.8):
                return self.rng.choice(CATEGORIES)
            if name == "price" and self.chance(0.8):
                return self.rng.choice([0, 1.5, 3, 99.75, -1, 1e300, 2 ** 60])
            if name == "in_stock" and self.chance(0.8):
                return self.rng.choice([True, False])
            return self.rng.choice(["tea", 1, 0.5, True, "", "\u8336", None, "\x00"])
        if kind == "term":
            return scalar()
        if kind == "terms":
            return [scalar() for _ in range(self.rng.randint(1, 5))]
        bounds = self.rng.sample(["gte", "gt", "lte", "lt"], self.rng.randint(1, 4))
        return {b: self.rng.choice([0, 10, 50.5, -5, 1e300, -1e300, 2 ** 70, 5e-324])
                for b in bounds}

    def generate(self, schema: dict, path: tuple = ()) -> Any:
        """A value that fits ``schema`` (the subset of JSON Schema the request bodies
        use), with the service's own values where :meth:`hint` has them."""
        hinted = self.hint(path, schema)
        if hinted is not MISSING:
            return hinted
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice(kind)
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        if kind == "object":
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            if properties and schema.get("maxProperties") == 1:  # one of (a filter clause)
                names = [self.rng.choice(list(properties))]
            else:
                names = [n for n in properties if n in schema.get("required", ())
                         or self.chance(0.5)]
            if not names and schema.get("minProperties", 0) and properties:
                names = [self.rng.choice(list(properties))]
            body = {n: self.generate(properties[n], (*path, n)) for n in names}
            if isinstance(extra, dict) and not properties:  # {FIELD: ...}
                count = self.rng.randint(schema.get("minProperties", 0),
                                         min(schema.get("maxProperties", 3), 3))
                for _ in range(count):
                    name = (self.rng.choice(FILTER_FIELDS) if self.chance(0.85)
                            else self.rng.choice(["popularity", "title", "id", "nope", ""]))
                    body[name] = self.generate(extra, (*path, name))
            return body
        if kind == "array":
            low = schema.get("minItems", 0)
            high = min(schema.get("maxItems", 5), 5 if self.chance(0.95) else 60)
            return [self.generate(schema.get("items", {}), (*path, i))
                    for i in range(self.rng.randint(low, max(low, high)))]
        if kind == "string":
            low, high = schema.get("minLength", 0), schema.get("maxLength", 64)
            text = self.text(high)[:high]
            if len(text) < low or (schema.get("pattern") == r"\S" and not text.strip()):
                text = "tea"
            return text
        if kind == "integer":
            low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
            return self.rng.randint(low, high)
        if kind == "number":
            return self.rng.choice([0, 1, -1, 0.25, self.rng.uniform(-1e6, 1e6)])
        if kind == "boolean":
            return self.chance(0.5)
        return None

    def body_for(self, path: str) -> Any:
        """A body for a POST path: from its schema, made to fit the pages served."""
        names = SCHEMAS[path]
        name = names[1] if len(names) > 1 and self.pages and self.chance(0.5) else names[0]
        body = self.generate(self.schemas[name])
        if path in ("/click", "/reward"):
            self.fit_to_page(body)
        elif path == "/clicks" and isinstance(body.get("clicks"), list):
            for item in body["clicks"]:
                self.fit_to_page(item)
        return body

    def fit_to_page(self, body: dict) -> None:
        """Mostly, a click on a hit of a page served, by the user it was served to."""
        page = self.page()
        if page is None or not self.chance(0.7):
            return
        impression, hits, user, session = page
        body["impression_id"] = impression
        if "doc_id" in body or self.chance(0.1):
            body["doc_id"] = (self.rng.choice(hits) if hits and self.chance(0.85)
                              else self.rng.choice(self.doc_ids))
        for key, value in (("user_id", user), ("session_id", session)):
            if self.chance(0.85):
                if value is None:
                    body.pop(key, None)
                else:
                    body[key] = value

    # -- mutations -------------------------------------------------------------------------

    def nodes(self, value: Any, path: tuple = ()) -> list[tuple]:
        """The paths of every value in a body (the body itself first)."""
        found = [path]
        if isinstance(value, dict):
            for key, item in value.items():
                found.extend(self.nodes(item, (*path, key)))
        elif isinstance(value, list):
            for i, item in enumerate(value[:20]):
                found.extend(self.nodes(item, (*path, i)))
        return found

    def mutate(self, body: Any) -> Any:
        for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
            path = self.rng.choice(self.nodes(body))
            choice = self.rng.randrange(7)
            if not path or choice == 0:
                body = replace(body, path, self.odd_value())
            elif choice == 1:  # drop a field
                parent = get(body, path[:-1])
                if isinstance(parent, dict):
                    parent.pop(path[-1], None)
                elif isinstance(parent, list) and parent:
                    parent.pop(path[-1])
            elif choice == 2:  # an unknown field
                parent = get(body, path[:-1])
                if isinstance(parent, dict):
                    parent[self.rng.choice(ODD_KEYS)] = self.odd_value()
            elif choice == 3:  # the same value, another type
                value = get(body, path)
                body = replace(body, path, self.rng.choice(
                    [[value], {"value": value}, json.dumps(value), str(value), None]))
            elif choice == 4:  # a key renamed
                parent = get(body, path[:-1])
                if isinstance(parent, dict) and path[-1] in parent:
                    parent[self.rng.choice(ODD_KEYS)] = parent.pop(path[-1])
            elif choice == 5:  # a list made long
                value = get(body, path)
                if isinstance(value, list) and value:
                    body = replace(body, path, value * self.rng.choice([33, 101, 1001]))
                else:
                    body = replace(body, path, self.odd_value())
            else:
                body = replace(body, path, self.generate({"type": self.rng.choice(
                    ["string", "integer", "number", "boolean", "object", "array"])}))
        return body

    def odd_value(self) -> Any:
        value = self.rng.choice(ODD_VALUES)
        return json.loads(json.dumps(value))  # a copy


def get(value: Any, path: tuple) -> Any:
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def replace(body: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    parent = get(body, path[:-1])
    if isinstance(parent, dict) or (isinstance(parent, list) and path[-1] < len(parent)):
        parent[path[-1]] = new
    return body


MARKER = "\u0001fuzz-marker\u0001"


def dumps(body: Any, rng: random.Random) -> bytes:
    """JSON text of a body, escaped or not (lone surrogates then go as their bytes)."""
    if rng.random() < 0.5:
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def with_raw(body: Any, path: tuple, raw: str, rng: random.Random) -> bytes:
    """The body's JSON with the value at ``path`` written as the raw text ``raw``."""
    text = dumps(replace(body, path, MARKER), rng)
    marker = json.dumps(MARKER).encode()
    if marker not in text:
        marker = json.dumps(MARKER, ensure_ascii=False).encode()
    return text.replace(marker, raw.encode("utf-8", "surrogatepass"), 1)


def text_mutation(data: bytes, campaign: Campaign) -> bytes:
    """The JSON text itself mutated: bytes that are not JSON, or JSON Python reads oddly."""
    rng = campaign.rng
    choice = rng.randrange(12)
    if choice == 0 and data.startswith(b"{") and len(data) > 2:  # a duplicate key
        key = rng.choice(["query", "impression_id", "doc_id", "value", "size", "filter",
                          "clicks", "user_id"])
        value = rng.choice([b'"tea"', b"1", b"null", b"[]", b"1e999", b'"\\ud800"', b"{}"])
        return b'{"' + key.encode() + b'": ' + value + b", " + data[1:]
    if choice == 1:  # cut short
        return data[:rng.randrange(len(data) + 1)]
    if choice == 2:  # a byte inserted
        i = rng.randrange(len(data) + 1)
        return data[:i] + bytes([rng.randrange(256)]) + data[i:]
    if choice == 3:  # a byte dropped
        i = rng.randrange(max(1, len(data)))
        return data[:i] + data[i + 1:]
    if choice == 4:  # another encoding
        text = data.decode("utf-8", "surrogatepass")
        encoding = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1",
                               "utf-8-sig", "cp1252"])
        return text.encode(encoding, "surrogatepass" if "utf" in encoding else "replace")
    if choice == 5:  # bytes that are not UTF-8 in a string
        snippet = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                              b"\xe2\x82", b"\x80", b"\xef\xbf\xbf", b"\x00"])
        i = data.find(b'"')
        return data if i < 0 else data[:i + 1] + snippet + data[i + 1:]
    if choice == 6:  # escapes of lone surrogates and control characters in a string
        escape = rng.choice([b"\\ud800", b"\\udfff", b"\\udc00\\ud800", b"\\ud83d",
                             b"\\u0000", b"\\u001f", b"\\uffff", b"\\ud800\\u0041", b"\\x41",
                             b"\\u12", b"\\", b"\\U0001F600"])
        i = data.find(b'"')
        return data if i < 0 else data[:i + 1] + escape + data[i + 1:]
    if choice == 7:  # around the JSON
        return rng.choice([b"\xef\xbb\xbf", b" \n\t", b"\x00", b"// c\n", b"\x1e"]) + data \
            + rng.choice([b"", b" ", b"\n", b",", b" {}", b"\x00", b"garbage", b"]"])
    if choice == 8:  # a number that is not JSON
        return re.sub(rb"(?<![\w.\"])-?\d+(\.\d+)?", rng.choice(NOT_NUMBERS).encode(), data,
                      count=1)
    if choice == 9:  # single quotes, trailing commas, comments
        return rng.choice([data.replace(b'"', b"'"), data.replace(b"}", b",}"),
                           data.replace(b"]", b",]"), data.replace(b":", b" : /* x */")])
    if choice == 10:  # nesting
        depth = rng.choice([31, 32, 33, 100, 10_000, 200_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        return b'{"query": "tea", "filter": ' + opener * depth + closer * depth + b"}"
    return rng.choice(WHOLE_BODIES)


WHOLE_BODIES = [
    b"", b" ", b"\n", b"null", b"0", b"-0", b"1e999", b"9" * 400, b"[]", b"{}", b'"tea"',
    b"true", b"{", b"}", b"[", b"\x00", b"\xff\xfe", b"query=tea", b"{\"query\": }",
    b'{"query": "tea"}' * 2, b"{" * 40 + b"}" * 40, b"[" * 100_000, b'"' + b"\\" * 1001,
    b'"' + b'\\"' * 50_000 + b"[" * 40, b" " * 500_000 + b"{}", b"[" + b"1," * 100_000 + b"1]",
    b'{"clicks": [' + b'{"impression_id": "s.x", "doc_id": "d"},' * 1000 + b"{}]}",
    b'{"query": "' + b"a" * 1_100_000 + b'"}', b'{"a":' * 20 + b"1" + b"}" * 20,
    b'{"query": "tea", "filter": [{"range": {"price": {"gte": ' + b"9" * 5000 + b"}}}]}",
]


# -- the HTTP campaign -----------------------------------------------------------------------

CONTENT_TYPES = [
    "application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
    "application/json; charset=latin-1", "application/json; charset=utf-16",
    "application/vnd.api+json", "application/problem+json", "text/json", "text/plain",
    "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data",
    "multipart/form-data; boundary=x", "application/octet-stream", "application/",
    "json", ";", "application/json;;;", "application/json; charset=\"", "*/*",
]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    data: bytes | None = None
    #: (field,) when the body holds a number beyond a float's range: a 400 naming it.
    beyond: tuple[str | None] | None = None

    def summary(self) -> str:
        data = "" if self.data is None else f" body={self.data[:300]!r}"
        if self.data is not None and len(self.data) > 300:
            data += f"... ({len(self.data)} bytes)"
        headers = {k: v[:80] for k, v in self.headers.items()}
        return f"{self.method} {self.path[:200]} headers={headers}{data}"


def draw_request(campaign: Campaign) -> Request:
    rng = campaign.rng
    r = rng.random()
    if r < 0.62:
        return post_request(campaign)
    if r < 0.80:
        return get_request(campaign)
    if r < 0.90:
        return preflight(campaign)
    return odd_method_or_path(campaign)


def post_request(campaign: Campaign) -> Request:
    rng = campaign.rng
    path = rng.choice(POST_PATHS)
    headers = {"Content-Type": "application/json"}
    if path in KEYED:
        headers["X-API-Key"] = API_KEY
    body = campaign.body_for(path)
    r = rng.random()
    beyond = None
    if r < 0.25:  # valid, as the schema says
        data = dumps(body, rng)
    elif r < 0.55:
        data = dumps(campaign.mutate(body), rng)
    elif r < 0.70:  # a number beyond a float's range, or a raw number, at any field
        node = rng.choice(campaign.nodes(body) + [(rng.choice(ODD_KEYS),)])
        if len(node) == 1 and isinstance(body, dict) and node[0] not in body:
            body[node[0]] = None
        text, too_big = rng.choice(NUMBERS)
        data = with_raw(body, node, text, rng)
        if too_big:
            beyond = (field_path(node) if node else None,)
    elif r < 0.90:
        data = text_mutation(dumps(body, rng), campaign)
    else:
        data = dumps(campaign.mutate(body), rng)
        headers_variant(campaign, headers)
    if rng.random() < 0.1:  # a client's addresses, as the trusted proxy header passes them
        headers["X-Forwarded-For"] = rng.choice(
            ["1.2.3.4", "", ",", "::1, 10.0.0.1", "x" * 1000, "1.2.3.4, \u00e9".encode(
                "utf-8").decode("latin-1"), "unknown", ", , "])
    if beyond is not None and headers.get("Content-Type") != "application/json":
        beyond = None
    return Request("POST", path, headers, data, beyond)


def headers_variant(campaign: Campaign, headers: dict[str, str]) -> None:
    """Other content types, credentials and origins."""
    rng = campaign.rng
    if rng.random() < 0.6:
        headers["Content-Type"] = rng.choice(CONTENT_TYPES)
    elif rng.random() < 0.3:
        del headers["Content-Type"]
    if rng.random() < 0.5:
        headers["Origin"] = rng.choice([ORIGIN, ORIGIN.upper(), "null", "https://evil.example",
                                        "", "x" * 500, ORIGIN + "/", "https://shop.example:443"])
    if rng.random() < 0.5:
        headers.pop("X-API-Key", None)
        credential = rng.choice(credentials())
        if credential is not None:
            headers[credential[0]] = credential[1]
    if rng.random() < 0.2:
        headers["Content-Encoding"] = rng.choice(["gzip", "deflate", "br", "identity", "x"])


def credentials() -> list[tuple[str, str] | None]:
    """API keys, tokens and passwords, right and wrong (header values as latin-1 text)."""
    basic = base64.b64encode(f"user:{API_KEY}".encode()).decode()
    return [
        None, ("X-API-Key", API_KEY), ("X-API-Key", ""), ("X-API-Key", "wrong"),
        ("X-API-Key", API_KEY + " "), ("X-API-Key", "\u00e9\u00ff"),
        ("X-API-Key", "x" * 10_000), ("Authorization", f"Bearer {API_KEY}"),
        ("Authorization", f"bearer   {API_KEY}  "), ("Authorization", "Bearer"),
        ("Authorization", f"Bearer {ADMIN_TOKEN}"), ("Authorization", f"Basic {basic}"),
        ("Authorization", "Basic"), ("Authorization", "Basic ===="),
        ("Authorization", "Basic !!!!"), ("Authorization", "Basic " + base64.b64encode(
            b"\xff\xfe:\xff").decode()), ("Authorization", "Basic " + base64.b64encode(
                b"nocolon").decode()), ("Authorization", "Digest username=x"),
        ("Authorization", "Bearer \u00e9"), ("Authorization", ""),
        ("Authorization", "Basic \u00e9\u00ff"), ("Authorization", "Basic dTr\u00e9"),
        ("Authorization", "Basic " + base64.b64encode(f":{ADMIN_TOKEN}".encode()).decode()),
    ]


def query_string(rng: random.Random) -> str:
    return rng.choice([
        "", "?", "?detail=0", "?detail=1", "?detail=2", "?detail=", "?detail=1&detail=1",
        "?detail=0&detail=1", "?detail=%00", "?detail=%ff", "?detail=%E9", "?detail=1%20",
        "?detail", "?%ff=%fe", "?a=" + "b" * 5000, "?x=\u00e9", "?detail=\u0661",
        "?detail[]=1", "?detail=1;detail=0", "?&&&", "?detail=%", "?detail=%2", "?q=%u0041",
    ])


def get_request(campaign: Campaign) -> Request:
    rng = campaign.rng
    path = rng.choice(GET_PATHS)
    headers: dict[str, str] = {}
    credential = rng.choice(credentials())
    if credential is not None:
        headers[credential[0]] = credential[1]
    if path == "/reranker.js" or rng.random() < 0.1:
        for name, values in (
                ("If-None-Match", ["*", '"x"', "W/\"x\"", "", '"', "x" * 2000, "\u00e9"]),
                ("If-Modified-Since", ["Thu, 01 Jan 1970 00:00:00 GMT", "garbage", "",
                                       "Mon, 99 Foo 9999 99:99:99 GMT"]),
                ("Range", ["bytes=0-10", "bytes=-5", "bytes=100000-", "bytes=5-1", "bytes=",
                           "bytes=0-0,1-1,2-2", "items=0-1", "bytes=-0", "bytes=abc",
                           "bytes=" + ",".join(["0-1"] * 500), "bytes=99999999999999999999-"]),
                ("If-Range", ['"x"', "Thu, 01 Jan 1970 00:00:00 GMT", "garbage"]),
                ("Accept-Encoding", ["gzip", "*", "", "x;q=abc"]),
                ("Accept", ["application/json", "text/html", "*/*;q=x", ""])):
            if rng.random() < 0.3:
                headers[name] = rng.choice(values)
    if rng.random() < 0.1:
        headers["Origin"] = rng.choice([ORIGIN, "null", "https://evil.example"])
    method = "HEAD" if rng.random() < 0.1 else "GET"
    data = None
    if rng.random() < 0.05:  # a body on a GET
        data = rng.choice([b"{}", b"x" * 100, b'{"query": "tea"}'])
        headers["Content-Type"] = "application/json"
    return Request(method, path + query_string(rng), headers, data)


def preflight(campaign: Campaign) -> Request:
    rng = campaign.rng
    path = rng.choice(POST_PATHS + GET_PATHS + ("/nope",))
    headers = {}
    for name, values in (
            ("Origin", [ORIGIN, "https://evil.example", "null", "", "x" * 300]),
            ("Access-Control-Request-Method", ["POST", "GET", "PUT", "", "X" * 100]),
            ("Access-Control-Request-Headers", ["Content-Type", "x-api-key, content-type",
                                                "", "*", "a" * 2000])):
        if rng.random() < 0.7:
            headers[name] = rng.choice(values)
    return Request("OPTIONS", path + query_string(rng), headers)


def odd_method_or_path(campaign: Campaign) -> Request:
    rng = campaign.rng
    method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "TRACE", "HEAD", "OPTIONS",
                         "FOO", "PROPFIND", "get", "Post"])
    path = rng.choice(POST_PATHS + GET_PATHS + (
        "/", "/nope", "/search/", "//search", "/search/../search", "/SEARCH", "/search%00",
        "/%2e%2e/%2e%2e/etc/passwd", "/search;x=1", "/caf\u00e9", "/%ff%fe", "/" + "a" * 8000,
        "/static/reranker.js", "/openapi.json/", "/healthz/", "/healthz%3Fdetail=1",
        "/dashboard/x", "/\u8336", "/search%2f", "/.env", "/favicon.ico"))
    headers: dict[str, str] = {}
    data = None
    if method.upper() in ("POST", "PUT", "PATCH", "DELETE") or rng.random() < 0.1:
        data = dumps(campaign.body_for(rng.choice(POST_PATHS)), rng)
        headers["Content-Type"] = "application/json"
        headers["X-API-Key"] = API_KEY
    return Request(method, path + query_string(rng), headers, data)


def learn_from(campaign: Campaign, request: Request, response: requests.Response) -> None:
    """Keep the impression of a page served, to click on later."""
    if request.path != "/search" or response.status_code != 200:
        return
    try:
        page = response.json()
        body = json.loads(request.data or b"{}")
    except ValueError:
        return
    if not isinstance(body, dict):
        return
    user = body.get("user_id") or None
    session = body.get("session_id") or None
    entry = (page["impression_id"], [hit["id"] for hit in page["hits"]],
             user if isinstance(user, str) else None,
             session if isinstance(session, str) else None)
    if len(campaign.pages) < 300:
        campaign.pages.append(entry)
    else:
        campaign.pages[campaign.rng.randrange(300)] = entry


def check_beyond(failures: Failures, request: Request, response: requests.Response) -> None:
    """A number beyond a float's range is a 400 naming the field that holds it."""
    expected = request.beyond[0]
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        error = {}
    if response.status_code != 400 or error.get("field") != expected \
            or "beyond the range of a float" not in error.get("message", ""):
        failures.add(f"beyond-range number not a 400 naming {expected!r}", request.summary(),
                     response.status_code, response.content)


def test_a_fuzz_campaign_gets_no_5xx_and_only_json_errors(fuzzed, corpus, caplog):
    caplog.set_level(logging.WARNING)
    session = requests.Session()
    schemas = session.get(fuzzed.url + "/openapi.json", timeout=30).json()
    schemas = schemas["components"]["schemas"]
    assert {name for names in SCHEMAS.values() for name in names} <= set(schemas)
    campaign = Campaign(random.Random(SEED), schemas, corpus)
    failures = Failures()
    statuses: dict[int, int] = {}
    slowest: list[tuple[float, str]] = []
    started = time.perf_counter()
    for _ in range(REQUESTS):
        request = draw_request(campaign)
        sent = time.perf_counter()
        try:
            response = session.request(request.method, fuzzed.url + request.path,
                                       headers=request.headers, data=request.data,
                                       timeout=REQUEST_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            failures.add("no answer", request.summary(), type(exc).__name__, str(exc))
            session.close()
            session = requests.Session()
            continue
        took = time.perf_counter() - sent
        slowest = sorted([*slowest, (took, request.summary()[:160])], reverse=True)[:3]
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        check_answer(failures, request.summary(), response.status_code,
                     response.headers.get("Content-Type"), response.content,
                     head=request.method.upper() == "HEAD")
        if request.beyond is not None:
            check_beyond(failures, request, response)
        learn_from(campaign, request, response)
    seconds = time.perf_counter() - started
    session.close()
    print(f"{REQUESTS} requests in {seconds:.1f} s ({REQUESTS / seconds:.0f}/s); statuses "
          f"{dict(sorted(statuses.items()))}; pages served {len(campaign.pages)}; slowest "
          f"{[(round(t, 3), s) for t, s in slowest]}")
    assert not failures.items, failures.report(caplog.records)
    # The campaign reaches the service, not only its checks at the door.
    assert statuses.get(200, 0) > REQUESTS // 10 and statuses.get(202, 0) > 100, statuses
    assert seconds < CAMPAIGN_SECONDS, f"the campaign took {seconds:.0f} s"


# -- raw sockets -----------------------------------------------------------------------------

@dataclass
class RawCase:
    name: str
    data: bytes
    #: Close our side once sent (the server sees the end of the stream).
    half_close: bool = False
    #: The case sends a transfer coding the server does not implement: 501 is correct.
    allow_501: bool = False
    #: Sent one after the other (else ``data`` at once).
    pieces: list[bytes] = field(default_factory=list)


def post(path: str, body: bytes, *extra: bytes, length: bytes | None = None,
         close: bool = True) -> bytes:
    head = [b"POST " + path.encode("latin-1") + b" HTTP/1.1", b"Host: fuzz",
            b"Content-Type: application/json", b"X-API-Key: " + API_KEY.encode(),
            b"Content-Length: " + (str(len(body)).encode() if length is None else length),
            *extra]
    if close:
        head.append(b"Connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def get_raw(target: bytes, *extra: bytes, close: bool = True, version: bytes = b"HTTP/1.1"
            ) -> bytes:
    head = [b"GET " + target + b" " + version, b"Host: fuzz", *extra]
    if close:
        head.append(b"Connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n"


def chunked(path: str, chunks: bytes, coding: bytes = b"chunked", *extra: bytes) -> bytes:
    head = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: fuzz",
            b"Content-Type: application/json", b"X-API-Key: " + API_KEY.encode(),
            b"Transfer-Encoding: " + coding, *extra, b"Connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + chunks


SEARCH = b'{"query": "tea kettle"}'


def raw_cases() -> list[RawCase]:
    cases = [
        RawCase("baseline search", post("/search", SEARCH)),
        RawCase("baseline 404", get_raw(b"/")),
    ]
    # bad request lines
    for line in [b"GARBAGE", b"GET", b"GET /healthz", b"GET /healthz HTTP/9.9",
                 b"GET /healthz HTTP/1.1 extra", b" GET /healthz HTTP/1.1",
                 b"GET  /healthz  HTTP/1.1", b"GET healthz HTTP/1.1",
                 b"GET http://evil.example/healthz HTTP/1.1", b"GET * HTTP/1.1",
                 b"CONNECT evil.example:443 HTTP/1.1", b"get /healthz HTTP/1.1",
                 b"GET /healthz HTTP/1.1\x00", b"GET /healthz HTTP/1", b"GET /healthz http/1.1",
                 b"GET /healthz HTTP/1.10", b"GET /healthz HTTP/0.9", b"GET /healthz HTTP/2.0",
                 b"\xff\xfe /healthz HTTP/1.1", b"G\x00T /healthz HTTP/1.1",
                 b"GET " + b"/a" * 40_000 + b" HTTP/1.1", b"X" * 70_000 + b" / HTTP/1.1",
                 b"GET /healthz?detail=1 HTTP/1.1", b"GET ?x HTTP/1.1", b"GET # HTTP/1.1",
                 b"GET //////// HTTP/1.1", b"GET /\t/ HTTP/1.1", b"GET /\r/ HTTP/1.1",
                 b"POST /search HTTP/1.1", b"DELETE /search HTTP/1.1", b"BREW /pot HTTP/1.1"]:
        cases.append(RawCase(f"request line {line[:40]!r}",
                             line + b"\r\nHost: fuzz\r\nConnection: close\r\n\r\n"))
    cases += [
        RawCase("bare LF lines", b"GET /healthz HTTP/1.1\nHost: fuzz\nConnection: close\n\n"),
        RawCase("blank lines first", b"\r\n\r\n" + get_raw(b"/healthz")),
        RawCase("only CRLFs", b"\r\n" * 100, half_close=True),
        RawCase("nothing, then close", b"", half_close=True),
        RawCase("request line never ends", b"GET /healthz HTTP/1.1", half_close=True),
        RawCase("headers never end", b"GET /healthz HTTP/1.1\r\nHost: x\r\n", half_close=True),
    ]
    # paths that are not ASCII, or encode odd bytes
    for target in ["/s\u00e9arch".encode(), b"/\xff", b"/\xc0\xaf", b"/%ff%fe", b"/%00",
                   b"/he\x00althz", b"/healthz?detail=%ff", b"/healthz?detail=\xff",
                   b"/healthz?detail=\xe9", "/\u8336?\u8336=\u8336".encode(),
                   b"/..%2f..%2fetc%2fpasswd", b"/%2e%2e/%2e%2e/", b"/healthz%", b"/%zz",
                   b"/reranker.js?" + b"x" * 60_000, b"/healthz#frag", b"/healthz?\x7f",
                   b"/experiments\xff", b"/dashboard?\xed\xa0\x80"]:
        cases.append(RawCase(f"target {target[:40]!r}", get_raw(target)))
        cases.append(RawCase(f"POST target {target[:40]!r}",
                             post(target.decode("latin-1"), SEARCH)))
    # headers: huge, many, malformed, not ASCII
    cases += [
        RawCase("one huge header", get_raw(b"/healthz", b"X-Big: " + b"a" * 300_000)),
        RawCase("a header of 60 kB", get_raw(b"/healthz", b"X-Big: " + b"a" * 60_000)),
        RawCase("many headers", get_raw(b"/healthz", *[b"X-%d: v" % i for i in range(5000)])),
        RawCase("a huge header name", get_raw(b"/healthz", b"X" * 100_000 + b": v")),
        RawCase("obs-fold", get_raw(b"/healthz", b"X-A: a", b" folded")),
        RawCase("obs-fold first", b"GET /healthz HTTP/1.1\r\n folded\r\nHost: x\r\n"
                                  b"Connection: close\r\n\r\n"),
        RawCase("no colon", get_raw(b"/healthz", b"NoColonHere")),
        RawCase("space in a name", get_raw(b"/healthz", b"Content Type: x")),
        RawCase("space before the colon", get_raw(b"/healthz", b"X-A : x")),
        RawCase("empty name", get_raw(b"/healthz", b": x")),
        RawCase("NUL in a value", get_raw(b"/healthz", b"X-A: a\x00b")),
        RawCase("CR in a value", get_raw(b"/healthz", b"X-A: a\rb")),
        RawCase("latin-1 value", get_raw(b"/healthz", b"X-A: \xe9\xff")),
        RawCase("UTF-8 value", get_raw(b"/healthz", "X-A: \u8336".encode())),
        RawCase("latin-1 name", get_raw(b"/healthz", b"X-\xe9: a")),
        RawCase("no Host", b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"),
        RawCase("two Hosts", get_raw(b"/healthz", b"Host: other")),
        RawCase("Expect 100", post("/search", SEARCH, b"Expect: 100-continue")),
        RawCase("Expect odd", post("/search", SEARCH, b"Expect: 417-nope")),
        RawCase("upgrade", get_raw(b"/healthz", b"Connection: Upgrade", b"Upgrade: websocket")),
        RawCase("h2c", get_raw(b"/healthz", b"Connection: Upgrade, HTTP2-Settings",
                               b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")),
        RawCase("h2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", half_close=True),
        RawCase("TLS hello", bytes.fromhex("16030100a5010000a10303") + b"\x00" * 160,
                half_close=True),
        RawCase("admin token latin-1", get_raw(b"/healthz?detail=1", b"Authorization: Bearer "
                                               b"\xe9\xff")),
        RawCase("API key latin-1", post("/search", SEARCH).replace(
            API_KEY.encode(), b"\xe9\xff\x80")),
        RawCase("Basic not base64", get_raw(b"/experiments", b"Authorization: Basic \xff\xfe")),
        RawCase("Basic latin-1 password", get_raw(
            b"/dashboard", b"Authorization: Basic " + base64.b64encode(b"u:\xe9\xff"))),
        RawCase("forwarded latin-1", post("/search", SEARCH, b"X-Forwarded-For: \xe9, \xff")),
        RawCase("forwarded huge", post("/search", SEARCH, b"X-Forwarded-For: " + b"1" * 50_000)),
        RawCase("origin latin-1 text/plain",
                post("/click", b'{"impression_id": "x", "doc_id": "d"}', b"Origin: \xe9\xff")
                .replace(b"application/json", b"text/plain")),
        RawCase("content type latin-1", post("/search", SEARCH).replace(
            b"application/json", b"application/json; charset=\xe9")),
        RawCase("content type empty", post("/search", SEARCH).replace(b"application/json", b"")),
    ]
    # Content-Length
    for length in [b"abc", b"-1", b"1.5", b"  23", b"23, 23", b"23,24", b"+23", b"0x17",
                   b"99999999999999999999999", b"", b"23 23", b"2\x003", b"\xd9\xa2\xd9\xa3",
                   b"1048577", b"0", b"5", b"-0", b"023"]:
        cases.append(RawCase(f"Content-Length {length!r}",
                             post("/search", SEARCH, length=length), half_close=True))
    cases += [
        RawCase("two Content-Lengths", post("/search", SEARCH, b"Content-Length: 5"),
                half_close=True),
        RawCase("two equal Content-Lengths", post("/search", SEARCH, b"Content-Length: 23")),
        RawCase("body longer than its length (the rest is a request)",
                post("/search", SEARCH + b"GARBAGE / HTTP/1.1\r\n\r\n", length=b"23",
                     close=False), half_close=True),
        RawCase("truncated body then close", post("/search", SEARCH[:10], length=b"23"),
                half_close=True),
        RawCase("truncated body of a click then close",
                post("/click", b'{"impression_id": "s.', length=b"500"), half_close=True),
        RawCase("length beyond the limit, little sent",
                post("/search", SEARCH, length=b"1048577000"), half_close=True),
        RawCase("body beyond the limit", post("/search", b'{"query": "' + b"a" * 1_100_000
                                             + b'"}')),
        RawCase("GET with a body", get_raw(b"/healthz", b"Content-Length: 5") + b"hello"),
        RawCase("GET with a truncated body", get_raw(b"/healthz", b"Content-Length: 50")
                + b"hello", half_close=True),
    ]
    # chunked bodies
    good = b"%x\r\n%s\r\n0\r\n\r\n" % (len(SEARCH), SEARCH)
    for name, chunks in [
            ("good", good), ("size zz", b"zz\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size -1", b"-1\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size huge", b"ffffffffffffffffffffffff\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size beyond the limit", b"100001\r\n" + b"a" * 1000 + b"\r\n"),
            ("size too small", b"5\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size too large", b"50\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size with space", b" 17\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size 0x", b"0x17\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("size empty", b"\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("extension", b"17;a=b;c\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("bad extension", b"17;\x00\r\n" + SEARCH + b"\r\n0\r\n\r\n"),
            ("no CRLF after data", b"17\r\n" + SEARCH + b"0\r\n\r\n"),
            ("bare LF", b"17\n" + SEARCH + b"\n0\n\n"),
            ("trailers", good[:-2] + b"X-Trailer: t\r\nContent-Length: 5\r\n\r\n"),
            ("no last chunk", b"17\r\n" + SEARCH + b"\r\n"),
            ("many one-byte chunks", b"".join(b"1\r\n%c\r\n" % c for c in SEARCH)
             + b"0\r\n\r\n"),
            ("bytes after the end", good + b"garbage"),
            ("not UTF-8 size", b"\xd9\xa1\xd9\xa7\r\n" + SEARCH + b"\r\n0\r\n\r\n")]:
        cases.append(RawCase(f"chunked {name}", chunked("/search", chunks), half_close=True))
    for coding in [b"gzip", b"gzip, chunked", b"chunked, gzip", b"chunked, chunked",
                   b"identity", b"deflate", b"br", b"xchunked", b"Chunked", b" chunked",
                   b"chunked ", b"chunked;q=1", b"\xe9", b"", b"compress", b"identity, chunked"]:
        cases.append(RawCase(f"Transfer-Encoding {coding!r}", chunked("/search", good, coding),
                             half_close=True, allow_501=True))
    cases += [
        RawCase("chunked and Content-Length",
                chunked("/search", good, b"chunked", b"Content-Length: 5"), half_close=True),
        RawCase("two Transfer-Encodings",
                chunked("/search", good, b"chunked", b"Transfer-Encoding: gzip"),
                half_close=True, allow_501=True),
        RawCase("chunked in HTTP/1.0", chunked("/search", good).replace(b"HTTP/1.1",
                                                                         b"HTTP/1.0")),
    ]
    # pipelines
    cases += [
        RawCase("three searches", post("/search", SEARCH, close=False) * 2
                + post("/search", SEARCH)),
        RawCase("fifty health checks", get_raw(b"/healthz", close=False) * 49
                + get_raw(b"/healthz")),
        RawCase("a search then garbage", post("/search", SEARCH, close=False)
                + b"GARBAGE\r\n\r\n", half_close=True),
        RawCase("every endpoint", b"".join(post(p, b"{}", close=False) for p in POST_PATHS)
                + b"".join(get_raw(p.encode(), close=False) for p in GET_PATHS)
                + get_raw(b"/healthz")),
        RawCase("a bad chunk after a good request", post("/search", SEARCH, close=False)
                + chunked("/search", b"zz\r\n"), half_close=True),
        RawCase("sent byte by byte", get_raw(b"/healthz?detail=0"),
                pieces=[bytes([b]) for b in get_raw(b"/healthz?detail=0")]),
        RawCase("HTTP/1.0 keep-alive", get_raw(b"/healthz", b"Connection: keep-alive",
                                               close=False, version=b"HTTP/1.0"),
                half_close=True),
    ]
    return cases


def mutated_raw(rng: random.Random) -> list[RawCase]:
    """Valid requests with their bytes mutated at random."""
    seeds = [post("/search", b'{"query": "tea", "size": 5, "filter": [{"term": '
                             b'{"category": "tea"}}]}'),
             post("/click", b'{"impression_id": "s.AAAA", "doc_id": "d0001"}'),
             post("/reward", b'{"impression_id": "s.AAAA", "value": 1}'),
             chunked("/explain", b"f\r\n{\"query\": \"tea\"}\r\n0\r\n\r\n"),
             get_raw(b"/healthz?detail=1", b"Authorization: Bearer " + ADMIN_TOKEN.encode()),
             get_raw(b"/reranker.js", b"If-None-Match: \"x\"", b"Range: bytes=0-5")]
    specials = [b"\r\n", b"\n", b"\r", b"\x00", b" ", b":", b"\xff", b"\xe9", b"%", b"?",
                b"\r\n\r\n", b"0", b"-", b"9" * 30, b";", b",", b"\t", b"HTTP/1.1"]
    cases = []
    for i in range(RAW_MUTATIONS):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            choice = rng.randrange(4)
            if choice == 0:
                data[at] = rng.randrange(256)
            elif choice == 1:
                data[at:at] = rng.choice(specials)
            elif choice == 2:
                del data[at:at + rng.randint(1, 8)]
            else:
                data[at:at] = data[at:at + rng.randint(1, 40)] * rng.randint(2, 50)
        cases.append(RawCase(f"mutation {i}", bytes(data), half_close=True,
                             allow_501=b"transfer-encoding" in bytes(data).lower()))
    return cases


def exchange(address: tuple[str, int], case: RawCase) -> bytes:
    """Send the case on a new connection; all bytes that came back (a short socket timeout:
    a server that waits for more gets the end of the stream, then time to answer)."""
    received = bytearray()
    with socket.create_connection(address, timeout=2) as conn:
        conn.settimeout(0.5)
        try:
            for piece in case.pieces or [case.data]:
                conn.sendall(piece)
            if case.half_close:
                conn.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before it read everything
            pass
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                if answers_complete(bytes(received)):
                    break
                if not case.half_close:
                    try:
                        conn.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                continue
            except OSError:  # reset
                break
            if not chunk:
                break
            received += chunk
    return bytes(received)


def parse_answers(data: bytes) -> tuple[list[tuple[int, dict[str, str], bytes]], bytes]:
    """The HTTP answers in ``data``, and what is left that does not parse as one."""
    answers = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        match = re.fullmatch(r"HTTP/1\.[01] (\d{3})(?: .*)?", lines[0])
        if not match:
            break
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(match.group(1))
        if 100 <= status < 200:
            data = rest
            continue
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size_line, sep, rest = rest.partition(b"\r\n")
                if not sep:
                    return answers, data
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    rest = rest.partition(b"\r\n")[2]
                    break
                body += rest[:size]
                rest = rest[size + 2:]
            body = bytes(body)
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if len(rest) < length:
                return answers, data
            body, rest = rest[:length], rest[length:]
        elif status in (204, 304):
            body = b""
        else:
            body, rest = rest, b""
        answers.append((status, headers, body))
        data = rest
    return answers, data


def answers_complete(data: bytes) -> bool:
    answers, rest = parse_answers(data)
    return bool(answers) and not rest


def test_malformed_http_on_raw_sockets_gets_no_5xx(fuzzed, caplog):
    caplog.set_level(logging.WARNING)
    host, port = fuzzed.url.removeprefix("http://").split(":")
    address = (host, int(port))
    cases = raw_cases() + mutated_raw(random.Random(SEED))
    failures = Failures()
    statuses: dict[int, int] = {}
    silent = []
    started = time.perf_counter()
    for case in cases:
        data = exchange(address, case)
        answers, rest = parse_answers(data)
        if not answers and not data:
            silent.append(case.name)  # closed without an answer: a refusal by the server
        if rest:
            failures.add("not an HTTP answer", f"{case.name}: {case.data[:200]!r}", "-", rest)
        for status, headers, body in answers:
            statuses[status] = statuses.get(status, 0) + 1
            check_answer(failures, f"{case.name}: {case.data[:200]!r}", status,
                         headers.get("content-type"), body, allow_501=case.allow_501)
    seconds = time.perf_counter() - started
    print(f"{len(cases)} raw cases in {seconds:.1f} s; statuses {dict(sorted(statuses.items()))};"
          f" {len(silent)} closed without an answer: {silent}")
    assert not failures.items, failures.report(caplog.records)
    # The server still answers after all that.
    assert requests.get(fuzzed.url + "/healthz", timeout=10).status_code == 200
