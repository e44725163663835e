"""``reranker simulate``: options and plan file merged, data prepared, runs, reports."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reranker.commands.console import progress_bar
from reranker.core.errors import ConfigError
from reranker.offline.simulation import (
    QUALITY_MEASURES,
    LearnerSpec,
    Settings,
    best_single_feature,
    learner_specs,
    load_plan,
    parse_param,
    prepare,
    settings_dict,
    simulate,
    write_reports,
)
from reranker.offline.users import make_user

DEFAULTS: dict[str, Any] = {
    "click_model": "informational", "impressions": 10_000, "runs": 5, "seed": 0,
    "out": "simulation", "depth": None, "discount": "log2", "gain": "linear",
    "backend_feature": "best", "checkpoints": 40, "workers": None, "library": "fixed",
    "reveal": 0.5, "start": "engine", "click_features": True, "window": 200, "evaluate": None,
    "reward": "none", "specialize": True, "confidence": 0.95, "takeover": False,
    "shrink": True, "query_balance": True,
}
SHOWN = ("offline_ndcg@10", "online_ndcg@10", "utility_regret")


def merge_options(options: dict[str, Any],
                  convert: Callable[[str, Any], Any] | None = None) -> dict[str, Any]:
    """Defaults, then the plan file (``--config``), then the options given. ``convert``
    checks a plan file's value as the command-line option of that name would (its type,
    range or choices), raising ``ValueError`` with the reason."""
    path = options.get("config_path")
    plan = load_plan(path) if path else {}
    for key, value in plan.items():
        if convert is not None and key in DEFAULTS and value is not None \
                and not isinstance(value, dict):  # (evaluate may be {name, params})
            try:
                plan[key] = convert(key, value)
            except ValueError as exc:
                raise ConfigError(f"{path}: {key}: {exc}") from None
    if isinstance(plan.get("learners"), str):
        plan["learners"] = [plan["learners"]]
    merged = {**DEFAULTS, **{k: v for k, v in plan.items() if k not in ("learners", "params")}}
    for key in DEFAULTS:
        if options.get(key) is not None:
            merged[key] = options[key]
    merged["train"] = list(options["train"]) or plan.get("train") or []
    merged["test"] = options.get("test") or plan.get("test")
    merged["learners"] = list(options["learners"]) or plan.get("learners") or []
    params: dict[str, dict] = {k: dict(v or {}) for k, v in (plan.get("params") or {}).items()}
    for text in options.get("params") or ():
        learner, key, value = parse_param(text)
        params.setdefault(learner, {})[key] = value
    merged["params"] = params
    if not merged["train"]:
        raise ConfigError("simulate needs --train FILE [FILE ...] (or 'train' in --config)")
    if not merged["test"]:
        raise ConfigError("simulate needs --test FILE (or 'test' in --config)")
    if not merged["learners"]:
        raise ConfigError("simulate needs at least one --learner NAME (or 'learners' in "
                          "--config)")
    return merged


def run_simulate(options: dict[str, Any], console: Console | None = None,
                 convert: Callable[[str, Any], Any] | None = None) -> dict:
    console = console or Console(width=None if Console().is_terminal else 120)
    plan = merge_options(options, convert)
    check_learners(plan["learners"], plan["params"], plan["evaluate"])  # (before the data)
    try:
        make_user(str(plan["click_model"]), 5)
    except ValueError as exc:
        raise ConfigError(f"--click-model: {exc}") from None
    started = time.perf_counter()
    with console.status("loading and normalising the data"):
        data = prepare(plan["train"], plan["test"], plan["gain"])
    feature = plan["backend_feature"]
    if feature == "best":
        feature = best_single_feature(data)
    else:
        feature = str(feature)
        feature = feature if feature.startswith("f") else f"f{feature}"
        if feature not in data.feature_names:
            raise ConfigError(f"--backend-feature {plan['backend_feature']!r}: no such feature "
                              f"after dropping constant ones (features: "
                              f"{', '.join(data.feature_names)})")
    specs = learner_specs(plan["learners"], plan["params"], feature)
    if plan["depth"] is None:  # the coactive users judge the top 5; clicks, the page of 10
        coactive = plan["click_model"].split(":")[0] in ("strict_alpha", "expected_alpha",
                                                          "noisy")
        plan["depth"] = 5 if coactive else 10
    try:
        settings = Settings(impressions=plan["impressions"], runs=plan["runs"], seed=plan["seed"],
                            click_model=plan["click_model"], depth=plan["depth"],
                            discount=plan["discount"], gain=plan["gain"],
                            checkpoints=plan["checkpoints"], library=plan["library"],
                            reveal=plan["reveal"], start=plan["start"],
                            click_features=bool(plan["click_features"]),
                            specialize=bool(plan["specialize"]),
                            confidence=float(plan["confidence"]),
                            shrink=bool(plan["shrink"]),
                            query_balance=bool(plan["query_balance"]),
                            takeover=bool(plan["takeover"]),
                            window=plan["window"], backend_feature=feature,
                            evaluate=_target(plan["evaluate"], plan["params"]),
                            reward=plan["reward"])
    except TypeError as exc:  # pragma: no cover -- keys are fixed above
        raise ConfigError(str(exc)) from exc
    if settings.library not in ("fixed", "growing"):
        raise ConfigError(f"library must be 'fixed' or 'growing', got {settings.library!r}")
    if not 0 < settings.reveal <= 1:
        raise ConfigError(f"reveal must be in (0, 1], got {settings.reveal!r}")
    if settings.reward not in ("none", "dcg"):
        raise ConfigError(f"reward must be 'none' or 'dcg', got {settings.reward!r}")
    if settings.start not in ("engine", "zero"):
        raise ConfigError(f"start must be 'engine' or 'zero', got {settings.start!r}")
    if not isinstance(settings.window, int) or settings.window < 1:
        raise ConfigError(f"window must be a positive integer, got {settings.window!r}")
    specialised = ", queries specialised by their own clicks" \
        if settings.click_features and settings.specialize else ""
    console.print(f"{len(data.train)} training queries, {len(data.test)} test queries, "
                  f"{len(data.feature_names)} features (constant ones dropped), "
                  f"{data.grades}-grade labels; backend order = {feature}; {settings.library} "
                  f"library; learners start from "
                  f"{'the backend order' if settings.start == 'engine' else 'w = 0'}, click "
                  f"features {'on' if settings.click_features else 'off'}"
                  f"{specialised}. Users: "
                  f"{settings.click_model} (simulated).")
    total = settings.impressions * settings.runs * len(specs)
    try:
        with progress_bar("simulating impressions", total, console) as advance:
            result = simulate(data, specs, settings, plan["workers"], advance)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    out = Path(plan["out"])
    meta = {**settings_dict(settings), "train": plan["train"], "test": plan["test"],
            "backend_feature": feature, "features": data.feature_names,
            "learners": [s.key for s in specs], "wall_seconds": time.perf_counter() - started}
    document = write_reports(result, out, meta)
    _print_summary(console, document["learners"], settings.impressions, settings.runs)
    if settings.evaluate is not None:
        _print_off_policy(console, document["learners"], settings.evaluate.key)
    if settings.takeover:
        _print_takeover(console, document["learners"], settings.confidence)
    console.print(f"Wrote {out / 'results.csv'}, {out / 'windows.csv'}, "
                  f"{out / 'summary.json'} and {len(QUALITY_MEASURES) + 1} plots in "
                  f"{out}.")
    return document


def check_learners(entries: list[Any], params: dict[str, dict], target: Any = None) -> None:
    """Every learner named (and the ``evaluate`` target) exists and takes its parameters,
    and every learner given parameters by name is simulated or the target: said before the
    data are read."""
    from reranker.core.plugins import get_plugin_manager, learner_class

    specs = learner_specs(entries, params, None)
    if target is not None:
        specs.append(_target(target, params))
    pm = get_plugin_manager()
    for spec in specs:
        cls = learner_class(pm, spec.name, "--learner")
        try:
            cls(**{k: v for k, v in spec.params.items() if k != "feature"}).validate_params()
        except ValueError as exc:
            raise ConfigError(f"--param: {exc}") from None
    named = {entry for entry in entries if isinstance(entry, str)}
    if isinstance(target, str):
        named.add(target)
    unused = sorted(set(params) - named)
    if unused:
        raise ConfigError(f"--param: parameters for learner {unused[0]!r}, which is not "
                          f"simulated (learners: {', '.join(sorted(named)) or 'none by name'})")


def _target(entry: Any, params: dict[str, dict]) -> LearnerSpec | None:
    """The ``evaluate`` target: a learner name (its ``--param`` values apply) or a mapping
    with ``name`` and ``params``."""
    if entry is None:
        return None
    specs = learner_specs([entry], params, None)
    return specs[0]


def _print_takeover(console: Console, summary: dict, confidence: float) -> None:
    """Per learner and run: when its pages took over from the engine's order, and the duels
    behind the decision."""
    table = Table(title=f"Takeover: duels on queries without clicks of their own, won and "
                        f"lost against the engine's order (takes over at p <= "
                        f"{1 - confidence:.3g})")
    for column in ("learner", "run", "won", "lost", "p-value", "took over at"):
        table.add_column(column, justify="left" if column == "learner" else "right")
    for learner, entry in summary.items():
        for run, record in enumerate(entry.get("takeover") or []):
            p_value = min(1.0, math.exp(-record["peak"]))
            table.add_row(learner, str(run), str(record["wins"]), str(record["losses"]),
                          f"{p_value:.3g}",
                          "never" if record["at"] is None else f"{record['at']:,}")
    console.print(table)


def _print_off_policy(console: Console, summary: dict, target: str) -> None:
    table = Table(title=f"Off-policy check: {target}'s clicks@10 estimated from each "
                        f"learner's logged pages, against its true value on the same queries "
                        f"(mean over runs; runs whose 95% interval held the truth)")
    table.add_column("logging learner", no_wrap=True)
    table.add_column("true", justify="right")
    for name in ("IPS", "SNIPS", "DR"):
        table.add_column(name, justify="right")
    table.add_column("effective n", justify="right")
    for learner, entry in summary.items():
        check = entry.get("off_policy")
        if check is None:
            continue
        true = check["true"]["mean"]
        cells = [f"{true:.3f}" if true is not None else "-"]
        if "refused" in check:
            cells += ["refused"] * 3 + ["-"]
        else:
            for name in ("IPS", "SNIPS", "DR"):
                e = check[name]
                cells.append(f"{e['mean']:.3f} ({e['covered']}/{check['runs']})")
            cells.append(f"{check['IPS']['effective_sample_size']['mean']:,.0f}")
        table.add_row(learner, *cells)
    console.print(table)
    refused = {learner: entry["off_policy"]["refused"] for learner, entry in summary.items()
               if "refused" in entry.get("off_policy", {})}
    for learner, why in refused.items():
        console.print(f"{learner}: {why}")


def _print_summary(console: Console, summary: dict, impressions: int, runs: int) -> None:
    # (one run has no standard error: its value alone is shown)
    title = "mean ± standard error over runs" if runs > 1 else "one run: no spread"
    table = Table(title=f"After {impressions} impressions ({title})")

    def spread(value: dict) -> str:
        return f" ± {value['stderr']:.3f}" if runs > 1 else ""

    table.add_column("learner", no_wrap=True)
    for metric in SHOWN:
        table.add_column(metric, justify="right")
    table.add_column("worst window", justify="right")
    table.add_column("worst gap to backend order", justify="right")
    table.add_column("impressions/s", justify="right")
    table.add_column("query weight by run", justify="right")
    table.add_column("evidence gate by run", justify="right")
    for learner, entry in summary.items():
        cells = []
        for metric in (*SHOWN, "worst_window", "worst_window_gap", "impressions_per_second"):
            value = entry[metric]
            if value is None or value["mean"] is None:
                cells.append("-")
            elif value["mean"] == "inf":
                cells.append("∞")
            elif metric == "impressions_per_second":
                cells.append(f"{value['mean']:,.0f}")
            elif metric == "worst_window":
                cells.append(f"{value['mean']:.3f} (t={value['t']:,})")
            elif metric == "worst_window_gap":
                cells.append(f"{value['mean']:+.3f}{spread(value)} (t={value['t']:,})")
            else:
                cells.append(f"{value['mean']:.3f}{spread(value)}")
        weight = entry.get("query_weight")  # (learners whose queries are specialised)
        cells.append("-" if weight is None else ", ".join(f"{w:g}" for w in weight["runs"]))
        gate = entry.get("evidence_gate")
        cells.append("-" if gate is None else ", ".join(f"{c:.2f}" for c in gate["runs"]))
        table.add_row(learner, *cells)
    console.print(table)
