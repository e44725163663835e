"""An existing Flask shop that mounts reranker's endpoints under /rr and reranks in its own
view: the shop keeps its routes, reranker adds /rr/search, /rr/click, /rr/healthz and
/rr/reranker.js.

    RERANKER_CONFIG=config.yaml flask --app examples/frameworks/flask_app.py run
"""

from __future__ import annotations

import os

from flask import Flask, jsonify, request

from reranker.library import Reranker


def create_shop(config) -> Flask:
    reranker = Reranker(config, train_in_background=True)
    app = Flask("shop")
    app.register_blueprint(reranker.blueprint(), url_prefix="/rr")
    app.extensions["reranker"] = reranker

    @app.get("/")
    def home():
        return "<h1>The shop</h1>"

    @app.get("/products")
    def products():
        # The shop's own search gives the candidates; reranker orders them and logs the page,
        # served to the uid cookie's user: its clicks (POST /rr/click) carry that user_id.
        query = request.args.get("q", "")
        hits = [{"id": p["id"], "score": p["score"], "source": p}
                for p in own_search(query)]
        page = reranker.rerank(query, hits, size=10, user_id=request.cookies.get("uid"))
        return jsonify(page)

    return app


def own_search(query: str) -> list[dict]:
    """Stands for the shop's existing search (a database, a search service ...)."""
    words = set(query.lower().split())
    catalogue = [{"id": f"p{i}", "title": title, "popularity": i}
                 for i, title in enumerate(["green tea", "black tea", "tea kettle",
                                            "coffee grinder", "green coffee beans"])]
    return [{**p, "score": float(len(words & set(p["title"].split())))}
            for p in catalogue if words & set(p["title"].split())]


if __name__ == "__main__":  # pragma: no cover
    create_shop(os.environ.get("RERANKER_CONFIG", "config.yaml")).run()
