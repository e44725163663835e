"""The layout is the flow: no import runs back up it, and docs/architecture.md says what the
code does (it is written from the code by docs/architecture.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.support.paths import ROOT

spec = importlib.util.spec_from_file_location("architecture", ROOT / "docs" / "architecture.py")
architecture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(architecture)


def test_no_import_runs_back_up_the_flow():
    assert architecture.upward_imports() == []


def test_every_package_has_its_place_in_the_flow():
    packages = {p.name for p in (ROOT / "reranker").iterdir()
                if (p / "__init__.py").exists()}
    placed = {name for names in architecture.FLOW for name in names}
    assert packages == placed


def test_the_architecture_page_is_written_from_the_code():
    assert (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8") == \
        architecture.page(), "run: python docs/architecture.py"


def test_the_rule_catches_an_import_against_the_flow(tmp_path, monkeypatch):
    fake = tmp_path / "reranker"
    for package in ("core", "api"):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text('"""x."""\n')
    (fake / "core" / "bad.py").write_text("from reranker.api.app import create_app\n")
    monkeypatch.setattr(architecture, "PACKAGE", fake)
    monkeypatch.setattr(architecture, "ROOT", tmp_path)
    assert architecture.upward_imports() == ["reranker/core/bad.py:1 imports reranker.api"]


@pytest.mark.parametrize("old, new", [("reranker.learner", "reranker.learners.base"),
                                      ("reranker.service", "reranker.serving.service"),
                                      ("reranker.clicks.position_bias",
                                       "reranker.features.clicks.position_bias")])
def test_a_moved_module_still_imports_from_its_old_path_with_a_warning(old, new):
    code = (f"import warnings, importlib; warnings.simplefilter('error'); "
            f"importlib.import_module('{old}')")
    refused = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert refused.returncode != 0
    assert "DeprecationWarning: reranker." in refused.stderr  # (the first path that moved)
    assert " moved to reranker." in refused.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is importlib.import_module(new)


def test_nothing_of_the_project_imports_an_old_path():
    from reranker.moved import MOVED

    found = [f"{path.relative_to(ROOT)}:{line} {name}"
             for folder in ("reranker", "plugins", "tests", "benchmarks", "examples", "docs")
             for path in (ROOT / folder).rglob("*.py") if path.name != "test_architecture.py"
             for name, line in architecture.imported_names(path) if name in MOVED]
    assert found == []


#: Test folders that are not a package of reranker: the shared helpers, the documentation's
#: own tests and the end-to-end walk-throughs.
TEST_FOLDERS_BESIDE = {"support", "docs", "scenarios"}


def test_the_tests_mirror_the_packages():
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    packages = {name for names in architecture.FLOW for name in names}
    assert folders - TEST_FOLDERS_BESIDE <= packages, "a test folder names no package"
    assert not list((ROOT / "tests").glob("test_*.py")), "a test file sits outside a folder"


def shared_wrongly(tests: Path) -> list[str]:
    """Imports from conftest.py or from a test module: fixtures come through conftest.py,
    helpers from tests.support."""
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        for name, line in architecture.imported_names(path):
            parts = name.split(".")
            where = f"{path.relative_to(tests)}:{line}"
            if ("conftest" in parts or any(part.startswith("test_") for part in parts)) \
                    and not any(w.startswith(where + " ") for w in wrong):
                wrong.append(f"{where} imports {name}")
    return wrong


def test_tests_share_helpers_through_support_not_conftest_or_test_modules(tmp_path):
    assert shared_wrongly(ROOT / "tests") == []
    (tmp_path / "test_a.py").write_text("from conftest import write_config\n"
                                        "from tests.stores.test_events import impression\n")
    assert [line.split(" imports ")[0] for line in shared_wrongly(tmp_path)] == \
        ["test_a.py:1", "test_a.py:2"]


@pytest.mark.parametrize("module, old, new", [
    ("reranker.experiments.stats", "mean_interval", "mean_confidence_bounds"),
    ("reranker.evaluation.estimators", "mean_interval", "mean_estimate"),
    ("reranker.serving.monitoring", "Metrics", "PrometheusMetrics")])
def test_a_renamed_name_still_imports_with_a_warning(module, old, new):
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is renamed {new}"):
        assert getattr(loaded, old) is getattr(loaded, new)
    with pytest.raises(AttributeError):
        loaded.never_there  # noqa: B018
