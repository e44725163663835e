"""An online shop's catalogue, with the fields that filters, facets and paging work on."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.configs import write_config, write_docs
from tests.support.es_scenarios import unique_index
from tests.support.es_standin import Standin
from tests.support.servers import LiveServer

CATEGORIES = ("tea", "coffee", "kettle")
BRANDS = ("acme", "zeta", "nova", "orbit")
FILTER_FIELDS = ["category", "brand", "price", "in_stock", "tags"]


def shop(n: int = 90, seed: int = 3) -> list[dict]:
    """An online shop's products: every one mentions 'shop', so a search for it matches all."""
    rng = np.random.default_rng(seed)
    products = []
    for i in range(n):
        category = CATEGORIES[i % 3]
        products.append({
            "id": f"p{i:03d}", "title": f"{category} {rng.choice(['classic', 'deluxe', 'mini'])}",
            "body": f"shop {category} product " + " ".join(rng.choice(
                ["fresh", "strong", "green", "steel", "glass", "quick"], size=4)),
            "category": category, "brand": str(BRANDS[rng.integers(4)]),
            "price": float(round(rng.uniform(2, 60), 2)), "in_stock": bool(rng.random() < 0.6),
            "tags": [str(t) for t in rng.choice(["gift", "sale", "new", "eco"], size=2,
                                                replace=False)],
            "popularity": float(rng.uniform(0, 100))})
    return products


#: The remote backends' stand-ins: Elasticsearch 8.x, and OpenSearch.
REMOTE = {"elasticsearch": ("8.15.1", "elasticsearch"), "opensearch": ("2.19.1", "opensearch")}


def remote_standin(kind: str) -> Standin:
    """The stand-in that answers as backend.type ``kind``'s server."""
    version, distribution = REMOTE[kind]
    return Standin(version, distribution=distribution)


@pytest.fixture(params=["embedded", "elasticsearch", "opensearch"])
def shop_server(request, tmp_path):
    products = shop()
    sections = {"features": {"numeric_fields": ["price", "popularity"]},
                "trainer": {"feedback_window": 0.0}}
    standin = None
    if request.param == "embedded":
        path = write_config(tmp_path, backend={"type": "embedded", "path": "index",
                                               "fields": ["title", "body"],
                                               "filter_fields": FILTER_FIELDS}, **sections)
    else:
        standin = remote_standin(request.param)
        path = write_config(tmp_path, backend={"type": request.param, "hosts": [standin.url],
                                               "index": unique_index(), "request_timeout": 5.0,
                                               "fields": ["title", "body"],
                                               "filter_fields": FILTER_FIELDS}, **sections)
    index_in_process(path, write_docs(tmp_path, products))
    server = LiveServer(path)
    yield server, products, standin
    server.stop()
    if standin is not None:
        standin.stop()


def index_in_process(config_path, documents) -> str:
    """``reranker index`` run in this process (through click's runner: the command itself,
    without a second interpreter's start-up, which costs the tests a second a server)."""
    from click.testing import CliRunner

    from reranker.commands.index import index

    result = CliRunner().invoke(index, ["-c", str(config_path), str(documents)])
    assert result.exit_code == 0, result.output
    return result.output
