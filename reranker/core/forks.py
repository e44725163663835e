"""State of a process that a forked child must not inherit.

A child forked from a process with threads (the workers of ``reranker serve --workers N``,
forked by gunicorn) inherits every lock as it was at the fork, maybe held by a thread that
the child does not have, and every queue of work that the parent will do itself. An object
holding such state calls :func:`renew_in_child` with the method that starts it anew; the
method runs in every child right after the fork.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable


def renew_in_child(method: Callable[[], None]) -> None:
    """Have the bound ``method`` run in every child forked from now on (it is held weakly:
    an object gone by then is skipped)."""
    os.register_at_fork(after_in_child=functools.partial(_call, weakref.WeakMethod(method)))


def _call(ref: weakref.WeakMethod) -> None:
    method = ref()
    if method is not None:
        method()
