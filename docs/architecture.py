"""Write docs/architecture.md from the code: the sub-packages in the order the data flows,
what each owns (its ``__init__`` docstring), its modules and the packages it imports, read from
the import statements. ``python docs/architecture.py`` rewrites the page;
tests/docs/test_architecture.py checks that the page is current and that no import runs back up
the flow."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reranker"
PAGE = ROOT / "docs" / "architecture.md"

#: The sub-packages, bottom-up: each may import those before it (and its own stage's
#: siblings listed on the same line never import each other).
FLOW: list[tuple[str, ...]] = [("core",), ("backends",), ("features",), ("learners",),
                               ("stores",), ("models",), ("experiments", "evaluation"),
                               ("serving", "offline"), ("api",), ("commands",)]
#: The public modules at the top, over the whole flow.
FACADES = ("library", "testing")


def stage(package: str) -> int | None:
    for i, names in enumerate(FLOW):
        if package in names:
            return i
    return None


def modules(package: str) -> list[Path]:
    return sorted(p for p in (PACKAGE / package).rglob("*.py") if "__pycache__" not in p.parts)


def imported_names(path: Path) -> list[tuple[str, int]]:
    """Every dotted name ``path`` imports (a ``from`` import gives its module and each
    ``module.name``; relative imports are left out), with the line: any import, also inside a
    function or for type checks only."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, node.lineno)] + [(f"{node.module}.{alias.name}", node.lineno)
                                                     for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def imported_packages(path: Path) -> list[tuple[str, int]]:
    """The sub-packages of reranker (and the facades) that ``path`` imports, with the line."""
    found = []
    for name, line in imported_names(path):
        parts = name.split(".")
        if parts[0] == "reranker" and len(parts) > 1 and (
                stage(parts[1]) is not None or parts[1] in FACADES) and \
                (parts[1], line) not in found:
            found.append((parts[1], line))
    return found


def upward_imports() -> list[str]:
    """Every import from a package to one later in the flow, or sideways within a stage, or
    to a facade: ``file:line imports package``."""
    wrong = []
    for names in FLOW:
        for package in names:
            for path in modules(package):
                for other, line in imported_packages(path):
                    if other == package:
                        continue
                    if other in FACADES or stage(other) >= stage(package):
                        wrong.append(f"{path.relative_to(ROOT)}:{line} imports reranker.{other}")
    return wrong


def summary(package: str) -> str:
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    return " ".join((doc or "").split("\n\n")[0].split())


def page() -> str:
    lines = [
        "# Architecture",
        "",
        "<!-- Written by `python docs/architecture.py` from the code; edit the packages' "
        "docstrings, not this page. -->",
        "",
        "reranker's sub-packages follow the data: a search's candidates come from a backend, "
        "become features, are ranked by a learner, are logged in an event store, teach the "
        "models, are compared in experiments, and are served over HTTP or replayed offline. "
        "Read from the top, the table below is that flow; a package imports only packages "
        "above it (`tests/docs/test_architecture.py` checks every import). `reranker.library` and "
        "`reranker.testing` are the public facades over the whole flow, and the learners "
        "themselves are plugins in `plugins/` (`reranker_plugins`). The tests keep the same "
        "layout: `tests/<package>/` tests the package of its name (`tests/docs/` the "
        "documentation, `tests/scenarios/` whole walk-throughs).",
        "",
        "| stage | package | owns | modules | imports |",
        "|---|---|---|---|---|",
    ]
    for i, names in enumerate(FLOW, 1):
        for package in names:
            uses = sorted({other for path in modules(package)
                           for other, _ in imported_packages(path) if other != package},
                          key=lambda name: (stage(name), name))
            mods = ", ".join(f"`{p.relative_to(PACKAGE / package).with_suffix('')}`"
                             for p in modules(package) if p.name != "__init__.py")
            lines.append(f"| {i} | `reranker.{package}` | {summary(package)} | {mods} | "
                         f"{', '.join(uses) or '--'} |")
    lines += ["", "A module that moved here keeps its old import path (`reranker.learner`, "
              "`reranker.service`, ...) for one release, with a `DeprecationWarning` "
              "(`reranker/moved.py`).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    PAGE.write_text(page(), encoding="utf-8")
    wrong = upward_imports()
    print(f"wrote {PAGE.relative_to(ROOT)}; {len(wrong)} imports against the flow")
    print("\n".join(wrong))
    sys.exit(1 if wrong else 0)
