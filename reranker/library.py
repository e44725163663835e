"""reranker as a library, inside an application that already has a web framework.

    from reranker.library import Reranker

    reranker = Reranker("config.yaml", train_in_background=True)
    page = reranker.search("green tea", size=10, user_id="u-41")         # the configured engine
    page = reranker.rerank("green tea", candidates=[                       # or your own hits
        {"id": "p17", "score": 12.3, "source": {"title": "...", "popularity": 7}}, ...])
    reranker.click(page["impression_id"], "p17")
    flask_app.register_blueprint(reranker.blueprint(), url_prefix="/rr")  # the HTTP endpoints

Every call goes through the same service as ``reranker serve``: the impression is logged, the
clicks are validated and stored durably, and the trainer learns from them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from flask import Blueprint, Flask

from reranker.core.config import Config, config_from_dict, load_config
from reranker.models.trainer import TrainReport
from reranker.serving.service import RerankerService
from reranker.stores.events import ClickResult, RewardResult


class Reranker:
    """One configuration's service, for use in-process.

    ``config`` is a YAML file's path, a :class:`reranker.core.config.Config` or a dict of
    sections. With ``train_in_background`` a daemon thread runs the trainer every
    ``trainer.interval`` seconds (as ``reranker serve`` does); otherwise call
    :meth:`train`. Close it (or use it as a context manager) to stop the trainer and release
    the event store."""

    def __init__(self, config: Config | dict | str | os.PathLike, *,
                 train_in_background: bool = False):
        if isinstance(config, (str, os.PathLike)):
            config = load_config(config)
        elif not isinstance(config, Config):
            config = config_from_dict(config)
        self.config = config
        self.service = RerankerService(config).open()
        self._stop: threading.Event | None = None
        if train_in_background:
            from reranker.api.app import start_trainer

            _, self._stop = start_trainer(self.service, config.trainer.interval)

    def search(self, query: str, **options: Any) -> dict[str, Any]:
        """``POST /search``: ``size``, ``user_id``, ``session_id``, ``filter``, ``from``
        (as ``offset``), ``facets``, ``source``, ``highlight``, ``sort``; returns the same
        answer."""
        options = dict(options)
        offset = options.pop("offset", options.pop("from", None))
        return self.service.search(query, options.pop("size", None),
                                   options.pop("user_id", None), options.pop("session_id", None),
                                   filters=options.pop("filter", None), offset=offset,
                                   facets=options.pop("facets", None), **options)

    def rerank(self, query: str, candidates: list[dict[str, Any]], *, size: int | None = None,
               user_id: str | None = None, session_id: str | None = None,
               offset: int | None = None) -> dict[str, Any]:
        """Rank the application's own ``candidates``, in its engine's order, each
        ``{"id", "score", "field_scores", "source"}`` (only ``id`` is required: see
        :func:`reranker.backends.application.candidates_from`); log the impression and return
        the page as :meth:`search` does. With ``backend.type: none`` reranker needs no
        engine at all."""
        return self.service.rerank(query, candidates, size, user_id, session_id, offset)

    def click(self, impression_id: str, doc_id: str, *, user_id: str | None = None,
              session_id: str | None = None) -> ClickResult:
        """``POST /click``: durable when this returns. A page searched with a ``user_id``
        (or ``session_id``) accepts clicks that give the same one."""
        return self.service.click(impression_id, doc_id, user_id, session_id)

    def reward(self, impression_id: str, value: float, *, user_id: str | None = None,
               session_id: str | None = None) -> RewardResult:
        """``POST /reward``: the application's reward for a page; durable when this
        returns. ``user_id`` and ``session_id`` as for :meth:`click`."""
        return self.service.reward(impression_id, value, user_id, session_id)

    def train(self, *, close_all: bool = False) -> TrainReport:
        """One training pass (``reranker train``)."""
        return self.service.trainer.run_once(close_all=close_all)

    def blueprint(self, name: str = "reranker") -> Blueprint:
        """The HTTP endpoints, to mount in an existing Flask app."""
        from reranker.api.app import blueprint

        return blueprint(self.service, name)

    def wsgi_app(self) -> Flask:
        """A WSGI app of the endpoints, to mount in a non-Flask framework (for FastAPI:
        ``app.mount("/rr", WSGIMiddleware(reranker.wsgi_app()))`` with ``a2wsgi``)."""
        from reranker.api.app import create_app

        return create_app(service=self.service)

    def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self.service.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
