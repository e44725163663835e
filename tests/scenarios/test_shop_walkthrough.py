"""The walk-through "An online shop, end to end" (docs/how-to/shop.md), step by step,
through the real command line and a real `reranker serve` over HTTP, with the shop's own
example catalogue and configuration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.paths import ROOT
from tests.support.servers import ServeProcess, run_cli

EXAMPLE = ROOT / "examples" / "shop"
TEA = [{"term": {"category": "tea"}}, {"term": {"in_stock": True}},
       {"range": {"price": {"lte": 30}}}]


@pytest.fixture
def shop(tmp_path):
    """A folder with the example configuration and a generated catalogue."""
    shutil.copy(EXAMPLE / "shop.yaml", tmp_path / "shop.yaml")
    out = subprocess.run([sys.executable, str(EXAMPLE / "catalog.py"),
                          str(tmp_path / "products.jsonl")],
                         capture_output=True, text=True, check=True).stdout
    assert "wrote 1000 products" in out
    return tmp_path


def products(folder: Path) -> dict[str, dict]:
    lines = (folder / "products.jsonl").read_text().splitlines()
    return {p["id"]: p for p in map(json.loads, lines)}


def edited(folder: Path, old: str, new: str, name: str = "edited.yaml") -> Path:
    text = (folder / "shop.yaml").read_text()
    assert old in text
    path = folder / name
    path.write_text(text.replace(old, new))
    return path


def failing(*args: str) -> str:
    result = run_cli(*args, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout + result.stderr


def test_step_1_the_configuration_is_checked_against_the_catalogue(shop):
    path = edited(shop, "fields: [title, description]", "fields: [title, descripton]")
    err = failing("index", "-c", str(path), str(shop / "products.jsonl"))
    assert "'descripton'" in err and "did you mean 'description'?" in err
    path = edited(shop, "numeric_fields: [popularity, rating]",
                  "numeric_fields: [popularty, rating]")
    assert "did you mean 'popularity'?" in failing("index", "-c", str(path),
                                                    str(shop / "products.jsonl"))
    assert not (shop / "shop-index").exists()  # a first index that fails leaves nothing
    # a price stored as text, with price a feature: the document is named
    lines = (shop / "products.jsonl").read_text().splitlines()
    broken = json.loads(lines[41])
    broken["price"] = "12.50"
    lines[41] = json.dumps(broken)
    (shop / "text-price.jsonl").write_text("\n".join(lines) + "\n")
    path = edited(shop, "numeric_fields: [popularity, rating]",
                  "numeric_fields: [popularity, rating, price]")
    err = failing("index", "-c", str(path), str(shop / "text-price.jsonl"))
    assert "line 42 (id sku-00042): numeric field 'price' holds '12.50'" in err
    shutil.rmtree(shop / "shop-index")
    assert "missing.jsonl does not exist" in failing("index", "-c", str(shop / "shop.yaml"),
                                                     str(shop / "missing.jsonl"))
    assert not (shop / "shop-index").exists()
    path = edited(shop, "learner:", "lerner:")
    assert "did you mean 'learner'" in failing("serve", "-c", str(path), "--port", "0")


def test_steps_2_to_6_serve_filter_page_click_train_and_change_the_features(shop):
    catalogue = products(shop)
    config = shop / "shop.yaml"
    out = run_cli("index", "-c", str(config), str(shop / "products.jsonl")).stdout
    assert "indexed 1000 documents" in out
    server = ServeProcess(config)
    try:
        # 3. filters and facets, then page 2 of the same ranking
        body = {"query": "green tea", "size": 10, "user_id": "u-41", "filter": TEA,
                "facets": ["brand", "in_stock"]}
        first = server.post("/search", body).json()
        assert [h["rank"] for h in first["hits"]] == list(range(1, 11))
        for hit in first["hits"]:
            product = catalogue[hit["id"]]
            assert product["category"] == "tea" and product["in_stock"]
            assert product["price"] <= 30
        facets = first["facets"]
        assert sum(facets["brand"].values()) == first["total"] > 10
        assert facets["in_stock"] == {"true": first["total"]}
        second = server.post("/search", {**body, "from": 10}).json()
        assert [h["rank"] for h in second["hits"]] == list(range(11, 21))
        ids = [h["id"] for h in first["hits"] + second["hits"]]
        assert len(set(ids)) == 20
        bad = server.post("/search", {"query": "tea", "filter": [{"term": {"colour": "red"}}]})
        assert bad.status_code == 400 and "colour" in bad.json()["error"]["message"]
        # 4. the browser snippet, and CORS for the shop's pages
        script = requests.get(server.url + "/reranker.js", timeout=30)
        assert script.status_code == 200 and "keepalive" in script.text
        preflight = requests.options(server.url + "/click", timeout=30, headers={
            "Origin": "http://localhost:8080", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert preflight.headers.get("Access-Control-Allow-Origin") == "http://localhost:8080"
        # 5. shoppers who search "green tea" buy the same product, shown below the top
        plain = {"query": "green tea", "filter": [{"term": {"in_stock": True}}]}
        page = server.post("/search", {**plain, "user_id": "shopper-0"}).json()
        start = 2
        target = page["hits"][start]["id"]
        for i in range(40):
            page = server.post("/search", {**plain, "user_id": f"shopper-{i}"}).json()
            shown = [h["id"] for h in page["hits"]]
            if target in shown:
                assert server.post("/click", {"impression_id": page["impression_id"],
                                              "doc_id": target,
                                              "user_id": f"shopper-{i}"}).status_code == 202
        explained = server.post("/explain", {"impression_id": page["impression_id"]}).json()
        assert "learns" in explained["training"] and explained["hits"][0]["features"]
    finally:
        server.stop()
    out = run_cli("train", "-c", str(config), "--close-all").stdout
    assert "saved model version" in out, out
    listing = run_cli("models", "list", "-c", str(config)).stdout
    assert "serving, newest" in listing
    shown = run_cli("models", "show", "-c", str(config)).stdout
    assert "field_value:rating" in shown and "click_lift:doc" in shown
    assert "click_lift:query_doc" not in shown  # a query's own clicks are not the model's
    server = ServeProcess(config)
    try:
        page = server.post("/search", {**plain, "user_id": "later"}).json()
        rank = next(h["rank"] for h in page["hits"] if h["id"] == target)
        assert rank < start + 1  # it rose from where the shoppers found it
        old_version = page["model_version"]
    finally:
        server.stop()
    # 6. price becomes a feature too: the index is rebuilt and the model carried over
    config.write_text(config.read_text().replace("numeric_fields: [popularity, rating]",
                                                 "numeric_fields: [popularity, rating, price]"))
    run_cli("index", "-c", str(config), "--recreate", str(shop / "products.jsonl"))
    server = ServeProcess(config)
    try:
        page = server.post("/search", {**plain, "user_id": "after"}).json()
        assert page["model_version"] == 1 and page["hits"]
    finally:
        server.stop()
    log = [line for line in server.log_path.read_text().splitlines()
           if "the feature set changed" in line]
    assert len(log) == 1 and "(adds field_value:price)" in log[0], log
    assert f"starts from the weights of version {old_version}" in log[0]
    # as the walk-through shows it: the old feature set's 6 features carry over (the general
    # model's: the query's own click lift is not one of them)
    page = (ROOT / "docs" / "how-to" / "shop.md").read_text(encoding="utf-8")
    assert "on the 6 features both share" in log[0] and "on the 6 features both share" in page
