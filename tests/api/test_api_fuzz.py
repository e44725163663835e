"""A property-based fuzz test of the whole HTTP API against its own OpenAPI document: the
real app on the embedded engine with a tiny shop, schemathesis generating valid and invalid
requests for every operation, with a fixed budget and a fixed seed.

Every answer must be documented (status, content type, schema), none may be a 5xx, and an
error is the project's JSON naming the request field when the body breaks a field's schema.
"""

from __future__ import annotations

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from reranker.api.app import create_app
from reranker.api.openapi import openapi_document
from reranker.api.validation import RequestValidator
from reranker.core.config import config_from_dict, load_config
from reranker.core.errors import field_path
from reranker.core.plugins import backend_class, get_plugin_manager
from tests.support.configs import write_config

#: Generated requests per operation and generation mode: the whole test stays within
#: seconds, and derandomize=True makes it the same requests on every run.
BUDGET = 40

SHOP = [{"id": f"sku-{i}", "title": f"{colour} tea kettle {i}", "body": "a kettle for tea",
         "popularity": i, "category": ("tea", "kettle")[i % 2], "price": 5.0 + i,
         "in_stock": i % 3 != 0}
        for i, colour in enumerate(["green", "black", "white", "red", "blue", "oolong"] * 3)]


#: The configuration fuzzed: filters on a keyword, a number and a boolean field.
SECTIONS = {"backend": {"filter_fields": ["category", "price", "in_stock"]}}


@pytest.fixture(scope="module")
def fuzzed_app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    config = load_config(write_config(folder, **SECTIONS))
    backend = backend_class(get_plugin_manager(), "embedded")(config)
    backend.index_documents(((doc["id"], doc) for doc in SHOP), recreate=True)
    backend.close()
    app = create_app(config)
    # The document the tests are generated from (at collection, from the same settings) is
    # the one the app serves.
    assert app.test_client().get("/openapi.json").get_json() == DOCUMENT
    yield app
    app.extensions["reranker"].close()


def _document() -> dict:
    config = config_from_dict(SECTIONS)  # paths aside, the settings of fuzzed_app
    return openapi_document(config, RequestValidator(config).schemas)


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(max_examples=BUDGET, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_fuzzed_requests_get_documented_answers_and_named_fields(case, fuzzed_app):
    response = case.call(app=fuzzed_app)
    case.validate_response(response, checks=[
        not_a_server_error, status_code_conformance, content_type_conformance,
        response_schema_conformance, negative_data_rejection])
    if response.status_code < 400:
        return
    error = response.json()["error"]
    assert error["status"] == response.status_code and error["message"]
    assert len(error["message"]) < 400  # names the problem, echoes little
    if response.status_code == 400 and isinstance(case.body, dict):
        fields = _schema_failure_fields(case)
        if fields:
            assert error.get("field") in fields, (case.body, error)


def _schema_failure_fields(case) -> set[str]:
    """Paths of the body's fields that break the operation's documented schema, by
    jsonschema itself: each error's location, or the property it finds missing or unknown."""
    body_schema = case.operation.definition.raw["requestBody"]["content"]["application/json"]
    name = body_schema["schema"].get("$ref", "")
    if not name:  # /explain: one of two bodies, told apart by impression_id
        refs = [ref["$ref"] for ref in body_schema["schema"]["oneOf"]]
        name = refs[1] if "impression_id" in case.body else refs[0]
    component = DOCUMENT["components"]["schemas"][name.rsplit("/", 1)[1]]
    fields = set()
    for failure in jsonschema.Draft202012Validator(component).iter_errors(case.body):
        path = list(failure.absolute_path)
        if failure.validator == "required":
            path += [n for n in failure.validator_value if n not in failure.instance][:1]
        elif failure.validator == "additionalProperties" and isinstance(failure.instance, dict):
            known = failure.schema.get("properties", {})
            path += [n for n in failure.instance if n not in known][:1]
        if path:
            fields.add(field_path(path))
    return fields
