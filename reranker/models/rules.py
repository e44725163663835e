"""Query rules: merchandising on top of the learned ranking, kept with the models.

A rule names a query (``is``: the same words; ``contains``: its words appear together in a
search's; ``starts_with``: a search starts with them, all compared as the click counts
compare queries, :func:`reranker.features.clicks.query_key`) and what to do for it: *pin* a
document at a rank, *hide* a document. Every arm honours them alike, after it ranked:

* a hidden document is taken out of the candidates before features are built, so the page is
  an ordinary page of the others, learned from as any;
* a pinned document that is among the candidates is moved to its rank (1 is the top of the
  first page); one that the engine did not retrieve for the search is not shown, and
  ``/explain`` says so. A page that a pin changed is logged as such and learned from by no
  learner (:data:`reranker.stores.events.NOT_LEARNED`): its order is the site's choice, and
  a click on a pinned result says nothing about the learner's ranking.

When several rules match a search, ``is`` rules come before the others and older rules
before newer: a document pinned twice takes the first rule's rank, and two pins of the same
rank take it in that order, the second on the rank below.

The rules live in ``<store.models>/rules.json``, written atomically under a lock by
``reranker rules``; every serving process reads the file again within a second of a change,
and keeps the last good rules (logging why) when a change cannot be read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reranker.core.errors import BadRequestError, ModelStoreError, NotFoundError, shorten
from reranker.features.clicks import query_key
from reranker.models.database_store import ModelDatabase
from reranker.models.store import ModelStore

log = logging.getLogger(__name__)

#: The rules' file in the model folder, and the lock its writers hold.
RULES_FILE, RULES_LOCK = "rules.json", ".rules.lock"
#: The format of the rules' file.
RULES_FORMAT = 1
#: How a rule's query matches a search's.
MATCHES = ("is", "contains", "starts_with")
#: Seconds a serving process goes without looking at the file for a change.
RELOAD_SECONDS = 1.0
#: The context key under which a page logs the rules that matched its search.
RULES = "rules"


@dataclass(frozen=True)
class Rule:
    """One rule: for searches ``match``-ing ``query``, pin documents at ranks and hide
    others."""

    id: str
    query: str
    match: str = "is"
    #: ``(doc_id, rank)`` pairs, ranks counted from 1.
    pins: tuple[tuple[str, int], ...] = ()
    hide: tuple[str, ...] = ()
    note: str = ""
    created: float = 0.0

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(query_key(self.query).split())

    def matches(self, words: Sequence[str]) -> bool:
        """Whether a search of ``words`` (its normalised words) matches."""
        mine, n = self.words, len(self.words)
        if self.match == "is":
            return tuple(words) == mine
        if self.match == "starts_with":
            return tuple(words[:n]) == mine
        return any(tuple(words[i:i + n]) == mine for i in range(len(words) - n + 1))

    def searches(self) -> str:
        """Which searches the rule is for, in words."""
        how = {"is": "of", "contains": "containing", "starts_with": "starting with"}
        return f"searches {how.get(self.match, self.match)} {self.query!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "query": self.query, "match": self.match,
                "pin": [{"id": doc_id, "rank": rank} for doc_id, rank in self.pins],
                "hide": list(self.hide), "note": self.note, "created": self.created}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Rule:
        """A rule from its JSON form; a :class:`ValueError` naming ``where`` and the field
        when it is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"{where} must be an object, got {shorten(data)}")
        rule_id = data.get("id")
        if not isinstance(rule_id, str) or not rule_id:
            raise ValueError(f"{where}.id must be a non-empty string")
        pins = data.get("pin", [])
        if not isinstance(pins, list) or not all(isinstance(p, dict) for p in pins):
            raise ValueError(f"{where}.pin must be a list of {{\"id\", \"rank\"}}")
        rule = cls(rule_id, data.get("query"), data.get("match", "is"),
                   tuple((p.get("id"), p.get("rank")) for p in pins),
                   tuple(data.get("hide", [])) if isinstance(data.get("hide", []), list)
                   else data.get("hide"), data.get("note", ""), data.get("created", 0.0))
        problem = rule.problem()
        if problem:
            raise ValueError(f"{where}: {problem}")
        return rule

    def problem(self) -> str | None:
        """What makes this rule unusable, or None."""
        if not isinstance(self.query, str) or not query_key(self.query):
            return f"query must be text with at least one word, got {shorten(self.query)}"
        if self.match not in MATCHES:
            return f"match must be one of {', '.join(MATCHES)}, got {shorten(self.match)}"
        if not isinstance(self.hide, tuple) or not all(
                isinstance(d, str) and d for d in self.hide):
            return "hide must be a list of document ids"
        for doc_id, rank in self.pins:
            if not isinstance(doc_id, str) or not doc_id:
                return f"a pinned document's id must be a non-empty string, got {shorten(doc_id)}"
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
                return f"the rank of {doc_id!r} must be an integer from 1, got {shorten(rank)}"
        pinned = [doc_id for doc_id, _ in self.pins]
        if len(set(pinned)) != len(pinned):
            return "pins a document twice"
        ranks = [rank for _, rank in self.pins]
        if len(set(ranks)) != len(ranks):
            return "pins two documents at one rank"
        both = sorted(set(pinned) & set(self.hide))
        if both:
            return f"both pins and hides {both[0]!r}"
        if not self.pins and not self.hide:
            return "neither pins nor hides a document"
        if not isinstance(self.note, str):
            return "note must be text"
        return None


class RuleBook:
    """The rules' document among the models: ``rules.json`` in the model folder, or its row
    in the database (``store.model_store: database``); read, add, remove."""

    def __init__(self, place: str | os.PathLike | ModelDatabase):
        #: The configuration's own documents beside its arms' (the model store of no arm).
        self.documents = place.store("") if isinstance(place, ModelDatabase) \
            else ModelStore(place, "")
        self.path = self.documents.document(RULES_FILE)  # (for messages)

    def stamp(self) -> object:
        """Changes when the rules are written."""
        return self.documents.document_stamp(RULES_FILE)

    def read(self) -> list[Rule]:
        """The rules, oldest first; none when the file does not exist. A
        :class:`ModelStoreError` naming the file and what is wrong when it cannot be used."""
        text = self.documents.read_text(RULES_FILE)
        if text is None:
            return []
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != RULES_FORMAT \
                    or not isinstance(data.get("rules"), list):
                raise ValueError(f"must be {{\"format\": {RULES_FORMAT}, \"rules\": [...]}}")
            rules = [Rule.from_dict(item, f"rules[{i}]")
                     for i, item in enumerate(data["rules"])]
            ids = [rule.id for rule in rules]
            if len(set(ids)) != len(ids):
                raise ValueError("two rules have one id")
        except ValueError as exc:
            raise ModelStoreError(f"store.models: {self.path} is not a rules file: {exc}; "
                                  f"fix it or restore it from a backup (`reranker rules` "
                                  f"writes it)") from exc
        return rules

    def add(self, query: str, *, match: str = "is", pins: Iterable[tuple[str, int]] = (),
            hide: Iterable[str] = (), note: str = "") -> Rule:
        """Add a rule (numbered after every rule the file ever held) and write the file."""
        with self.documents.lock(RULES_LOCK):
            rules = self.read()
            number = max([_number(rule.id) for rule in rules] + [self._last_number()]) + 1
            rule = Rule(f"r{number}", query, match, tuple(pins), tuple(hide), note,
                        round(time.time(), 3))
            problem = rule.problem()
            if problem:
                raise BadRequestError(f"the rule {problem}")
            self._write([*rules, rule], number)
        return rule

    def remove(self, rule_id: str) -> Rule:
        """Remove the rule ``rule_id`` and write the file."""
        with self.documents.lock(RULES_LOCK):
            rules = self.read()
            found = [rule for rule in rules if rule.id == rule_id]
            if not found:
                known = ", ".join(rule.id for rule in rules) or "none"
                raise NotFoundError(f"no query rule {rule_id!r} in {self.path} (rules: {known})")
            self._write([rule for rule in rules if rule.id != rule_id],
                        max([_number(rule.id) for rule in rules] + [self._last_number()]))
        return found[0]

    def _last_number(self) -> int:
        """The highest rule number the file recorded (ids are never used twice)."""
        try:
            return int(json.loads(self.documents.read_text(RULES_FILE) or "{}").get("last", 0))
        except (ModelStoreError, ValueError, AttributeError, TypeError):
            return 0

    def _write(self, rules: list[Rule], last: int) -> None:
        text = json.dumps({"format": RULES_FORMAT, "last": last,
                           "rules": [r.to_dict() for r in rules]}, indent=1) + "\n"
        self.documents.write_text(RULES_FILE, text)


def _number(rule_id: str) -> int:
    return int(rule_id[1:]) if rule_id[:1] == "r" and rule_id[1:].isdigit() else 0


@dataclass
class Plan:
    """What the rules matching one search do to it."""

    rules: list[Rule] = field(default_factory=list)
    #: Documents to take out of the candidates.
    hidden: set[str] = field(default_factory=set)
    #: ``(doc_id, rank, rule id)``, in the order they are placed.
    pins: list[tuple[str, int, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def pin(self, ranking: np.ndarray, ids: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
        """``ranking`` (candidate indices, best first) with the pinned documents among
        ``ids`` moved to their ranks; and the 1-based rank each pinned document took."""
        where = {doc_id: i for i, doc_id in enumerate(ids)}
        placed = [(rank, doc_id) for doc_id, rank, _ in self.pins if doc_id in where]
        if not placed:
            return ranking, {}
        moving = {where[doc_id] for _, doc_id in placed}
        rest = [int(i) for i in ranking if int(i) not in moving]
        at, ranks = -1, {}
        for rank, doc_id in sorted(placed, key=lambda item: item[0]):  # (stable: rule order)
            at = min(max(rank - 1, at + 1), len(rest))
            rest.insert(at, where[doc_id])
            ranks[doc_id] = at + 1
        return np.asarray(rest, dtype=np.intp), ranks

    def describe(self, ranks: dict[str, int]) -> list[dict[str, Any]]:
        """The rules as ``/explain`` and the impression's log give them: each pin with the
        rank it took (``ranks``, from :meth:`pin`), or why it was not applied; each hide."""
        owner = {doc_id: rule_id for doc_id, _, rule_id in self.pins}
        out = []
        for rule in self.rules:
            pins = []
            for doc_id, rank in rule.pins:
                entry: dict[str, Any] = {"id": doc_id, "rank": rank}
                if doc_id in self.hidden:
                    entry["not_applied"] = "hidden by a rule"
                elif owner.get(doc_id) != rule.id:
                    entry["not_applied"] = f"pinned by rule {owner.get(doc_id)}"
                elif doc_id in ranks:
                    entry["shown_at"] = ranks[doc_id]
                else:
                    entry["not_applied"] = ("neither retrieved by the search nor found by "
                                            "its id among the documents that pass the "
                                            "search's filters")
                pins.append(entry)
            out.append({"id": rule.id, "query": rule.query, "match": rule.match,
                        "pin": pins, "hide": list(rule.hide)})
        return out


def plan_for(rules: Sequence[Rule], query: str) -> Plan:
    """The plan of the ``rules`` that match ``query`` (``is`` rules first, then older
    first; a document pinned twice keeps its first rule's rank)."""
    words = query_key(query).split()
    matching = sorted((rule for rule in rules if rule.matches(words)),
                      key=lambda rule: (rule.match != "is", _number(rule.id), rule.id))
    plan = Plan(rules=matching)
    pinned: set[str] = set()
    for rule in matching:
        plan.hidden.update(rule.hide)
        for doc_id, rank in rule.pins:
            if doc_id not in pinned:
                pinned.add(doc_id)
                plan.pins.append((doc_id, rank, rule.id))
    plan.pins = [pin for pin in plan.pins if pin[0] not in plan.hidden]
    return plan


class ServedRules:
    """The rules a serving process applies: read again within :data:`RELOAD_SECONDS` of a
    change of the file; the last good ones kept (and the failure logged once per change)
    when a change cannot be read."""

    def __init__(self, place: str | os.PathLike | ModelDatabase):
        self.book = RuleBook(place)
        self._rules: list[Rule] = []
        self._seen: tuple[int, int] | None = None
        self._checked = -RELOAD_SECONDS
        self._lock = threading.Lock()
        self.error: str | None = None

    def load(self) -> ServedRules:
        """Read the file now; a :class:`ModelStoreError` when it cannot be used (at
        start-up a broken file stops the service, naming it)."""
        self._rules, self._seen = self.book.read(), self._stamp()
        self._checked = time.monotonic()
        return self

    def plan(self, query: str) -> Plan:
        """The plan of the rules that match ``query``."""
        now = time.monotonic()
        if now - self._checked >= RELOAD_SECONDS:
            with self._lock:
                if now - self._checked >= RELOAD_SECONDS:
                    self._checked = now
                    self._reload()
        return plan_for(self._rules, query) if self._rules else Plan()

    def _stamp(self) -> object:
        return self.book.stamp()

    def _reload(self) -> None:
        stamp = self._stamp()
        if stamp == self._seen:
            return
        try:
            rules = self.book.read()
        except ModelStoreError as exc:
            if self.error != str(exc):
                log.error("%s; the rules read before keep applying", exc)
            self.error = str(exc)
            self._seen = stamp
            return
        self._rules, self._seen, self.error = rules, stamp, None
        log.info("query rules: %d read from %s", len(rules), self.book.path)
