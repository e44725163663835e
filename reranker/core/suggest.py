"""Suggestions for a misspelt name in an error message (a config key, a field, a learner)."""

from __future__ import annotations

import difflib
from typing import Any


def did_you_mean(name: Any, known, prefix: str = "") -> str:
    """``; did you mean 'x'?`` with the closest known name(s), or nothing."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=2, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(f"'{prefix}{c}'" for c in close) + "?"
