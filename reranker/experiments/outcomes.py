"""From an experiment's logged impressions and clicks to outcomes per pair of arms and
click measures per arm (docs/algorithms.md, "Comparing learners").

Every impression of an experiment records, per shown position, the label of the arm that
contributed the result (``Impression.teams``). A click is credited to that arm.

* Mixed lists (interleave, multileave): an impression with at least one click is one
  comparison for every pair of arms in it: the arm credited with more clicks wins, equal
  credit is a tie (team-draft interleaving, Radlinski, Kurup & Joachims 2008; multileaving,
  Schuth et al. 2014). Impressions without clicks say nothing.
* Split: each impression is one arm's alone. Each impression of arm a is compared with the
  latest impression of arm b still waiting for a partner (in the order they closed) on the
  reciprocal rank of the first click (0 when nothing was clicked): two independent
  samples, paired by their order alone, never by their clicks, make a valid sign test of
  which arm gets clicks higher up. Pairing the latest keeps the two pages of a comparison
  close in time: with unequal shares the larger arm's impressions queue up, and paired
  oldest first (the i-th with the i-th) a learning arm's early, unlearned pages would be
  compared with the other arm's current ones for ever after. At most
  :data:`MAX_WAITING` impressions of an arm wait; older ones are left out.

Per arm: the clicks on the pages it took part in (``clicks``), those credited to it
(``credited_clicks``), and click measures of its credited clicks in those impressions (the
status document's ``metrics``):
clicks per search (``clicks_per_search``: several clicks on one page count several), the
share of searches with one (``searches_with_click``) and with none (``abandonment``), the
reciprocal rank of the first (``mrr``) and the clicks in the top k (``clicks_at_k``).
"""

from __future__ import annotations

import json
from collections import deque
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from reranker.experiments.spec import ExperimentSpec
from reranker.experiments.stats import compare, difference_interval, mean_confidence_bounds

if TYPE_CHECKING:
    from reranker.stores import ImpressionLog


#: A split's impressions of one arm that wait for a partner of another, at most: the latest
#: are paired first, so the older ones only bound the memory (and how far back a burst of
#: the other arm's impressions reaches).
MAX_WAITING = 1000


class Tally:
    """Outcomes and click measures of one experiment, read incrementally from the event
    store."""

    BATCH = 5000

    def __init__(self, spec: ExperimentSpec):
        self.spec = spec
        self.cursor = 0  # highest closed_seq read
        self.impressions = 0
        labels = spec.labels
        self.pairs = list(combinations(labels, 2))
        #: Per pair, the outcomes in time order (+1: first arm wins, -1: second, 0: tie)
        #: and the experiment impression at which each was decided.
        self.outcomes: dict[tuple[str, str], list[int]] = {p: [] for p in self.pairs}
        self.decided_at: dict[tuple[str, str], list[int]] = {p: [] for p in self.pairs}
        # per pair, each arm's impressions (reciprocal ranks) waiting for a partner
        self._waiting: dict[tuple[str, str], tuple[deque, deque]] = {
            p: (deque(maxlen=MAX_WAITING), deque(maxlen=MAX_WAITING)) for p in self.pairs}
        # per arm, per impression it took part in: credited clicks, reciprocal rank of the
        # first credited click, credited clicks in the top k
        self.page_credit: dict[str, list[tuple[int, float, int]]] = {label: [] for label in labels}
        self.clicks = {label: 0 for label in labels}  # credited to the arm
        self.page_clicks = {label: 0 for label in labels}  # on the pages it took part in
        self.clicked_pages = {label: 0 for label in labels}  # of those, pages with a click
        #: Per pair, on each mixed page both were on: the first arm's abandonment and
        #: clicks@k minus the second's (the guardrails' paired differences).
        self.paired: dict[tuple[str, str], list[tuple[int, int]]] = {p: [] for p in self.pairs}
        self._cache: tuple[int, list[dict]] | None = None
        self._arm_cache: dict[str, tuple[int, dict[str, Any]]] = {}

    def read(self, events: ImpressionLog) -> None:
        """Add the experiment's impressions closed since the last read."""
        while True:
            rows = events.experiment_rows(self.spec.name, self.cursor, self.BATCH)
            for closed_seq, arm, teams, n_shown, positions in rows:
                self.cursor = closed_seq
                self.add(arm, json.loads(teams) if teams else [], n_shown, positions)
            if len(rows) < self.BATCH:
                return

    def add(self, arm: str | None, teams: list[str], n_shown: int,
            positions: list[int]) -> None:
        """One closed impression: ``teams`` per shown position, clicks at the 1-based
        ``positions``; ``arm`` is None for a mixed list."""
        teams = teams[:n_shown]
        labels = [label for label in dict.fromkeys(teams) if label in self.page_credit]
        if not labels:
            return
        self.impressions += 1
        k = self.spec.clicks_at
        credit = {label: 0 for label in labels}
        first = {label: 0.0 for label in labels}
        top = {label: 0 for label in labels}
        for position in sorted(positions):
            if not 1 <= position <= len(teams):
                continue
            label = teams[position - 1]
            if label not in credit:
                continue
            credit[label] += 1
            if not first[label]:
                first[label] = 1.0 / position
            top[label] += position <= k
        # every click on the page, also those of an arm no longer configured (so that
        # removing an arm does not rewrite the others' history)
        on_page = sum(1 for position in positions if 1 <= position <= len(teams))
        for label in labels:
            self.page_credit[label].append((credit[label], first[label], top[label]))
            self.clicks[label] += credit[label]
            self.page_clicks[label] += on_page
            self.clicked_pages[label] += on_page > 0
        if arm is None:  # a mixed list: a comparison for every pair in it, if clicked
            for a, b in self.pairs:
                if a in credit and b in credit:
                    self.paired[(a, b)].append((int(credit[a] == 0) - int(credit[b] == 0),
                                                top[a] - top[b]))
            if not positions:
                return
            for a, b in self.pairs:
                if a in credit and b in credit:
                    self._decide((a, b), int(np.sign(credit[a] - credit[b])))
            return
        label = labels[0]  # split: pair it with the other arms' impressions in order
        for pair in self.pairs:
            if label not in pair:
                continue
            mine, theirs = self._waiting[pair] if label == pair[0] else \
                self._waiting[pair][::-1]
            if theirs:
                other = theirs.pop()  # the latest: the closest in time
                ours = first[label]
                outcome = np.sign(ours - other) if label == pair[0] else np.sign(other - ours)
                self._decide(pair, int(outcome))
            else:
                mine.append(first[label])

    def _decide(self, pair: tuple[str, str], outcome: int) -> None:
        self.outcomes[pair].append(outcome)
        self.decided_at[pair].append(self.impressions)

    # -- summaries --------------------------------------------------------------------------

    def pair_summaries(self) -> list[dict[str, Any]]:
        """Per pair: wins, losses, ties, win rate with its interval, the sign test's and the
        always-valid p-value, and whether the difference is significant."""
        total = sum(len(v) for v in self.outcomes.values())
        if self._cache is not None and self._cache[0] == total:
            return self._cache[1]
        out = []
        for pair in self.pairs:
            result = compare(self.outcomes[pair], alpha=self.spec.alpha,
                             mixture=self.spec.mixture).to_dict()
            winner = result.get("winner")
            out.append({"arms": list(pair), **result,
                        "winner": None if winner is None else pair[winner]})
        self._cache = (total, out)
        return out

    def arm_summary(self, label: str) -> dict[str, Any]:
        """An arm's impressions, clicks and click measures (``metrics``) with their 95%
        intervals, and its learning curve: its win rate in every window of
        ``experiment.window`` impressions."""
        cached = self._arm_cache.get(label)
        if cached is not None and cached[0] == self.impressions:
            return cached[1]
        rows = np.array(self.page_credit[label], dtype=np.float64).reshape(-1, 3)
        measures: dict[str, Any] = {}
        clicked = (rows[:, 0] > 0).astype(float)
        columns = {"clicks_per_search": rows[:, 0], "searches_with_click": clicked,
                   "abandonment": 1.0 - clicked,
                   "mrr": rows[:, 1], f"clicks_at_{self.spec.clicks_at}": rows[:, 2]}
        for name, values in columns.items():
            if len(values):
                low, high = mean_confidence_bounds(values)
                measures[name] = {"value": float(values.mean()),
                                 "interval": [float(low), float(high)]}
            else:
                measures[name] = {"value": None, "interval": None}
        summary = {"impressions": len(rows), "clicks": self.page_clicks[label],
                   "clicked_pages": self.clicked_pages[label],
                   "credited_clicks": self.clicks[label], "metrics": measures,
                   "curve": self.curve(label)}
        self._arm_cache[label] = (self.impressions, summary)
        return summary

    def difference(self, first: str, second: str, metric: str
                   ) -> tuple[float, float, float] | None:
        """``first``'s ``metric`` (``abandonment`` or ``clicks_at_k``) minus ``second``'s,
        with its 95% interval, or None before both have pages: on mixed pages the mean of
        the paired differences (both arms on the same pages), in a split the difference of
        the two arms' means (:func:`.stats.difference_interval`)."""
        column = {"abandonment": 0, "clicks_at_k": 1}[metric]
        pair, sign = ((first, second), 1) if (first, second) in self.paired else \
            ((second, first), -1)
        paired = self.paired.get(pair, [])
        if paired:
            values = sign * np.array(paired, dtype=float)[:, column]
            low, high = mean_confidence_bounds(values)
            return float(values.mean()), low, high
        rows = {label: np.array(self.page_credit[label], dtype=float).reshape(-1, 3)
                for label in (first, second)}
        if not all(len(r) for r in rows.values()):
            return None
        values = {label: (r[:, 0] == 0).astype(float) if metric == "abandonment" else r[:, 2]
                  for label, r in rows.items()}
        return difference_interval(values[first], values[second])

    def curve(self, label: str) -> list[dict[str, Any]]:
        window = self.spec.window
        n_windows = self.impressions // window
        wins, decided = np.zeros(n_windows), np.zeros(n_windows)
        for pair in self.pairs:
            if label not in pair or not self.outcomes[pair]:
                continue
            sign = 1 if pair[0] == label else -1
            outcomes = np.asarray(self.outcomes[pair]) * sign
            which = (np.asarray(self.decided_at[pair]) - 1) // window
            full = which < n_windows
            np.add.at(wins, which[full], (outcomes[full] > 0).astype(float))
            np.add.at(decided, which[full], (outcomes[full] != 0).astype(float))
        return [{"impressions": (i + 1) * window,
                 "value": float(wins[i] / decided[i]) if decided[i] else None}
                for i in range(n_windows)]
