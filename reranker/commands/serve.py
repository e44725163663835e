"""``reranker serve``: the HTTP service, in one process or gunicorn's workers."""

from __future__ import annotations

import os
import signal
import sys
import tempfile

import click

from reranker.commands.options import config_option
from reranker.core.config import load_config, serving_description, warnings_held


@click.command()
@config_option
@click.option("--host", default=None, help="Listen address (default: server.host).")
@click.option("--port", type=int, default=None, help="Port (default: server.port; 0 = any free).")
@click.option("--workers", type=click.IntRange(0, 256), default=None,
              help="Worker processes (default: server.workers; 0 = serve from this process).")
@click.option("--no-trainer", is_flag=True, help="Do not run the background trainer.")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int | None,
          no_trainer: bool) -> None:
    """Start the HTTP service: POST /search, POST /click, GET /healthz.

    Unless disabled, a background trainer applies clicks as their feedback windows close,
    and the service picks up every new model version without a restart. With --workers N,
    gunicorn serves from N worker processes sharing the event store and the model folder;
    one of them runs the trainer.
    """
    overrides = {k: v for k, v in (("server.host", host), ("server.port", port),
                                   ("server.workers", workers)) if v is not None}
    with warnings_held():  # (said once logging is set up as configured)
        config = load_config(config_path, overrides)
        if config.server.workers and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # Metrics summed over the workers: prometheus_client's multiprocess mode, which
            # it decides when first imported, so before anything imports it here
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(
                prefix="reranker-metrics-")
        from reranker.serving.monitoring import configure_logging

        configure_logging(config.server.log_format)
    if config.server.workers:
        from reranker.api.wsgi import serve_workers

        serve_workers(config_path, overrides, trainer=not no_trainer)
        return
    from reranker.api.app import create_server, serving_app
    from reranker.serving.service import RerankerService

    service = RerankerService(config).open()
    app, stop = serving_app(service, config.trainer.interval
                            if config.trainer.enabled and not no_trainer else None)
    try:
        server = create_server(app, host=config.server.host, port=config.server.port)
    except (OSError, ValueError) as exc:
        if stop is not None:
            stop.set()
        service.close()
        raise click.ClickException(f"server.host/server.port: cannot listen on "
                                   f"{config.server.host}:{config.server.port}: {exc}") from exc
    if service.experiment is None:
        model = service.model
        serving = f"learner {model.learner_name} (model version {model.version})"
    else:
        serving = serving_description(config, {label: info["model_version"] for label, info
                                               in service.arm_info().items()})
    click.echo(f"reranker serving {serving} on http://{config.server.host}:"
               f"{server.effective_port}", nl=True)
    sys.stdout.flush()

    def terminate(signum, frame):  # pragma: no cover -- exercised by the subprocess tests
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        if stop is not None:
            stop.set()
        server.close()
        service.close()
