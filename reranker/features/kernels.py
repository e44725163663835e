"""Compiled loops of the per-search path: the raw feature matrix of one search's
candidates, its per-query min-max normalisation, and the perceptrons' perturbed page with
the chances it logs.

For 100 candidates, each numpy call costs about a microsecond whatever its work, and these
steps took some thirty of them; one compiled pass does the same work in about one
microsecond each (``python benchmarks/bench_search_overhead.py --parts local``). The
functions are compiled by numba on their first call and kept in numba's on-disk cache, so a
process that starts later loads them instead of compiling them again (where no cache
folder is writable, each process compiles them). They do not release the interpreter lock:
the work is shorter than taking the lock back.

The compiled code checks no bounds: the callers (:mod:`reranker.features.extraction`,
:mod:`reranker.learners.coactive`) check every shape first.
:mod:`reranker.features.extraction` imports this module on its first use, so commands that
never rank do not pay for numba's import.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def _compiled(function):
    """Compiled with plain IEEE arithmetic (no fastmath), so that the results equal those of
    the numpy expressions they replace (tests/features/test_kernels.py compares them); cached on
    disk when numba finds a writable place (beside this file, or the user's cache folder)."""
    try:
        return njit(cache=True)(function)
    except RuntimeError:  # no writable cache location (a read-only install and home)
        return njit(function)


@_compiled
def engine_column(scores, out):
    """The ``backend_score`` column (reranker.features.extraction.engine_scores): the scores when no
    score rises by more than a millionth of the largest one (``max(1, max |s|)``) from a
    hit to the next, else ``n - rank``. A NaN in the scores, or in a rise, keeps the scores
    as they are (the caller refuses the NaN)."""
    n = scores.shape[0]
    largest = 1.0
    rise = -np.inf
    undefined = False
    for i in range(n):
        s = scores[i]
        if s != s:
            undefined = True
        a = abs(s)
        if a > largest:
            largest = a
        if i > 0:
            d = s - scores[i - 1]
            if d != d:
                undefined = True
            elif d > rise:
                rise = d
    if n > 1 and not undefined and rise > 0 and rise > 1e-6 * largest:
        for i in range(n):
            out[i] = float(n - i)
    else:
        for i in range(n):
            out[i] = scores[i]


@_compiled
def _put_columns(values, out, col, replace_missing, missing):
    """``values`` into ``out`` from column ``col`` on (a value that is not finite becomes
    ``missing`` when ``replace_missing``); returns the next free column."""
    for j in range(values.shape[1]):
        for i in range(values.shape[0]):
            v = values[i, j]
            out[i, col + j] = missing if replace_missing and not np.isfinite(v) else v
    return col + values.shape[1]


@_compiled
def raw_features(scores, field_scores, numeric, clicks, missing, limit, out):
    """Fill ``out`` (``n`` rows) with the engine column, the query features, the numeric
    fields (a value that is not finite becomes ``missing``) and the click features, each
    value clipped to ``+-limit``. Returns False when a value is NaN (``out`` is then
    incomplete)."""
    n = scores.shape[0]
    engine_column(scores, out[:, 0])
    col = _put_columns(field_scores, out, 1, False, missing)
    col = _put_columns(numeric, out, col, True, missing)
    _put_columns(clicks, out, col, False, missing)
    for j in range(out.shape[1]):
        for i in range(n):
            v = out[i, j]
            if v > limit:
                out[i, j] = limit
            elif v < -limit:
                out[i, j] = -limit
            elif v != v:
                return False
    return True


@_compiled
def per_query_minmax(X, keep, out):
    """``out = (X - min) / (max - min)`` per column over the rows, 0 for a constant column,
    NaN for a column holding a NaN, and the columns where ``keep`` is true copied as they
    are."""
    n, m = X.shape
    for j in range(m):
        if keep[j]:
            for i in range(n):
                out[i, j] = X[i, j]
            continue
        if n == 0:
            continue
        lo = X[0, j]
        hi = lo
        for i in range(1, n):
            v = X[i, j]
            if v < lo:
                lo = v
            elif v > hi:
                hi = v
            elif v != v:
                lo = v  # a NaN makes the whole column NaN, as numpy's reductions do
                break
        span = hi - lo
        if span > 0:
            for i in range(n):
                out[i, j] = (X[i, j] - lo) / span
        else:  # constant (or NaN): (X - lo) is 0 there, and 0 / anything but 0 is 0
            for i in range(n):
                out[i, j] = (X[i, j] - lo) * 0.0


# -- perturbed pairs (reranker.learners.coactive) --------------------------------------------------
# The argmax ``best`` is cut into pairs of adjacent positions, (1, 2), (3, 4), ... or
# (2, 3), (4, 5), ... (pairing 0 or 1, chance 1/2 each), whose upper positions run below
# ``end = min(n_shown, n - 1)``; each pair is swapped with chance p (docs/algorithms.md,
# "Perturbed pairs"; Raman et al. 2013).


@_compiled
def chance_at(best, r, item, end, p):
    """The chance that ``item`` is shown at position ``r``, over the two pairings: in the
    pairing of ``r``'s parity, ``r`` is the upper of a pair when ``r < end``; in the other,
    the lower of a pair when ``0 < r <= end``; outside a pair a position keeps the argmax's
    result."""
    upper = r < end
    lower = 0 < r <= end
    if item == best[r]:
        return 0.5 * ((1.0 - p if upper else 1.0) + (1.0 - p if lower else 1.0))
    chance = 0.0
    if upper and item == best[r + 1]:
        chance += p
    if lower and item == best[r - 1]:
        chance += p
    return 0.5 * chance


@_compiled
def shown_chances(best, k, p, out):
    """Each candidate's chance of being shown on a page of ``k`` (``out``: zeros, one per
    candidate): every result of the argmax's top but the last, which the pair reaching below
    the page (in one pairing of two, swapped with chance p) trades for the first result left
    out."""
    n = out.shape[0]
    for i in range(k):
        out[best[i]] = 1.0
    if 0 < k < n:
        out[best[k - 1]] = 1.0 - p / 2
        out[best[k]] = p / 2


@_compiled
def position_chances(best, k, p, out):
    """``out[item, r]`` (zeros, shape ``(n, k)``): the chance of ``item`` at position ``r``.
    A position holds the argmax's result there or one of its two neighbours."""
    n = best.shape[0]
    end = min(k, n - 1)
    for r in range(k):
        for i in range(max(0, r - 1), min(r + 2, n)):
            out[best[i], r] = chance_at(best, r, best[i], end, p)


@_compiled
def perturbed_pairs(scores, n_shown, p, coins):
    """A page drawn from the argmax of ``scores`` (stable: ties keep the candidates' order):
    the pairing from ``coins[0]`` (pairing 1 below 1/2), then the pairs' coins, one each,
    a pair swapped when its coin is below p. Returns the ranking, the pairing, the upper
    positions of the swapped pairs, each candidate's chance of being shown and each shown
    result's chance at its position."""
    n = scores.shape[0]
    best = np.argsort(-scores, kind="mergesort")
    ranking = best.copy()
    k = min(n_shown, n)
    end = min(n_shown, n - 1)
    offset = 1 if coins[0] < 0.5 else 0
    swapped = np.empty(max(end, 0), dtype=np.int64)
    n_swapped = 0
    coin = 1
    for upper in range(offset, end, 2):
        if coins[coin] < p:
            ranking[upper] = best[upper + 1]
            ranking[upper + 1] = best[upper]
            swapped[n_swapped] = upper
            n_swapped += 1
        coin += 1
    propensities = np.zeros(n)
    shown_chances(best, k, p, propensities)
    at = np.empty(k)
    for r in range(k):
        at[r] = chance_at(best, r, ranking[r], end, p)
    return ranking, offset, swapped[:n_swapped], propensities, at


@_compiled
def first_misplaced(ranking, n):
    """The first position of ``ranking`` that breaks it as a permutation of ``0 .. n-1``
    (an index out of range, or one seen before), or -1 when it is one. The caller checks
    that ``ranking`` holds ``n`` integers."""
    seen = np.zeros(n, np.bool_)
    for position in range(ranking.shape[0]):
        index = ranking[position]
        if index < 0 or index >= n or seen[index]:
            return position
        seen[index] = True
    return -1


@_compiled
def _lentz_step(aa, c, d):
    """One term ``aa`` of a continued fraction by the modified Lentz method: the new ``c``
    and ``d`` and the factor the fraction's value is multiplied by."""
    tiny = 1e-300
    d = 1.0 + aa * d
    if abs(d) < tiny:
        d = tiny
    c = 1.0 + aa / c
    if abs(c) < tiny:
        c = tiny
    d = 1.0 / d
    return c, d, d * c


@_compiled
def _beta_fraction(a, b, x):
    """The continued fraction of the incomplete beta function, by the modified Lentz method
    (Press et al., *Numerical Recipes*, 3rd ed., section 6.4, ``betacf``)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    if abs(d) < 1e-300:
        d = 1e-300
    d = 1.0 / d
    h = d
    for m in range(1, 10000):
        m2 = 2.0 * m
        c, d, even = _lentz_step(m * (b - m) * x / ((qam + m2) * (a + m2)), c, d)
        c, d, odd = _lentz_step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)), c, d)
        h *= even * odd
        if abs(odd - 1.0) < 1e-15:
            break
    return h


@_compiled
def binomial_upper_tail(k, n, p):
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, ``1 <= k <= n``: the regularised incomplete
    beta function ``I_p(k, n - k + 1)`` (Numerical Recipes, ``betai``)."""
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    a, b = float(k), float(n - k + 1)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(p) + b * math.log1p(-p))
    if p < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, p) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - p) / b


@_compiled
def _rate_p_value(ca, ea, cb, eb):
    a, b = np.rint(ca), np.rint(cb)
    m = a + b
    if b > 0 and ea > 0 and b * (ea + eb) > m * eb:
        return binomial_upper_tail(int(b), int(m), eb / (ea + eb))
    return 1.0


@_compiled
def rate_p_values(ca, ea, cb, eb, out):
    """The conditional test of two Poisson rates
    (reranker.learners.specialization.judgment_p_values),
    elementwise: ``P(X >= c_b)``, ``X ~ Binomial(c_a + c_b, e_b / (e_a + e_b))``, where ``b``
    has a click, both were seen and ``b``'s share of the clicks is above its share of the
    exposure; 1 elsewhere. Counts are rounded to whole clicks."""
    for i in range(out.shape[0]):
        out[i] = _rate_p_value(ca[i], ea[i], cb[i], eb[i])


@_compiled
def against_the_rest(clicks, exposure, out):
    """For each candidate seen, the p-values of its click rate above (``out[i, 0]``) and
    below (``out[i, 1]``) that of the query's other candidates together (1 for one never
    seen)."""
    total_c, total_e = 0.0, 0.0
    for i in range(clicks.shape[0]):
        total_c += clicks[i]
        total_e += exposure[i]
    for i in range(clicks.shape[0]):
        c, e = clicks[i], exposure[i]
        if e <= 0:
            out[i, 0] = 1.0
            out[i, 1] = 1.0
            continue
        rest_c, rest_e = total_c - c, max(total_e - e, 0.0)
        out[i, 0] = _rate_p_value(rest_c, rest_e, c, e)
        out[i, 1] = _rate_p_value(c, e, rest_c, rest_e)

def warm_up() -> None:
    """Compile (or load from the cache) every kernel for the arrays a search passes, so that
    a service is ready to answer before its first search rather than during it."""
    n = 3
    scores = np.array([3.0, 2.0, 1.0])
    columns = np.zeros((n, 1))
    out = np.empty((n, 4), order="F")
    raw_features(scores, columns, columns, np.empty((0, 0)), 0.0, 1e12, out)
    per_query_minmax(out, np.zeros(4, dtype=np.bool_), np.empty((n, 4), order="F"))
    perturbed_pairs(scores, 2, 0.5, np.array([0.7, 0.2, 0.9]))
    first_misplaced(np.arange(n), n)
    rate_p_values(scores, scores, scores, scores, np.empty(n))
    against_the_rest(scores, scores, np.empty((n, 2)))
