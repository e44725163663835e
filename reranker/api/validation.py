"""Every request body of the HTTP API, checked against a JSON Schema before the service sees
it, and read within bounds.

:func:`request_schemas` builds one JSON Schema (Draft 2020-12) per endpoint body from the
configuration (``size`` up to ``server.max_size``, the query up to ``server.max_query_bytes``,
...); the same schemas are the request bodies of the OpenAPI document
(:mod:`reranker.api.openapi`), so the description and the checks cannot drift apart.
:class:`RequestValidator` turns the first failure into a :class:`BadRequestError` whose
``field`` is the JSON path of the offending value and whose message quotes at most a few
dozen characters of it. The deeper checks that need the service's state (filter fields
allowed by ``backend.filter_fields``, a query's bytes and terms, finite numbers) stay in the
service and the filter parser, with their own messages.

Two annotations, which JSON Schema validators ignore, word the messages: ``x-expected`` says
what a value must be (``'size' must be an integer from 1 to 100, got 101``), and ``x-names``
names the keys of an object whose unknown keys are refused (``unknown clause 'match'``).
``x-limit`` names the configuration key behind a bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import numpy as np

from reranker.backends.filters import (
    FACET_SIZE,
    MAX_RANGES,
    MAX_TERMS,
    MAX_VALUE_LENGTH,
    RANGE_BOUNDS,
)
from reranker.backends.options import (
    FRAGMENT_SIZE,
    MAX_FRAGMENT_SIZE,
    MAX_SOURCE_PATHS,
    MAX_TAG_LENGTH,
    ORDERS,
    POST_TAG,
    PRE_TAG,
)
from reranker.core.config import Config
from reranker.core.errors import BadRequestError, field_path, quoted_path, shorten
from reranker.core.jsontext import beyond_float, json_error, strict_loads
from reranker.core.suggest import did_you_mean
from reranker.core.times import ISO_DATE

#: Longest impression, user or session id accepted (a served impression id has about 60
#: characters: :mod:`reranker.serving.trust`).
MAX_ID_LENGTH = 256
#: Longest document id accepted in a click.
MAX_DOC_ID_LENGTH = 1024

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["status", "message"],
        "properties": {
            "status": {"type": "integer", "description": "the HTTP status"},
            "message": {"type": "string", "description": "what is wrong, naming the field; "
                        "a client's value is quoted only in part"},
            "field": {"type": "string", "description": "JSON path of the offending request "
                      "field (query, filter[0].range.price.gte), when there is one"},
        },
    }},
}


def request_schemas(config: Config) -> dict[str, dict[str, Any]]:
    """The JSON Schema of every request body, by name: ``search``, ``click``, ``reward``,
    ``explain_search`` and ``explain_impression`` (``POST /explain`` takes either)."""
    server = config.server
    max_from = max(config.backend.candidates, server.max_size) - 1
    impression_id = _string("a non-empty string", MAX_ID_LENGTH,
                            "the impression_id of the page, as /search answered it")
    # Its bounds are in bytes and words, which JSON Schema cannot count: the service checks
    # them (for the library too) and the description states them.
    query = {"type": "string", "minLength": 1, "pattern": r"\S",
             "x-expected": "a non-empty string",
             "description": f"the user's search text: at most {server.max_query_bytes} bytes "
                            f"of UTF-8 and {server.max_query_terms} words"}
    size = {"type": "integer", "minimum": 1, "maximum": server.max_size,
            "x-expected": f"an integer from 1 to {server.max_size}",
            "description": f"hits per page (default {server.default_size})"}
    search = _body({
        "query": query,
        "size": size,
        "from": {"type": "integer", "minimum": 0, "maximum": max_from,
                 "x-expected": f"a non-negative integer below {max_from + 1} "
                               f"(backend.candidates)",
                 "description": "hits to skip: the page starts at rank from + 1"},
        "filter": _filter_schema(server.max_filter_clauses),
        "facets": _facets_schema(len(config.backend.filter_fields)),
        "source": _source_schema(),
        "highlight": _highlight_schema(config.backend.fields),
        "sort": _sort_schema(),
        "user_id": _string("a string", MAX_ID_LENGTH, "keeps a user's pages and experiment "
                                                      "arm; the page is served to this user",
                           min_length=0),
        "session_id": _string("a string", MAX_ID_LENGTH, "as user_id, when there is none",
                              min_length=0),
    }, required=["query"])
    # A page served to a user or session accepts clicks and rewards that carry its id.
    served_to = {
        "user_id": _string("a string", MAX_ID_LENGTH, "the user_id the search gave",
                           min_length=0),
        "session_id": _string("a string", MAX_ID_LENGTH, "the session_id the search gave",
                              min_length=0)}
    doc_id = {"type": ["string", "integer"], "minLength": 1, "maxLength": MAX_DOC_ID_LENGTH,
              "x-expected": "a non-empty string", "description": "the id of the hit clicked"}
    click = _body({"impression_id": impression_id, "doc_id": doc_id, **served_to},
                  required=["impression_id", "doc_id"])
    return {
        "search": search,
        "click": click,
        # the bounds before the items: a huge list is refused without visiting them
        "clicks": _body({"clicks": {"type": "array", "minItems": 1,
                                    "maxItems": server.max_click_batch,
                                    "x-limit": "server.max_click_batch",
                                    "x-expected": "a non-empty list of clicks",
                                    "items": click,
                                    "description": "clicks, each as POST /click takes it"}},
                        required=["clicks"]),
        "reward": _body({"impression_id": impression_id,
                         "value": {"type": "number", "x-expected": "a finite number",
                                   "description": "the application's reward for the page"},
                         **served_to},
                        required=["impression_id", "value"]),
        "explain_search": _body({"query": query, "size": size,
                                 "filter": _filter_schema(server.max_filter_clauses)},
                                required=["query"]),
        "explain_impression": _body({"impression_id": impression_id},
                                    required=["impression_id"]),
    }


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    # (unknown fields before missing ones: the validator checks in this order, and a typo
    # such as "docid" is better named than reported as a missing "doc_id")
    return {"type": "object", "x-expected": "a JSON object", "x-names": "field",
            "additionalProperties": False, "required": required, "properties": properties}


def _string(expected: str, max_length: int, description: str, *,
            min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length,
            "x-expected": expected, "description": description}


def _facets_schema(n_fields: int) -> dict[str, Any]:
    """A search's ``facets`` (:func:`reranker.backends.filters.parse_facets` checks the
    rest: one of size, ranges and stats, the bounds' types)."""
    bound = {"type": ["number", "string"], "x-expected": "a number or an ISO 8601 date"}
    one_range = {"type": "object", "minProperties": 1, "x-names": "range key",
                 "x-expected": "{\"from\": A, \"to\": B} with an optional \"key\"",
                 "properties": {"from": bound, "to": bound,
                                "key": {"type": "string", "minLength": 1,
                                        "maxLength": MAX_VALUE_LENGTH,
                                        "x-expected": "a non-empty string"}},
                 "additionalProperties": False}
    entry = {"type": ["string", "object"],
             "x-expected": "a field name or {\"field\": NAME, and \"size\", \"ranges\" "
                           "or \"stats\"}",
             "x-names": "facet key", "required": ["field"],
             "properties": {"field": {"type": "string", "x-expected": "a field name"},
                            "size": {"type": "integer", "minimum": 1, "maximum": FACET_SIZE,
                                     "x-expected": f"an integer from 1 to {FACET_SIZE}"},
                            "ranges": {"type": "array", "minItems": 1, "maxItems": MAX_RANGES,
                                       "x-expected": f"a list of 1 to {MAX_RANGES} ranges",
                                       "items": one_range},
                            "stats": {"const": True, "x-expected": "true"}},
             "additionalProperties": False}
    return {"type": "array", "maxItems": max(1, n_fields), "x-limit": "backend.filter_fields",
            "x-expected": "a list of field names or facet objects", "items": entry,
            "description": "filter fields to count the values of (the most frequent "
                           f"{FACET_SIZE}, or size of them), to count in ranges "
                           "({\"field\", \"ranges\": [{\"from\", \"to\", \"key\"}]}, from "
                           "included, to excluded) or to give the count, min and max of "
                           "({\"field\", \"stats\": true}; sum and average on a number)"}


def _source_schema() -> dict[str, Any]:
    """A search's ``source`` (:func:`reranker.backends.options.parse_source` checks it)."""
    paths = {"type": "array", "maxItems": MAX_SOURCE_PATHS,
             "x-expected": "a list of field paths",
             "items": {"type": "string", "minLength": 1, "x-expected": "a field path"}}
    return {"type": ["boolean", "array", "object"], "maxItems": MAX_SOURCE_PATHS,
            "x-expected": "true, false, a list of field paths or {\"include\": [...], "
                          "\"exclude\": [...]}",
            "items": paths["items"], "x-names": "source key",
            "properties": {"include": paths, "exclude": paths}, "additionalProperties": False,
            "description": "the fields of each hit's document to return: a list of dotted "
                           "paths (* matches any characters), {\"include\", \"exclude\"}, "
                           "or false for none (default: the whole document)"}


def _highlight_schema(text_fields: list[str]) -> dict[str, Any]:
    """A search's ``highlight`` (:func:`reranker.backends.options.parse_highlight`)."""
    fields = {"type": "array", "minItems": 1, "maxItems": len(text_fields),
              "x-expected": "a non-empty list of text fields",
              "items": {"type": "string", "enum": list(text_fields),
                        "x-expected": f"one of the text fields ({', '.join(text_fields)})"}}
    tag = {"type": "string", "maxLength": MAX_TAG_LENGTH,
           "x-expected": f"a string of at most {MAX_TAG_LENGTH} characters"}
    return {"type": ["array", "object"], "minItems": 1, "maxItems": len(text_fields),
            "items": fields["items"], "x-names": "highlight key", "required": ["fields"],
            "x-expected": "a list of text fields or {\"fields\": [...], \"pre_tag\", "
                          "\"post_tag\", \"fragment_size\"}",
            "properties": {"fields": fields, "pre_tag": tag, "post_tag": tag,
                           "fragment_size": {"type": "integer", "minimum": 1,
                                             "maximum": MAX_FRAGMENT_SIZE,
                                             "x-expected": f"an integer from 1 to "
                                                           f"{MAX_FRAGMENT_SIZE}"}},
            "additionalProperties": False,
            "description": "searched text fields (backend.fields) to answer highlighted "
                           "fragments of, per hit under \"highlight\": HTML-escaped text "
                           "with the matched words between pre_tag and post_tag (default "
                           f"{PRE_TAG} and {POST_TAG}), fragments of about fragment_size "
                           f"characters (default {FRAGMENT_SIZE})"}


def _sort_schema() -> dict[str, Any]:
    """A search's ``sort`` (:func:`reranker.backends.options.parse_sort`)."""
    key = {"type": ["string", "object"], "minProperties": 1, "maxProperties": 1,
           "x-expected": "a field name or {FIELD: \"asc\" | \"desc\"}",
           "additionalProperties": {"type": "string", "enum": list(ORDERS),
                                    "x-expected": "\"asc\" or \"desc\""}}
    return {**key, "type": ["string", "object", "array"], "minItems": 1, "items": key,
            "x-expected": "a field name, {FIELD: \"asc\" | \"desc\"} or a list of them",
            "description": "order the page by filter or numeric fields instead of by the "
                           "learned ranking (documents without a value last): the engine's "
                           "order, logged, and learned from by no learner"}


def _filter_schema(max_clauses: int) -> dict[str, Any]:
    """A search's ``filter``: a list of ``term``, ``terms`` and ``range`` clauses (see
    :mod:`reranker.backends.filters`, which also checks the fields against the config)."""
    scalar = {"type": ["string", "number", "boolean"], "maxLength": MAX_VALUE_LENGTH,
              "x-expected": "a string, a number or true/false"}

    def one_field(value: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "minProperties": 1, "maxProperties": 1,
                "x-expected": "an object naming one field: {FIELD: ...}",
                "additionalProperties": value}

    bounds = {"type": "object", "minProperties": 1, "x-names": "bound",
              "x-expected": f"an object of bounds ({', '.join(RANGE_BOUNDS)}) with numbers "
                            f"or dates",
              "properties": {name: {"type": ["number", "string"],
                                    "pattern": f"^{ISO_DATE.pattern}$",
                                    "x-expected": "a finite number or an ISO 8601 date"}
                             for name in RANGE_BOUNDS},
              "additionalProperties": False}
    clause = {"type": "object", "minProperties": 1, "maxProperties": 1,
              "x-expected": "an object with one of term, terms, range", "x-names": "clause",
              "properties": {
                  "term": one_field(scalar),
                  "terms": one_field({"type": "array", "minItems": 1, "maxItems": MAX_TERMS,
                                      "x-expected": "a non-empty list of values",
                                      "items": scalar}),
                  "range": one_field(bounds)},
              "additionalProperties": False}
    return {"type": "array", "maxItems": max_clauses, "x-limit": "server.max_filter_clauses",
            "x-expected": 'a list of clauses such as {"term": {FIELD: VALUE}}',
            "items": clause,
            "description": "clauses that must all hold: term, terms, range on the fields of "
                           "backend.filter_fields"}


class RequestValidator:
    """The configuration's request schemas, compiled once; :meth:`check` refuses a body with
    the first failure, named by its JSON path."""

    def __init__(self, config: Config):
        self.schemas = request_schemas(config)
        self._validators = {}
        for name, schema in self.schemas.items():
            jsonschema.Draft202012Validator.check_schema(schema)
            self._validators[name] = jsonschema.Draft202012Validator(schema)

    def check(self, name: str, body: Any) -> None:
        """Raise a :class:`BadRequestError` naming the field when ``body`` does not fit
        the schema ``name``. Only the first error is computed: the schemas list a node's
        bounds before its items, so a huge list is refused without visiting them all."""
        error = next(self._validators[name].iter_errors(body), None)
        if error is not None:
            raise _bad_request(error)


def _bad_request(error: jsonschema.ValidationError) -> BadRequestError:
    """The project's message for a schema failure, worded by the failing node's
    ``x-expected`` / ``x-names`` / ``x-limit``."""
    path = list(error.absolute_path)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    keyword, instance = error.validator, error.instance
    if keyword == "required":
        name = next(n for n in error.validator_value if n not in instance)
        expected = schema["properties"][name].get("x-expected", "given")
        return _error(path + [name], f"{{where}} must be {expected}")
    if keyword == "additionalProperties" and "x-names" in schema:
        name = next(n for n in instance if n not in schema.get("properties", {}))
        known = ", ".join(sorted(schema.get("properties", {})))
        prefix = "{where}: " if path else ""
        suggestion = did_you_mean(name, schema.get("properties", {}))
        return _error(path + [name], f"{prefix}unknown {schema['x-names']} "
                                     f"{quoted_path([name])}{suggestion} (known: {known})",
                      where=path)
    limit = f" ({schema['x-limit']})" if "x-limit" in schema else ""
    if keyword == "maxLength":
        return _error(path, f"{{where}} is {len(instance)} characters long; at most "
                            f"{error.validator_value}{limit}")
    if keyword in ("maxItems", "maxProperties") and isinstance(instance, list):
        return _error(path, f"{{where}} holds {len(instance)} items; at most "
                            f"{error.validator_value}{limit}")
    expected = schema.get("x-expected", f"valid ({error.message[:ECHO_MESSAGE]})")
    return _error(path, f"{{where}} must be {expected}, got {shorten(instance)}")


#: Characters of a validator's own message used when a schema node has no ``x-expected``.
ECHO_MESSAGE = 60


def _error(path: list, template: str, where: list | None = None) -> BadRequestError:
    """A 400 for the field at ``path``; ``{where}`` in ``template`` is replaced by the
    quoted location (``'filter'[0].range``) of ``where`` (default: ``path``)."""
    where = path if where is None else where
    return BadRequestError(template.replace("{where}", quoted_path(where)),
                           field=field_path(path) if path else None)


def read_json(data: bytes, max_depth: int) -> Any:
    """Parse a request body that nests at most ``max_depth`` arrays and objects.

    The depth is measured on the bytes before parsing, without recursion (Python's JSON
    parser recurses per level: 1,000 levels raise RecursionError, and many fewer already
    cost a stack frame per level). Raises a :class:`BadRequestError` for a body too deep or
    not JSON."""
    if nesting_depth(data, max_depth) > max_depth:
        raise _too_deep(max_depth)
    beyond: list[str] = []
    try:
        body = strict_loads(data, beyond)
        if beyond:
            raise _beyond_range(body, beyond[0])
        return body
    except RecursionError:  # a body whose strings fooled the scan: still a client's error
        raise _too_deep(max_depth) from None
    except UnicodeDecodeError:
        raise BadRequestError("the request body must be JSON: it is not UTF-8 text") from None
    except ValueError as exc:
        raise BadRequestError(f"the request body must be JSON: {json_error(exc)}") from None


def _beyond_range(body: Any, text: str) -> BadRequestError:
    """The 400 for a body holding a number beyond a float's range, naming the field that
    holds the first one (found without recursion: the body nests at most max_json_depth)."""
    stack: list[tuple[list, Any]] = [([], body)]
    while stack:
        path, value = stack.pop()
        if beyond_float(value):
            return BadRequestError(f"{quoted_path(path)} is a number beyond the range of a "
                                   f"float ({text})" if path else
                                   "the request body is a number beyond the range of a float",
                                   field=field_path(path) if path else None)
        if isinstance(value, dict):
            stack.extend(([*path, key], item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(([*path, i], item) for i, item in reversed(list(enumerate(value))))
    return BadRequestError(f"the request body holds a number beyond the range of a float "
                           f"({text})")


def _too_deep(max_depth: int) -> BadRequestError:
    return BadRequestError(f"the request body nests arrays and objects more than {max_depth} "
                           f"levels deep (server.max_json_depth)")


def nesting_depth(data: bytes, max_depth: int) -> int:
    """How deep ``data`` nests ``[`` and ``{`` outside strings (0 for a body with too few
    brackets to pass ``max_depth``), in time linear in the body and in numpy's native loops:
    a quote preceded by an even number of backslashes opens or closes a string, and only
    the brackets outside strings count. (A regular expression that skips strings is
    quadratic on an unterminated one full of escaped quotes: it retries from every quote.)"""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return 0
    codes = np.frombuffer(data, dtype=np.uint8)
    index = np.arange(len(codes), dtype=np.int32)
    # the last byte at or before each position that is not a backslash, and from it the
    # backslashes right before each byte
    last = np.where(codes == ord("\\"), np.int32(-1), index)
    np.maximum.accumulate(last, out=last)
    escaped = np.zeros(len(codes), dtype=bool)
    escaped[1:] = ((index[:-1] - last[:-1]) & 1).astype(bool)
    quotes = (codes == ord('"')) & ~escaped
    outside = (np.cumsum(quotes, dtype=np.int32) & 1) == 0
    steps = (((codes == ord("[")) | (codes == ord("{"))) & outside).view(np.int8) \
        - (((codes == ord("]")) | (codes == ord("}"))) & outside).view(np.int8)
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))
