"""The example scripts behind the documented results (docs/results/) run end to end (on a
small scale here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reranker.testing import cli_env
from tests.support.paths import SHARED_DATA

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CRANFIELD = SHARED_DATA / "cranfield"


@pytest.mark.skipif(not CRANFIELD.is_dir(),
                    reason="shared Cranfield data not present beside the project")
def test_cranfield_through_the_live_service(tmp_path):
    """One run of 500 searches: `reranker index`, `reranker serve`, simulated users over
    HTTP; the report names every measurement and the learning curve is drawn."""
    out = tmp_path / "cranfield"
    result = subprocess.run([sys.executable, str(EXAMPLES / "cranfield_live.py"), "--data",
                             str(CRANFIELD), "--out", str(out), "--runs", "1",
                             "--searches", "500"], capture_output=True, text=True, timeout=300,
                            env=cli_env())
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    run = summary["runs"][0]
    assert run["statuses"]["search 200"] >= 500 and run["clicks"] > 500
    assert not run["errors"] and not run["log_problems"]
    assert len(run["windows_served"]) == 5
    for key in ("last_diff", "worst_window_diff", "heldout_before", "heldout_after",
                "heldout_backend"):
        assert -1 <= run[key] <= 1, key
    # a new deployment serves the engine's order, give or take its randomised pairs
    assert abs(run["heldout_before"] - run["heldout_backend"]) < 0.05
    assert (out / "learning_curve.png").stat().st_size > 10_000


MQ2008 = SHARED_DATA / "letor4-mq2008"


@pytest.mark.skipif(not MQ2008.is_dir(), reason="shared MQ2008 data not present beside the "
                                                "project")
def test_mq2008_semibandit_protocol(tmp_path):
    """A small run of the semibandit comparison: every learner's best setting is tabled
    between the random lists and the best possible ones, and the curves are drawn."""
    out = tmp_path / "semibandits"
    result = subprocess.run([sys.executable, str(EXAMPLES / "mq2008_semibandit_protocol.py"),
                             "--data", str(MQ2008), "--out", str(out), "--runs", "2",
                             "--rounds", "300", "--weights", "uniform"],
                            capture_output=True, text=True, timeout=300, env=cli_env())
    assert result.returncode == 0, result.stderr
    table = json.loads((out / "table.json").read_text())
    assert set(table) == {"random", "vcee", "epsilon_greedy", "linucb", "best lists"}
    floor, best = table["random"]["uniform"]["mean"], table["best lists"]["uniform"]["mean"]
    for learner in ("vcee", "epsilon_greedy", "linucb"):
        cell = table[learner]["uniform"]
        assert floor < cell["mean"] < best, learner
        assert cell["setting"].startswith(learner + "(")
    assert "| `vcee` |" in result.stdout
    assert (out / "average-reward.png").stat().st_size > 10_000
    assert (out / "curves.csv").read_text().count("\n") == 1 + 12 * 2 * 50


@pytest.mark.skipif(not MQ2008.is_dir(), reason="shared MQ2008 data not present beside the "
                                                "project")
def test_new_queries_table(tmp_path):
    """A small run of the table of queries never seen and repeated ones
    (docs/results/new-queries.md): every learner, variant and target is reported, with the
    engine's held-out figure."""
    out = tmp_path / "new-queries"
    result = subprocess.run([sys.executable, str(EXAMPLES / "new_queries.py"),
                             "--data", str(SHARED_DATA), "--out", str(out), "--runs", "2",
                             "--impressions", "3000", "--at", "2000",
                             "--collection", "MQ2008", "--click-model", "navigational"],
                            capture_output=True, text=True, timeout=600, env=cli_env())
    assert result.returncode == 0, result.stderr
    table = json.loads((out / "table.json").read_text())
    assert set(table) == {"MQ2008 / navigational / 2000", "MQ2008 / navigational / 3000"}
    cell = table["MQ2008 / navigational / 3000"]
    assert set(cell) == {"preference_perceptron", "pdgd", "engine",
                         "preference_perceptron, no click features",
                         "pdgd, no click features", "preference_perceptron, earlier design"}
    assert cell["engine"]["offline"]["mean"] == pytest.approx(0.675, abs=0.001)
    assert cell["preference_perceptron"]["worst_window"] >= -0.02
    assert "| MQ2008 | 3,000 | navigational | 0.675 |" in result.stdout
    assert "target" in result.stdout
