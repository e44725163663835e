"""An experiment at run time: which arm (or arms) serve a search, its state (promotion, held
arms), and its guard (docs/algorithms.md, "Comparing learners").

A search is served, in order of precedence:

* by the promoted arm alone, once an arm is promoted (``reranker promote`` or the guard);
* by the control arm alone outside the experiment's time window, or when the search falls
  outside ``experiment.share``;
* otherwise, in ``split`` mode, by one arm chosen by a sticky hash of the assignment key
  (``user_id``, else ``session_id``: the same user always sees the same arm), and in
  ``interleave`` and ``multileave`` modes by a team-draft mix of every arm not held.

The state lives in the event store, so every process serving the configuration, and
``reranker promote`` run from a shell, share it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reranker.core.errors import ConfigError, NotFoundError, RerankerError, StoreError
from reranker.experiments.outcomes import Tally
from reranker.experiments.report_model import with_report
from reranker.experiments.spec import ExperimentSpec
from reranker.stores import EventStore, open_event_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """Who serves one search: one arm, or a mix of several; and whether the search counts
    in the experiment."""

    labels: tuple[str, ...]
    mixed: bool
    counted: bool


def _unit_hash(*parts: str) -> float:
    """A stable number in [0, 1) from ``parts`` (the same user always lands alike)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


@dataclass
class _StateCache:
    read_at: float = -1e18
    state: dict = field(default_factory=dict)


class Experiment:
    """The running experiment of one configuration."""

    #: Seconds a read of the shared state (promotion, held arms) is reused.
    STATE_REFRESH = 1.0
    #: Pages with a click an arm takes part in, without its model learning from any, before
    #: the results say it is not learning.
    NOT_LEARNING_AFTER = 20
    #: Open pages the provisional results read at most (the newest), and the seconds they
    #: are reused for.
    PROVISIONAL_LIMIT = 20_000
    PROVISIONAL_REFRESH = 2.0
    #: Promotions, holds and what held them back kept in the state's history (the newest).
    HISTORY_LIMIT = 100
    #: Closed impressions the traffic count reads per store call.
    TRAFFIC_BATCH = 50_000

    def __init__(self, spec: ExperimentSpec, events: EventStore,
                 clock: Callable[[], float] = time.time):
        self.spec = spec
        self.events = events
        self.clock = clock
        self._cache = _StateCache()
        self._tally = Tally(spec)
        self._tally_lock = threading.Lock()
        self._provisional: tuple[float, dict[str, Any] | None] = (-1e18, None)
        # (closed_seq read up to, since when, first pages closed, those in the experiment)
        self._traffic: tuple[int, float, int, int] | None = None

    # -- state --------------------------------------------------------------------------------

    def state(self, fresh: bool = False) -> dict[str, Any]:
        """``{"promoted": label or None, "held": {label: why}, ...}``, shared by every
        process through the event store."""
        now = time.monotonic()
        if fresh or now - self._cache.read_at > self.STATE_REFRESH:
            self._cache = _StateCache(now, self.events.experiment_state(self.spec.name))
        return self._cache.state

    def promote(self, label: str, reason: str) -> dict[str, Any]:
        """Make ``label`` the sole arm that serves (its model keeps learning; the others'
        models stay in their folders); an arm held before is held no more."""
        self._check_label(label)
        impressions = self.results(arms=False)[0]

        def change(state: dict) -> dict:
            held = {k: v for k, v in state.get("held", {}).items() if k != label}
            return self._noted({**state, "promoted": label, "promoted_at": self.clock(),
                                "promoted_because": reason, "held": held},
                               "promoted", label, reason, impressions)

        return self._update(change)

    def hold(self, label: str, reason: str) -> dict[str, Any]:
        """Stop serving ``label`` in this experiment (it lost to the control)."""
        self._check_label(label)
        impressions = self.results(arms=False)[0]

        def change(state: dict) -> dict:
            held = dict(state.get("held", {}))
            held[label] = {"at": self.clock(), "because": reason}
            return self._noted({**state, "held": held}, "held", label, reason, impressions)

        return self._update(change)

    def _noted(self, state: dict, action: str, label: str, because: str,
               impressions: int) -> dict:
        """``state`` with one more entry in its history: when the guard or an operator
        promoted or held an arm, held one back or (dry run) would have, why, and after how
        many closed pages."""
        entry = {"at": self.clock(), "action": action, "arm": label, "because": because,
                 "impressions": impressions}
        history = [*(state.get("history") or []), entry][-self.HISTORY_LIMIT:]
        return {**state, "history": history}

    def _update(self, change: Callable[[dict], dict]) -> dict[str, Any]:
        state = self.events.update_experiment_state(self.spec.name, change, self.clock())
        self._cache = _StateCache(time.monotonic(), state)
        return state

    def start_arms(self, arms) -> None:
        """Record where each arm (:class:`reranker.models.arms.Arm`) starts in this experiment,
        once,
        when the experiment first runs with it: its model version and what that model had
        learned. With ``experiment.even_start``, an arm whose model learned before starts
        again from its initial model (:meth:`reranker.models.arms.Arm.restart`); without it, the
        results name such an arm. Processes that start together agree through the event
        store: the first to claim an arm records and restarts it."""
        started = self.state(fresh=True).get("arms_at_start") or {}
        new = [arm for arm in arms if any(label not in started for label in arm.labels)]
        if not new:
            return
        token, now = uuid.uuid4().hex, self.clock()
        records = {}
        for arm in new:
            model = arm.model
            progress = model.progress
            learned = model.version > 0 or progress.impressions > 0
            record = {"at": now, "version": model.version, "impressions": progress.impressions,
                      "updates": progress.updates, "clicks": progress.clicks,
                      "learned_before": {"version": model.version,
                                         "impressions": progress.impressions,
                                         "updates": progress.updates} if learned else None,
                      "claimed_by": token}
            records.update({label: record for label in arm.labels})

        start_seq = self.events.last_closed_seq()

        def claim(state: dict) -> dict:
            at_start = dict(state.get("arms_at_start") or {})
            for label, record in records.items():
                at_start.setdefault(label, record)
            return {"started_at": now, "start_seq": start_seq, **state,
                    "arms_at_start": at_start}

        at_start = self._update(claim)["arms_at_start"]
        if not self.spec.even_start:
            return
        restarted = {}
        for arm in new:
            record = at_start.get(arm.labels[0], {})
            if record.get("claimed_by") != token or not record.get("learned_before"):
                continue
            version = arm.restart()
            if version is None:
                continue
            log.warning("experiment %s: arm %s (%s) starts from its initial model as version "
                        "%d (experiment.even_start); it had learned from %d impressions up to "
                        "version %d", self.spec.name, "/".join(arm.labels), arm.id, version,
                        record["learned_before"]["impressions"],
                        record["learned_before"]["version"])
            restarted.update({label: version for label in arm.labels})
        if restarted:
            def note(state: dict) -> dict:
                at_start = dict(state.get("arms_at_start") or {})
                for label, version in restarted.items():
                    at_start[label] = {**at_start[label], "version": version,
                                       "impressions": 0, "updates": 0, "clicks": 0,
                                       "restarted": True}
                return {**state, "arms_at_start": at_start}

            self._update(note)

    def learning(self, label: str, info: dict[str, Any], summary: dict[str, Any],
                 start: dict[str, Any] | None) -> dict[str, Any]:
        """What an arm learned in this experiment, and the notes a reader needs: that it
        learned before it (without ``even_start``), that it started again, or that it has
        not learned from the pages it took part in."""
        out: dict[str, Any] = {}
        progress = info.get("progress")
        start = start or {}
        if progress is not None:
            out["learning"] = {key: max(0, int(progress[key]) - int(start.get(key) or 0))
                               for key in ("impressions", "updates", "clicks")}
        before = start.get("learned_before")
        if start.get("restarted"):
            out["started"] = (f"from its initial model as version {start['version']} "
                              f"(experiment.even_start), after learning from "
                              f"{before['impressions']} impressions up to version "
                              f"{before['version']}")
        elif before:
            out["learned_before"] = before
            out["started"] = (f"at version {before['version']}, after learning from "
                              f"{before['impressions']} impressions before the experiment "
                              f"(experiment.even_start: true starts every arm afresh)")
        clicked = summary.get("clicked_pages", 0)
        if info.get("learns", True) and not info.get("pinned") and "learning" in out \
                and out["learning"]["updates"] == 0 and clicked >= self.NOT_LEARNING_AFTER:
            out["not_learning"] = (
                f"arm {label!r} ({info.get('learner')}) took part in {clicked} pages with a "
                f"click and its model learned from none of them (applied "
                f"{out['learning']['impressions']}); check that the trainer runs and that "
                f"its learner learns from {'mixed' if self.spec.mixed else 'its own'} pages")
        return out

    def _check_label(self, label: str) -> None:
        if label not in self.spec.labels:
            raise NotFoundError(f"experiment {self.spec.name!r} has no arm {label!r} (arms: "
                                f"{', '.join(self.spec.labels)})")

    # -- who serves a search --------------------------------------------------------------------

    def decide(self, user_id: str | None, session_id: str | None,
               rng: np.random.Generator) -> Decision:
        """The arm or arms that serve one search (module docstring)."""
        spec = self.spec
        state = self.state()
        promoted = state.get("promoted")
        if promoted in spec.labels:
            return Decision((promoted,), False, False)
        now = self.clock()
        if (spec.start is not None and now < spec.start) or \
                (spec.stop is not None and now >= spec.stop):
            return Decision((spec.control,), False, False)
        values = {"user_id": user_id, "session_id": session_id}
        key = next((values[k] for k in spec.assign_by if values.get(k)), None)
        if spec.share < 1.0:
            u = _unit_hash(spec.name, "share", key) if key else float(rng.random())
            if u >= spec.share:
                return Decision((spec.control,), False, False)
        held = state.get("held", {})
        active = tuple(label for label in spec.labels if label not in held)
        if len(active) < 2:
            return Decision(active or (spec.control,), False, False)
        if spec.mixed:
            return Decision(active, True, True)
        weights = np.array([spec.shares[label] for label in active])
        u = _unit_hash(spec.name, "arm", key) if key else float(rng.random())
        index = int(np.searchsorted(np.cumsum(weights) / weights.sum(), u, side="right"))
        return Decision((active[min(index, len(active) - 1)],), False, True)

    # -- results ----------------------------------------------------------------------------

    def results(self, arms: bool = True
                ) -> tuple[int, list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """The closed impressions of the experiment so far (read incrementally from the
        event store), the pairs' summaries and, with ``arms``, the arms'
        (:class:`.outcomes.Tally`)."""
        with self._tally_lock:
            tally = self._tally
            tally.read(self.events)
            return (tally.impressions, tally.pair_summaries(),
                    {label: tally.arm_summary(label) for label in self.spec.labels}
                    if arms else {})

    def provisional(self) -> dict[str, Any] | None:
        """The results with the pages still open for clicks added (their clicks so far; more
        may come until their feedback window closes), or None when none is open: ``pending``
        open pages, and the pairs and arms as :meth:`results` gives them."""
        now = time.monotonic()
        read_at, cached = self._provisional
        if now - read_at < self.PROVISIONAL_REFRESH:
            return cached
        rows = self.events.open_experiment_rows(self.spec.name, self.PROVISIONAL_LIMIT)
        result = None
        if rows:
            with self._tally_lock:
                self._tally.read(self.events)
                tally = copy.deepcopy(self._tally)
            for arm, teams, n_shown, positions in rows:
                tally.add(arm, json.loads(teams) if teams else [], n_shown, positions)
            result = {"pending": len(rows), "impressions": tally.impressions,
                      "pairs": tally.pair_summaries(),
                      "arms": {label: {key: value for key, value in
                                       tally.arm_summary(label).items() if key != "curve"}
                               for label in self.spec.labels}}
        self._provisional = (now, result)
        return result

    def traffic(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """The searches (first pages) closed since the experiment started, and how many of
        them it counted: the rest the control served alone (outside ``experiment.share`` or
        the time window), the promoted arm after a promotion, or the engine's order when an
        arm's ranking failed. None before the experiment started, or when the store cannot
        count (read incrementally from the event store, as the results are)."""
        since = state.get("started_at")
        if not isinstance(since, int | float):
            return None
        with self._tally_lock:
            if self._traffic is None or self._traffic[1] != since:
                self._traffic = (int(state.get("start_seq") or 0), since, 0, 0)
            cursor, _, searches, counted = self._traffic
            while True:
                read = self.events.closed_first_pages(self.spec.name, cursor, since,
                                                      self.TRAFFIC_BATCH)
                if read is None:
                    return None
                last, pages, in_experiment = read
                searches, counted = searches + pages, counted + in_experiment
                done = last == cursor or last - cursor < self.TRAFFIC_BATCH
                cursor = last
                if done:
                    break
            self._traffic = (cursor, since, searches, counted)
        return {"searches": searches, "in_experiment": counted,
                "outside": searches - counted,
                "share": counted / searches if searches else None,
                "configured_share": self.spec.share}

    def status(self, arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The document ``GET /experiments`` answers; ``arms`` gives each label's id,
        learner, parameters and model version."""
        spec = self.spec
        state = self.state()
        impressions, pairs, summaries = self.results()
        now = self.clock()
        promoted = self.promoted(state)
        if promoted:
            status = "promoted"
        elif spec.start is not None and now < spec.start:
            status = "not started"
        elif spec.stop is not None and now >= spec.stop:
            status = "stopped"
        else:
            status = "running"
        held = state.get("held", {})
        at_start = state.get("arms_at_start") or {}
        document_arms = {}
        for label in spec.labels:
            role = "promoted" if promoted == label else "held" if label in held else "serving"
            if promoted and role == "serving":
                role = "stopped"
            elif status in ("not started", "stopped") and label != spec.control:
                role = "waiting" if status == "not started" else "stopped"
            info = arms.get(label, {})
            document_arms[label] = {**{k: v for k, v in info.items() if k != "progress"},
                                    **summaries[label], "status": role,
                                    "control": label == spec.control,
                                    **self.learning(label, info, summaries[label],
                                                    at_start.get(label))}
        document = {"experiment": spec.name, "mode": spec.mode, "status": status,
                    "alpha": spec.alpha,
                    "test": "mixture sequential probability ratio test (always valid), "
                            f"Beta({spec.mixture:g}, {spec.mixture:g}) mixture",
                    "impressions": impressions, "updated": now,
                    "even_start": spec.even_start,
                    "promoted": promoted, "held": sorted(held),
                    "why": {**({promoted: state.get("promoted_because")} if promoted else {}),
                            **{label: (why.get("because") if isinstance(why, dict) else why)
                               for label, why in held.items()}},
                    "arms": document_arms, "pairs": pairs,
                    "traffic": self.traffic(state),
                    "history": list(state.get("history") or []),
                    "guard": {"promote": spec.promote, "min_impressions": spec.min_impressions,
                              "min_duration": spec.min_duration,
                              "guardrails": dict(spec.guardrails), "dry_run": spec.dry_run,
                              "started_at": state.get("started_at"),
                              "promoted_at": state.get("promoted_at") if promoted else None,
                              "held_back": state.get("held_back"),
                              "would": state.get("would")}}
        provisional = self.provisional()
        document["pending"] = provisional["pending"] if provisional else 0
        if provisional:
            document["provisional"] = provisional
        # what a reader must not miss about the arms, in words
        document["notes"] = [
            *([{"arm": None, "kind": "info",
                "text": f"provisional: {provisional['pending']} pages are still open for "
                        f"clicks (trainer.feedback_window); the results count the "
                        f"{impressions} closed pages, and 'provisional' adds the open ones "
                        f"with the clicks they have so far"}] if provisional else []),
            *([{"arm": promoted, "kind": "info",
                "text": f"{promoted} was promoted: {state.get('promoted_because')}"}]
              if promoted else []),
            *([{"arm": state["held_back"].get("arm"), "kind": "info",
                "text": f"held back from promotion: {state['held_back'].get('because')}"}]
              if not promoted and isinstance(state.get("held_back"), dict) else []),
            *([{"arm": state["would"].get("arm"), "kind": "info",
                "text": f"dry run: the guard would {state['would'].get('action')} "
                        f"{state['would'].get('arm')}: {state['would'].get('because')}"}]
              if spec.dry_run and isinstance(state.get("would"), dict) else []),
            *({"arm": label, "kind": "warning", "text": f"not learning: {arm['not_learning']}"}
              for label, arm in document_arms.items() if arm.get("not_learning")),
            *({"arm": label, "kind": "warning" if "learned_before" in arm else "info",
               "text": f"{label} started {arm['started']}"}
              for label, arm in document_arms.items() if arm.get("started"))]
        if state.get("promoted") and not promoted:
            document["note"] = (f"arm {state['promoted']!r} was promoted but is no longer one "
                                f"of the arms: the experiment runs again")
        # the report as the dashboard lays it out: every number, verdict and sentence
        # computed here, once, for every reader of the document
        return with_report(document)

    def promoted(self, state: dict[str, Any] | None = None) -> str | None:
        """The promoted arm, if it is still one of the configured arms (a promotion of an arm
        removed from the configuration since is void: the experiment runs again)."""
        label = (self.state() if state is None else state).get("promoted")
        return label if label in self.spec.labels else None

    def guard(self) -> str | None:
        """Guarded rollout (``promote: auto``): promote an arm that beats the control
        significantly, once the experiment has run ``min_impressions`` closed pages and
        ``min_duration`` seconds and the arm keeps every guardrail against the control;
        hold one that loses to it significantly. With ``dry_run`` it only records and logs
        what it would do. Returns what it did (or would do, or what held a winner back)."""
        spec = self.spec
        if spec.promote != "auto":
            return None
        state = self.state(fresh=True)
        if self.promoted(state):
            return None
        impressions, pairs, _ = self.results(arms=False)
        winners = []
        for pair in pairs:
            if spec.control not in pair["arms"] or not pair["significant"]:
                continue
            other = pair["arms"][1] if pair["arms"][0] == spec.control else pair["arms"][0]
            rate = pair["win_rate"] if pair["arms"][0] == other else 1.0 - pair["win_rate"]
            numbers = (f"win rate {rate:.3f}, always-valid p {pair['always_valid_p']:.2g}, "
                       f"after {impressions} closed pages")
            if pair["winner"] == spec.control:
                if other not in state.get("held", {}) and \
                        (state.get("would") or {}).get("arm") != other:
                    return self._decide("hold", other, f"lost to {spec.control} ({numbers})",
                                        impressions)
            else:
                winners.append((rate, other, numbers))
        if not winners:
            return None
        rate, label, numbers = max(winners)
        blocked = self.held_back(label, impressions, state)
        if blocked:
            if (state.get("held_back") or {}).get("because") != blocked:
                self._update(lambda s: self._noted(
                    {**s, "held_back": {"arm": label, "because": blocked, "at": self.clock()}},
                    "held back", label, f"{blocked}; it beat {spec.control} ({numbers})",
                    impressions))
                return f"held back {label}: {blocked}"
            return None
        if (state.get("would") or {}).get("arm") == label:
            return None
        return self._decide("promote", label, f"beat {spec.control} ({numbers})", impressions)

    def _decide(self, action: str, label: str, reason: str, impressions: int) -> str:
        """Promote or hold ``label``, or, with ``dry_run``, record that it would."""
        if self.spec.dry_run:
            self._update(lambda s: self._noted(
                {**s, "would": {"action": action, "arm": label, "because": reason,
                                "at": self.clock()}},
                f"would {action}", label, reason, impressions))
            return f"would {action} {label} (experiment.dry_run): {reason}"
        if action == "hold":
            self.hold(label, reason)
            return f"held {label}"
        self.promote(label, reason)
        return f"promoted {label}"

    def held_back(self, label: str, impressions: int, state: dict[str, Any]) -> str | None:
        """Why the guard may not promote ``label`` yet, which beat the control: too few
        closed pages, too short a run, or a guardrail it breaks; None when nothing does."""
        spec = self.spec
        if impressions < spec.min_impressions:
            return (f"{impressions} closed pages of the {spec.min_impressions} "
                    f"experiment.min_impressions asks")
        started = state.get("started_at")
        ran = self.clock() - started if isinstance(started, int | float) else 0.0
        if ran < spec.min_duration:
            return (f"the experiment has run {ran:.0f} s of the {spec.min_duration:g} s "
                    f"experiment.min_duration asks")
        with self._tally_lock:
            for metric, margin in spec.guardrails:
                difference = self._tally.difference(label, spec.control, metric)
                if difference is None:
                    continue
                value, low, high = difference
                name = "abandonment" if metric == "abandonment" else f"clicks@{spec.clicks_at}"
                if metric == "abandonment" and high > margin:
                    return (f"guardrail {name}: {label}'s is {value:+.3f} against "
                            f"{spec.control}'s (95% interval up to {high:+.3f}), more than "
                            f"the margin {margin:g}")
                if metric == "clicks_at_k" and low < -margin:
                    return (f"guardrail {name}: {label}'s is {value:+.3f} against "
                            f"{spec.control}'s (95% interval down to {low:+.3f}), below "
                            f"the margin -{margin:g}")
        return None


def experiment_from_config(config, events: EventStore) -> Experiment | None:
    spec = ExperimentSpec.from_config(config)
    return None if spec is None else Experiment(spec, events)


def require_experiment(config, events: EventStore) -> Experiment:
    experiment = experiment_from_config(config, events)
    if experiment is None:
        where = f"{config.source}" if config.source else "the configuration"
        raise ConfigError(f"{where} has no experiment (experiment.mode is null)")
    return experiment


def offline_status(config, pm) -> dict[str, Any]:
    """The experiment's results read from the event store and model folders, without a
    running service (``reranker report``)."""
    from reranker.models.arms import arms_from_config

    events = open_event_store(config, pm, existing=True)
    try:
        experiment = require_experiment(config, events)
        arms = {}
        for arm in arms_from_config(config, pm):
            # (what a service serves: the pinned version, else the newest good one)
            try:
                pinned = arm.models.pinned()
                version = arm.serving_version()
            except StoreError:  # (a pin file that holds no version number)
                pinned, version = None, max(arm.models.versions(), default=0)
            try:
                progress = arm.load().progress.to_dict()
            except RerankerError:  # (the report says what it can without it)
                progress = None
            for label in arm.labels:
                arms[label] = {"id": arm.id, "learner": arm.spec.learner,
                               "params": dict(arm.spec.params),
                               "model_version": version if version is not None else pinned,
                               "pinned": pinned,
                               "learns": not arm.factory.learner_cls.capabilities.floor,
                               "progress": progress}
        status = experiment.status(arms)
        if not status["impressions"]:  # (a renamed experiment starts with none)
            others = [name for name in events.experiment_names() if name != experiment.spec.name]
            if others:
                status["note"] = (f"no page of experiment {experiment.spec.name!r} is in the "
                                  f"event store, which holds pages of {', '.join(others)}: is "
                                  f"experiment.name the one the service ran?")
        return status
    finally:
        events.close()
