"""Names that a module renamed, kept for one release: reading the old name warns
(:class:`DeprecationWarning`) and gives the object under its new name."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed(module: str, names: Mapping[str, str], namespace: Mapping[str, Any]
            ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` (its ``__name__``) that answers each old name
    of ``names`` (old -> new) with the object ``namespace`` (its ``globals()``) holds under
    the new one."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is renamed {new}; import that instead",
                      DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__
