"""``reranker models``: list, show, pin, unpin and roll back the saved versions of each arm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from reranker.core.config import load_config
from reranker.core.errors import RerankerError

if TYPE_CHECKING:

    from reranker.core.config import Config
    from reranker.models.arms import Arm
    from reranker.models.model import RankingModel

from reranker.commands.options import CommandGroup, config_option, wide_console

# -- reranker models ----------------------------------------------------------------------------

ARM_HELP = "Label of the arm (a key of experiment.arms); needed when the config has several."


def _arm_option(func):
    return click.option("--arm", "label", default=None, metavar="LABEL", help=ARM_HELP)(func)


def _config_arms(config_path: str | None) -> tuple[Config, list[Arm]]:
    """The configuration and its arms (read only: no folder is created)."""
    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config

    config = load_config(config_path)
    return config, arms_from_config(config, get_plugin_manager())


def _one_arm(config_path: str | None, label: str | None) -> Arm:
    """The arm labelled ``label``, or the only arm; the error lists the labels."""
    from reranker.core.errors import BadRequestError, NotFoundError

    config, arms = _config_arms(config_path)
    labels = [name for arm in arms for name in arm.labels]
    where = config.source or "the default configuration"
    if label is None:
        if len(arms) == 1:
            return arms[0]
        raise BadRequestError(f"{where} has several arms ({', '.join(labels)}): choose one with "
                              f"--arm LABEL")
    for arm in arms:
        if label in arm.labels:
            return arm
    raise NotFoundError(f"{where} has no arm {label!r}; its arms are {', '.join(labels)}")


def _in_folder(arm: Arm) -> bool:
    """Whether the arm's models are in a folder (``store.model_store: folder``)."""
    from reranker.models.store import ModelStore

    return isinstance(arm.models, ModelStore)


def _where(arm: Arm) -> dict[str, Any]:
    """Where the arm's models are: its ``folder`` (None in the database) and ``location``."""
    return {"folder": arm.models.location if _in_folder(arm) else None,
            "location": arm.models.location}


def _versions_of(arm: Arm) -> dict[str, Any]:
    """What ``models list`` shows of one arm, as JSON-ready data."""
    from reranker.core.errors import ModelLoadError
    from reranker.models.arm_serving import pinned_gone

    try:
        pinned = arm.models.pinned()
    except RerankerError as exc:
        pinned, pin_error = None, exc.message
    else:
        pin_error = None
    try:  # where a feature-set change carried its first version from, or will
        carried_from = arm.arm_file().get("carried_from")
        found = None if arm.models.exists() else arm.predecessor()
    except ModelLoadError as exc:
        carried_from, found, pin_error = None, None, pin_error or exc.message
    starts_from = None if found is None else {"how": found[0], "folder": found[1].name}
    versions = arm.models.versions()
    rows, serving, newest_good = [], None, None
    for version in versions:
        row = {"version": version, "saved": arm.models.saved_at(version)}
        try:
            model = arm.models.load(version, arm.factory)
        except ModelLoadError as exc:
            row["error"] = exc.message
        else:
            row.update({key: getattr(model.progress, key)
                        for key in ("impressions", "clicks", "updates", "skipped", "cursor")})
            if model.origin:
                row["origin"] = model.origin
            newest_good = version
        rows.append(row)
    loads = {row["version"] for row in rows if "error" not in row}
    if pinned is not None and pinned not in versions and pin_error is None:
        pin_error = pinned_gone(arm.models, pinned)
    if pinned is not None:
        serving = pinned if pinned in loads else None
    elif pin_error is None:
        serving = 0 if newest_good is None else newest_good
    return {"label": arm.label, "labels": list(arm.labels), "id": arm.id,
            "learner": arm.spec.learner, **_where(arm),
            "next_version": arm.models.next_version(), "pinned": pinned,
            "pin_error": pin_error, "serving": serving,
            "newest": versions[-1] if versions else None, "versions": rows,
            "carried_from": carried_from, "starts_from": starts_from}


@click.group(cls=CommandGroup)
def models() -> None:
    """Inspect and manage the saved model versions of each arm: list them, show one, pin the
    version every service serves, or roll back to an older one.

    Version numbers are never reused, even after model files are deleted or pruned.
    """


@models.command("list")
@config_option
@_arm_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def list_models(config_path: str | None, label: str | None, as_json: bool) -> None:
    """List each arm's saved versions with their training progress; mark the version being
    served, the pinned one and the newest. Versions that fail to load are listed with the
    reason. Safe while the service runs."""
    import json

    from rich.table import Table

    from reranker.experiments.report_model import format_time

    arms = [_one_arm(config_path, label)] if label else _config_arms(config_path)[1]
    listing = [_versions_of(arm) for arm in arms]
    if as_json:
        click.echo(json.dumps(listing, indent=1))
        return
    console = wide_console()
    for info in listing:
        click.echo(f"arm {', '.join(info['labels'])} ({info['id']}), learner {info['learner']}, "
                   + (f"folder {info['folder']}" if info["folder"] else info["location"]))
        carried = info["carried_from"]
        if carried:
            click.echo(f"  started from version {carried.get('version')} of "
                       f"{carried.get('arm')} when the feature set changed "
                       f"({carried.get('change')})")
        if info["pin_error"]:
            click.echo(f"  warning: {info['pin_error']}")
        elif info["pinned"] is not None and info["serving"] is None:
            click.echo(f"  warning: the pinned version {info['pinned']} does not load: a "
                       f"running service keeps its model, a starting one refuses to start")
        if not info["versions"]:
            start = info["starts_from"]
            if start:
                how = ("takes over" if start["how"] == "take over"
                       else "starts from the newest model of")
                click.echo(f"  no folder yet: the first `serve` or `train` {how} "
                           f"{start['folder']}")
            else:
                click.echo("  no saved version: the service serves version 0, the learner's "
                           "initial model")
            continue
        table = Table()
        table.add_column("Version", justify="right")
        table.add_column("Saved")
        for name in ("Impressions", "Clicks", "Updates", "Skipped", "Cursor"):
            table.add_column(name, justify="right")
        table.add_column("Marks")
        for row in info["versions"]:
            marks = [name for name in ("serving", "pinned", "newest")
                     if info[name] == row["version"]]
            if "error" in row:
                marks.append("refused")
            if "origin" in row:
                marks.append(origin_text(row["origin"]))
            table.add_row(str(row["version"]), format_time(row["saved"]),
                          *(str(row.get(key, "-")) for key in
                            ("impressions", "clicks", "updates", "skipped", "cursor")),
                          ", ".join(marks))
        console.print(table)
        for row in info["versions"]:
            if "error" in row:
                click.echo(f"  version {row['version']} is refused: {row['error']}")
        click.echo(f"  next version: {info['next_version']}")


def origin_text(origin: dict[str, int]) -> str:
    """How a version came to be, in a few words (``RankingModel.origin``)."""
    if "rollback_of" in origin:
        return (f"rollback: weights of v{origin['rollback_of']}, cursor of "
                f"v{origin.get('cursor_of', '?')}")
    if "restart_after" in origin:
        return f"restart after v{origin['restart_after']}"
    return ", ".join(f"{key} {value}" for key, value in origin.items())


def _summary(value: Any) -> str:
    """A state entry in a few words: scalars as they are, arrays by their range and norm."""
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            return f"{value.size} values"
        if value.size <= 4:
            return ", ".join(f"{float(v):.6g}" for v in value.ravel())
        return (f"min {float(value.min()):.6g}, max {float(value.max()):.6g}, "
                f"mean {float(value.mean()):.6g}, norm {float(np.linalg.norm(value)):.6g}")
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _describe(arm: Arm, model: RankingModel) -> dict[str, Any]:
    """What ``models show`` shows of one model, as JSON-ready data (the learned state as the
    model file has it)."""
    from reranker.learners.base import LinearLearner

    learner, names = model.learner, list(model.feature_names)
    weights = learner.weight_parts(names) if isinstance(learner, LinearLearner) else None
    saved = model.to_dict()
    return {"arm": {"label": arm.label, "labels": list(arm.labels), "id": arm.id,
                    **_where(arm)},
            "version": model.version,
            "file": str(arm.models.path(model.version))
            if model.version and _in_folder(arm) else None,
            "saved": arm.models.saved_at(model.version) if model.version else None,
            "learner": saved["learner"], "feature_map": saved["feature_map"],
            "features": names, "normalization": saved["features"]["normalization"],
            "training": saved["training"], "origin": model.origin, "weights": weights,
            "query_weight": saved["query_weight"],
            "evidence_gate": {**saved["evidence_gate"], "confidence":
                              model.evidence_gate.confidence(arm.spec.confidence)},
            "state": saved["state"]}


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the learned state in full) "
              "instead of tables.")
def show(config_path: str | None, label: str | None, version: int | None,
         as_json: bool) -> None:
    """Show VERSION of an arm's model (default: the version being served): its learner and
    parameters, feature map, normalisation, training progress, the query weight, and its
    weights by feature name (learned, the starting ranking's, and their total, which ranks;
    for learners without one weight vector, their learned state)."""
    import json

    import numpy as np
    from rich.table import Table

    from reranker.experiments.report_model import format_time

    arm = _one_arm(config_path, label)
    if version is None:
        version = arm.serving_version()
    model = arm.factory.new() if version == 0 else arm.load_version(version)
    info = _describe(arm, model)
    state = model.learner.get_state()
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    listing = _versions_of(arm)
    marks = [name for name in ("serving", "pinned", "newest") if listing[name] == version]
    click.echo(f"arm {', '.join(arm.labels)} ({arm.id}), " + (
        f"folder {arm.models.location}" if _in_folder(arm) else arm.models.location))
    if version == 0:
        click.echo("version 0: the learner's initial model (never saved)"
                   + (f" [{', '.join(marks)}]" if marks else ""))
    else:
        click.echo(f"version {version}, saved {format_time(info['saved'])}"
                   + (f" [{', '.join(marks)}]" if marks else "") + f": {info['file']}")
    params = ", ".join(f"{k}={v!r}" for k, v in info["learner"]["params"].items())
    click.echo(f"learner {info['learner']['name']}" + (f" ({params})" if params else ""))
    fmap = info["feature_map"]
    click.echo(f"feature map: depth {fmap['depth']}, discount {fmap['discount']}")
    norm = info["normalization"]
    count = norm["state"].get("count")
    click.echo(f"normalisation: {norm['method']}"
               + (f" (statistics of {count} candidates)" if count is not None else ""))
    training = info["training"]
    click.echo("training: " + ", ".join(f"{key} {training[key]}" for key in
                                        ("cursor", "impressions", "clicks", "updates",
                                         "skipped"))
               + f", event store {training['store_id'] or '-'}")
    if info["origin"]:
        click.echo(f"made by {origin_text(info['origin'])}")
    query = model.query_weight
    click.echo(f"query weight {query.weight:g} (a query's click lift on its specialised pages; "
               f"duels since it last moved: doubled won {query.doubled[0]} of "
               f"{sum(query.doubled)}, halved won {query.halved[0]} of {sum(query.halved)})")
    gate = model.evidence_gate
    duels = "; ".join(f"{float(at):.0%} won {won} of {won + lost}"
                      for at, (won, lost) in gate.tallies(arm.spec.confidence).items())
    click.echo(f"evidence gate: a query's clicks judge at "
               f"{gate.confidence(arm.spec.confidence):.0%} confidence (level {gate.level}; "
               f"duels since it last moved: {duels or 'none'})")

    console = wide_console()
    names = info["features"]
    columns: dict[str, list[str]] = {}
    if info["weights"] is not None:
        for key, title in (("learned", "Learned"), ("agreement", "Queries agree"),
                           ("start", "Starting ranking"),
                           ("total", "Total (ranks)")):
            form = ".3f" if key == "agreement" else "+.6g"
            columns[title] = [format(info['weights'][name][key], form) for name in names]
    else:
        for key, value in state.items():
            if isinstance(value, np.ndarray) and value.shape == (len(names),) \
                    and value.dtype.kind in "fiu":
                columns[key] = [f"{float(v):.6g}" for v in value]
    if norm["method"] == "zscore" and count:
        mean = np.asarray(norm["state"]["mean"])
        sd = np.sqrt(np.asarray(norm["state"]["m2"]) / max(count - 1, 1))
        columns["Mean"] = [f"{v:.6g}" for v in mean]
        columns["Deviation"] = [f"{v:.6g}" for v in sd]
    if columns:
        table = Table(title="Weights by feature" if info["weights"] is not None
                      else "Learned state by feature", title_justify="left")
        table.add_column("Feature")
        for title in columns:
            table.add_column(title, justify="right")
        for i, name in enumerate(names):
            table.add_row(name, *(values[i] for values in columns.values()))
        console.print(table)
    table = Table(title="Learned state", title_justify="left")
    table.add_column("Name")
    table.add_column("Shape")
    table.add_column("Value")
    for key, value in state.items():
        if key in ("n_features_in_", "feature_names_in_"):
            continue
        shape = "x".join(map(str, value.shape)) if isinstance(value, np.ndarray) else "-"
        table.add_row(key, shape, _summary(value))
    console.print(table)


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int)
def pin(config_path: str | None, label: str | None, version: int) -> None:
    """Serve VERSION of an arm's model in every service of this config (within a second,
    without a restart) until `reranker models unpin`. Training goes on from the newest
    version meanwhile, so unpinning serves the newest again. Pruning keeps the pinned
    version. A version that does not exist or does not load is refused."""
    arm = _one_arm(config_path, label)
    before = arm.pin(version)
    note = f" (instead of version {before})" if before not in (None, version) else ""
    click.echo(f"pinned version {version} of arm {arm.label!r}{note}: every service of this "
               f"config serves it until `reranker models unpin`")


@models.command()
@config_option
@_arm_option
def unpin(config_path: str | None, label: str | None) -> None:
    """Remove an arm's pin: services serve its newest version again."""
    arm = _one_arm(config_path, label)
    before = arm.unpin()
    if before is None:
        click.echo(f"arm {arm.label!r} was not pinned; services serve its newest version")
    else:
        click.echo(f"unpinned version {before} of arm {arm.label!r}: services serve its newest "
                   f"version again")


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int, required=False)
def rollback(config_path: str | None, label: str | None, version: int | None) -> None:
    """Go back to the weights of VERSION (default: the version before the newest) and learn on
    from there. Saves a new version with the learned state and normalisation of VERSION and
    the training cursor and counters of the newest version: the impressions applied since
    VERSION are dropped from the model and not applied again. Services serve the new version
    within a second (unless a version is pinned)."""
    arm = _one_arm(config_path, label)
    model, target, newest = arm.rollback(version)
    dropped = newest.progress.impressions - target.progress.impressions
    click.echo(f"saved version {model.version} of arm {arm.label!r}: the weights and "
               f"normalisation of version {target.version}, the training cursor of version "
               f"{newest.version} (impression {newest.progress.cursor})")
    click.echo(f"what the {max(dropped, 0)} impressions applied after version {target.version} "
               f"taught is dropped from the model; they are not applied again, and learning "
               f"goes on from version {model.version}")
    pinned = arm.models.pinned()
    if pinned is not None:
        click.echo(f"note: version {pinned} is pinned: services keep serving it until "
                   f"`reranker models unpin`")


@models.command("import")
@config_option
@click.argument("folder", type=click.Path(file_okay=False, path_type=str), required=False)
def import_folder(config_path: str | None, folder: str | None) -> None:
    """Copy a folder of models (default: store.models) into the PostgreSQL database of a
    config with store.model_store: database: every arm's versions (numbers and save times
    kept), its arm.json, its pin and its next version number. Versions already in the
    database are left as they are, so running it twice copies nothing twice. The folder is
    only read; once the services of the config run on the database, it can be archived."""
    from pathlib import Path

    from reranker.core.errors import ConfigError
    from reranker.models.arm_identity import ARM_FILE
    from reranker.models.database_store import ModelDatabase, model_place
    from reranker.models.store import NEXT_VERSION_FILE, PIN_FILE, ModelStore

    config = load_config(config_path)
    place = model_place(config.store)
    if not isinstance(place, ModelDatabase):
        raise ConfigError("store.model_store: `reranker models import` copies a folder into the "
                          "database; set store.model_store: database (with store.type "
                          "postgresql) in the config first")
    root = Path(folder or config.store.models)
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder of models")
    arms = [child for child in sorted(root.iterdir())
            if child.is_dir() and ModelStore(root, child.name).versions()]
    if not arms:
        raise ConfigError(f"{root} holds no arm folder with model versions (model-*.json)")
    for child in arms:
        source, target = ModelStore(root, child.name), place.store(child.name)
        copied = skipped = 0
        for version in source.versions():
            path = source.path(version)
            text = path.read_text(encoding="utf-8")
            if target.import_version(version, text, path.stat().st_mtime):
                copied += 1
            else:
                skipped += 1
        for name in (ARM_FILE, PIN_FILE):
            text = source.read_text(name)
            if text is not None and target.read_text(name) is None:
                target.write_text(name, text)
        mark = source.read_text(NEXT_VERSION_FILE)
        if mark is not None and mark.strip().isdigit():
            target.import_version_mark(int(mark))
        click.echo(f"{child.name}: {copied} versions copied"
                   + (f", {skipped} already in the database" if skipped else "")
                   + f"; next version {target.next_version()}"
                   + (f", version {target.pinned()} pinned" if target.pinned() else ""))
    click.echo(f"the models of {root} are in {place.location}")
    place.close()
