"""A FastAPI app that mounts reranker's endpoints under /rr through WSGI middleware
(``a2wsgi``) and reranks its own results in an async endpoint.

    pip install fastapi a2wsgi uvicorn
    RERANKER_CONFIG=config.yaml uvicorn examples.frameworks.fastapi_app:app
"""

from __future__ import annotations

import os

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from reranker.library import Reranker


def create_app(config) -> FastAPI:
    reranker = Reranker(config, train_in_background=True)
    app = FastAPI()
    app.mount("/rr", WSGIMiddleware(reranker.wsgi_app()))
    app.state.reranker = reranker

    @app.get("/products")
    async def products(q: str, uid: str | None = None):
        hits = [{"id": f"p{i}", "score": float(10 - i), "source": {"title": title}}
                for i, title in enumerate(["green tea", "black tea", "tea kettle"])
                if set(q.split()) & set(title.split())]
        # reranker's calls block (SQLite, the model): keep them off the event loop. The page
        # is served to uid: its clicks (POST /rr/click) carry the same user_id.
        return await run_in_threadpool(reranker.rerank, q, hits, size=10, user_id=uid)

    return app


if os.environ.get("RERANKER_CONFIG"):  # pragma: no cover
    app = create_app(os.environ["RERANKER_CONFIG"])
