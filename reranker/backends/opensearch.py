"""Wrap an existing OpenSearch index (2.13 and later, 3.x) with the official ``opensearch-py``
client: ``backend.type: opensearch``.

OpenSearch answers the requests the Elasticsearch backend makes (one search per request with
named feature queries and ``include_named_queries_score``, search templates, filters,
aggregations for facets, field capabilities, highlights, bulk indexing), but its server
refuses the Elasticsearch client's media types and its client takes requests in another
shape. So this backend is the Elasticsearch backend
(:class:`reranker.backends.elasticsearch.ElasticsearchBackend`: every feature, check and
message) over :class:`OpenSearchClient`, which gives the calls that backend makes to the
OpenSearch client's transport; the version check, the client's errors and its bulk helpers
are OpenSearch's. Credentials: basic authentication (``backend.username`` and
``backend.password_env``), or AWS Signature Version 4 for Amazon OpenSearch Service and
Serverless (``backend.aws_region``, ``backend.aws_service``; the credentials come from the
AWS SDK's usual chain: environment, profile, instance role), with no plugin on the cluster.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from reranker import hookimpl
from reranker.backends.elasticsearch import (
    ElasticsearchBackend,
    _connection_failure,
    _error_reason,
    _short,
)
from reranker.core.errors import BackendError

#: The oldest OpenSearch that answers every hit's named-query scores.
MINIMUM_VERSION = (2, 13)


def _driver():
    try:
        import opensearchpy
    except ImportError:
        raise BackendError("backend.type opensearch needs the opensearch-py package: pip "
                           "install 'reranker[opensearch]'") from None
    return opensearchpy


def _path(index: str) -> str:
    return "/" + quote(index, safe=",*")


class _Indices:
    """The index calls of :class:`OpenSearchClient`."""

    def __init__(self, client: OpenSearchClient):
        self._client = client

    def exists(self, index: str) -> bool:
        return bool(self._client.raw.indices.exists(index=index))

    def delete(self, index: str) -> Any:
        return self._client.request("DELETE", _path(index))

    def create(self, index: str, mappings: dict[str, Any]) -> Any:
        return self._client.request("PUT", _path(index), body={"mappings": mappings})

    def refresh(self, index: str) -> Any:
        return self._client.request("POST", _path(index) + "/_refresh")

    def validate_query(self, index: str, query: dict[str, Any], explain: bool = False) -> Any:
        return self._client.request("POST", _path(index) + "/_validate/query",
                                    params={"explain": "true"} if explain else None,
                                    body={"query": query})


class OpenSearchClient:
    """The calls the Elasticsearch backend makes of its client, in the Elasticsearch
    client's shape (keyword arguments for a search's body, ``options(request_timeout=)``),
    made through the OpenSearch client's transport."""

    def __init__(self, raw, timeout: float | None = None):
        self.raw = raw  # the opensearchpy.OpenSearch client
        self.timeout = timeout
        self.indices = _Indices(self)

    def options(self, request_timeout: float) -> OpenSearchClient:
        return OpenSearchClient(self.raw, request_timeout)

    def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.raw.transport.perform_request(method, path, params=params, body=body,
                                                  timeout=self.timeout, headers=headers)

    def perform_request(self, method: str, path: str, headers=None, params=None, body=None):
        return self.request(method, path, params=params, body=body)

    def info(self) -> Any:
        return self.request("GET", "/")

    def search(self, index: str, include_named_queries_score: bool = False,
               **body: Any) -> Any:
        params = {"include_named_queries_score": "true"} if include_named_queries_score \
            else None
        body = {("_source" if key == "source" else "from" if key == "from_" else key): value
                for key, value in body.items()}
        return self.request("POST", _path(index) + "/_search", params=params, body=body)

    def field_caps(self, index: str, fields: str) -> Any:
        return self.request("GET", _path(index) + "/_field_caps", params={"fields": fields})

    def get_script(self, id: str) -> Any:  # noqa: A002 -- the Elasticsearch client's name
        return self.request("GET", "/_scripts/" + quote(id, safe=""))

    def close(self) -> None:
        self.raw.close()


class OpenSearchBackend(ElasticsearchBackend):
    """Candidates and features from an existing OpenSearch index (``backend.index``)."""

    name = "opensearch"
    product = "OpenSearch"
    minimum_version = MINIMUM_VERSION
    credential_keys = "backend.username and backend.password_env, or backend.aws_region,"

    def _connect(self):
        opensearchpy = _driver()
        backend = self.config.backend
        if backend.cloud_id:
            raise BackendError("backend.cloud_id is Elastic Cloud's: give OpenSearch's "
                               "backend.hosts")
        if backend.api_key_env:
            raise BackendError("backend.api_key_env: OpenSearch takes basic authentication "
                               "(backend.username, backend.password_env) or AWS Signature "
                               "Version 4 (backend.aws_region), not Elasticsearch API keys")
        kwargs: dict[str, Any] = {"hosts": list(backend.hosts), "timeout": self.timeout,
                                  "max_retries": backend.max_retries,
                                  "retry_on_timeout": False,
                                  "verify_certs": backend.verify_certs}
        kwargs.update(self._tls())
        if backend.username:
            kwargs["http_auth"] = self._user_and_password()
        if backend.aws_region:
            if backend.username:
                raise BackendError("backend.aws_region and backend.username: give one way to "
                                   "sign in")
            kwargs["http_auth"] = self._aws_auth(opensearchpy)
        try:
            return OpenSearchClient(opensearchpy.OpenSearch(**kwargs))
        except (ValueError, TypeError, opensearchpy.ImproperlyConfigured) as exc:
            raise BackendError(f"backend.hosts: {exc}") from exc

    def _aws_auth(self, opensearchpy):
        """Requests signed with AWS Signature Version 4, by the credentials the AWS SDK
        finds (environment, shared profile, instance or task role)."""
        backend = self.config.backend
        try:
            import boto3
        except ImportError:
            raise BackendError("backend.aws_region: signing requests for AWS needs the boto3 "
                               "package (pip install boto3)") from None
        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise BackendError("backend.aws_region: the AWS SDK found no credentials (set "
                               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or a "
                               "role)")
        return opensearchpy.Urllib3AWSV4SignerAuth(credentials, backend.aws_region,
                                                   backend.aws_service)

    def _detect_version(self, client) -> None:
        """OpenSearch 2.13 or later (its ``distribution`` says OpenSearch); an Elasticsearch
        server, or an older OpenSearch, is refused by name."""
        opensearchpy = _driver()

        def info():
            try:
                return client.info()
            except opensearchpy.AuthorizationException:
                return None

        info = self._call(info, "reading the server's version")
        if info is None:  # (a user without cluster:monitor: the start-up search decides)
            self._info_forbidden = True
            return
        version = info.get("version", {}) if isinstance(info, dict) else {}
        number = str(version.get("number", ""))
        if version.get("distribution") != "opensearch":
            raise BackendError(f"backend.type is opensearch, but the server at "
                               f"{self._where()} is Elasticsearch {number}: set backend.type "
                               f"to elasticsearch")
        match = re.match(r"(\d+)\.(\d+)", number)
        if not match:
            raise BackendError(f"OpenSearch at {self._where()} reports no version number")
        if (int(match.group(1)), int(match.group(2))) < MINIMUM_VERSION:
            raise BackendError(f"OpenSearch {number} at {self._where()} is too old: per-hit "
                               f"feature scores need 2.13 or later")
        self.server_version = number

    def _failure(self, exc: Exception) -> tuple[str | None, int | None, str]:
        opensearchpy = _driver()
        if isinstance(exc, opensearchpy.ConnectionTimeout):
            return "timeout", None, ""
        if isinstance(exc, opensearchpy.ConnectionError):
            return "unreachable", None, _connection_failure(exc)
        if isinstance(exc, opensearchpy.TransportError):
            status = exc.status_code if isinstance(exc.status_code, int) else None
            if status is None:
                return "failed", None, _short(exc)
            # (the OpenSearch client keeps the answer's body as ``info``)
            return "refused", status, _error_reason(exc, exc.info)
        return None, None, ""

    def _not_found(self) -> type[Exception]:
        return _driver().NotFoundError

    def _bulk(self):
        from opensearchpy import helpers

        return helpers, self.es.raw


@hookimpl
def reranker_register_backends():
    return [OpenSearchBackend]
