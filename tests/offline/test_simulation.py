"""The offline simulator: learning shapes on real data, reproducibility, reports, CLI."""

import csv
import json
from dataclasses import replace

import numpy as np
import pytest

from reranker.offline.simulation import (
    QUALITY_MEASURES,
    LearnerSpec,
    Settings,
    best_single_feature,
    learner_specs,
    prepare,
    run_one,
    simulate,
    summarize,
    write_reports,
)
from tests.support.paths import SHARED_DATA
from tests.support.servers import run_cli

MQ2008 = SHARED_DATA / "letor4-mq2008"
needs_mq2008 = pytest.mark.skipif(not MQ2008.is_dir(),
                                  reason="shared MQ2008 data not present beside the project")


OHSUMED = SHARED_DATA / "letor3-ohsumed"


@pytest.mark.skipif(not OHSUMED.is_dir(), reason="shared OHSUMED data not present beside the "
                    "project")
@pytest.mark.parametrize("click_features", [True, False])
def test_argmax_klrank_learners_do_not_lock_in_below_the_engine_on_ohsumed(click_features):
    """A tester's run: on OHSUMED (fold 1), Greedy KLRank and Online RankNet started at
    random, one click on a below-average document turned every weight negative, the argmax
    then showed the documents matching no query term (features all 0), and their loss over
    every candidate kept them there: 0.06 offline NDCG@10 to the end, below random (0.10)
    and the engine's order (f8, 0.35). From the engine's order, with the loss among the
    results shown, they keep to the engine's level or better, from the first window on."""
    data = prepare([OHSUMED / f"Fold{i}_test.txt.gz" for i in (2, 3, 4)],
                   OHSUMED / "Fold1_test.txt.gz")
    feature = best_single_feature(data)
    specs = learner_specs(["greedy_klrank", "online_ranknet"], {}, feature)
    result = simulate(data, specs, Settings(impressions=3000, runs=1, seed=0, checkpoints=4,
                                            click_features=click_features,
                                            backend_feature=feature), workers=1)
    summary = summarize(result)
    floor = summary[f"backend_order(feature={feature})"]
    assert floor["offline_ndcg@10"]["mean"] > 0.3  # the engine's stand-in, not random
    for name in ("greedy_klrank", "online_ranknet"):
        assert summary[name]["offline_ndcg@10"]["mean"] > \
            floor["offline_ndcg@10"]["mean"] - 0.03, name
        assert summary[name]["online_ndcg@10"]["mean"] > \
            floor["online_ndcg@10"]["mean"] - 0.03, name
        assert summary[name]["worst_window_gap"]["mean"] > -0.08, name


def synthetic_letor(folder, name, queries, seed):
    """A small LETOR file of our own: labels follow features 1 and 2, feature 3 is noise."""
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(queries):
        for _ in range(rng.integers(8, 15)):
            x = rng.random(4)
            score = 2 * x[0] + x[1]
            label = 2 if score > 2.1 else 1 if score > 1.5 else 0
            feats = " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(x))
            lines.append(f"{label} qid:{seed * 1000 + q} {feats}")
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def mq2008():
    if not MQ2008.is_dir():
        pytest.skip("shared MQ2008 data not present beside the project")
    return prepare([MQ2008 / f"S{i}.txt.gz" for i in (1, 2, 3)], MQ2008 / "S5.txt.gz")


#: The papers' protocol: every learner starts from w = 0 (a random ranking) and sees the
#: data's features only.
#: The papers' protocol: from w = 0, without click features, learning from every page.
PROTOCOL = {"start": "zero", "click_features": False, "query_balance": False}


def regret_curve(data, click_model, runs=4, impressions=800):
    curves = []
    for run in range(runs):
        # the paper's Algorithm 1: the argmax shown, no perturbation
        rows, _ = run_one(data, LearnerSpec("preference_perceptron", {"swap_probability": 0.0}),
                          Settings(impressions=impressions, click_model=click_model, depth=5,
                                   checkpoints=10, **PROTOCOL), run)
        curves.append([row["utility_regret"] for row in rows])
    return np.mean(curves, axis=0)


@needs_mq2008
def test_coactive_learning_shapes_on_mq2008(mq2008):
    """Coactive Learning, figures 2 and 3: with strict alpha-informative feedback the
    Preference Perceptron's utility regret falls toward zero, faster for alpha = 1 than for
    alpha = 0.1; with noisy feedback it plateaus above zero."""
    strict_1 = regret_curve(mq2008, "strict_alpha:1.0")
    strict_01 = regret_curve(mq2008, "strict_alpha:0.1")
    noisy = regret_curve(mq2008, "noisy:10")
    assert strict_1[-1] < 0.15 * strict_1[0]
    assert strict_1[-1] < 0.05
    assert strict_1[1:].mean() < strict_01[1:].mean()  # faster, at every stage on average
    assert noisy[-1] > 0.1 and noisy[-1] > 3 * strict_1[-1]
    assert abs(noisy[-1] - noisy[-3]) < 0.35 * noisy[-1]  # a plateau, not still falling


COACTIVE = ["preference_perceptron", "batch_preference_perceptron",
            "exponentiated_preference_perceptron", "convex_preference_perceptron",
            "second_order_preference_perceptron"]
LEARNING = COACTIVE + ["noregret_klrank", "greedy_klrank", "online_ranknet"]
#: Raman et al.'s swap probability, where every pair's weight is 1.
PAPERS = {name: {"swap_probability": 0.5} for name in COACTIVE}


def final_offline_ndcg(data, specs, click_model, impressions=3000, runs=2):
    result = simulate(data, specs, Settings(impressions=impressions, runs=runs,
                                            click_model=click_model, checkpoints=5,
                                            **PROTOCOL), workers=1)
    final = {}
    for row in result.rows:
        if row["t"] == impressions:
            final.setdefault(row["learner"], []).append(row["offline_ndcg@10"])
    return {learner: float(np.mean(values)) for learner, values in final.items()}


@needs_mq2008
@pytest.mark.parametrize("click_model", ["informational", "perfect"])
def test_every_learner_beats_random_offline_from_clicks(mq2008, click_model):
    """With the noisiest cascade clicks (informational: 40% of irrelevant results clicked)
    and with perfect ones, every learner (the perceptrons perturbed with the paper's swap
    probability, the default) ends far above random on the test fold, starting from random
    (the papers' protocol). (At 0.25 from a random start, the weighted feedback's extra
    variance slows the perceptrons whose steps shrink: the convex and exponentiated ones end
    near 0.52 within 3,000 informational impressions.)"""
    final = final_offline_ndcg(mq2008, [LearnerSpec(n, PAPERS.get(n, {})) for n in LEARNING]
                               + [LearnerSpec("random")], click_model)
    final = {name.split("(")[0]: value for name, value in final.items()}
    for name in LEARNING:
        # (+0.10 within 3,000 impressions: the random pairing compares the first two
        # results on half of the impressions only, so the variants with shrinking steps
        # learn the top more slowly than with a fixed pairing)
        assert final[name] > final["random"] + 0.10, (name, final)


@needs_mq2008
def test_perturbation_is_what_makes_noisy_clicks_learnable(mq2008):
    """Unperturbed, the perceptron learns from the prepended informational clicks far less
    (Raman et al. 2013): the clicks keep demoting whatever it ranks first."""
    plain = LearnerSpec("preference_perceptron", {"swap_probability": 0.0})
    final = final_offline_ndcg(mq2008, [LearnerSpec("preference_perceptron"), plain],
                               "informational")
    assert final["preference_perceptron"] > final[plain.key] + 0.08, final


@needs_mq2008
def test_the_default_learner_never_serves_worse_than_the_engine(mq2008):
    """At a small scale (3,000 impressions, 3 runs, informational clicks): as configured by
    default (starting from the engine's order, with the click features and the queries'
    own clicks apart) the Preference Perceptron's worst window of 200 impressions is at most
    0.02 below the backend order's in the same window, and it ends above the backend order
    offline and online (at about six searches per query few queries' clicks judge a pair
    yet, so their pages are still the general model's). From w = 0 without click features
    (the papers' protocol) the same learner dips far below the engine first."""
    feature = best_single_feature(mq2008)
    specs = learner_specs(["preference_perceptron"], {}, feature)
    settings = dict(impressions=3000, runs=3, click_model="informational", checkpoints=4,
                    backend_feature=feature)
    result = simulate(mq2008, specs, Settings(**settings), workers=1)
    default = summarize(result)
    protocol = summarize(simulate(mq2008, specs, Settings(**settings, **PROTOCOL), workers=1))
    ours, floor = default["preference_perceptron"], default[result.floor]
    assert ours["worst_window_gap"]["mean"] >= -0.02, ours["worst_window_gap"]
    assert ours["offline_ndcg@10"]["mean"] > floor["offline_ndcg@10"]["mean"]
    assert ours["online_ndcg@10"]["mean"] > floor["online_ndcg@10"]["mean"]
    assert protocol["preference_perceptron"]["worst_window_gap"]["mean"] < -0.05


@needs_mq2008
def test_best_single_feature_is_a_strong_floor(mq2008):
    feature = best_single_feature(mq2008)
    rows, _ = run_one(mq2008, LearnerSpec("backend_order", {"feature": feature}),
                      Settings(impressions=200, checkpoints=2), 0)
    random_rows, _ = run_one(mq2008, LearnerSpec("random"), Settings(impressions=200,
                                                                     checkpoints=2), 0)
    assert rows[-1]["offline_ndcg@10"] > random_rows[-1]["offline_ndcg@10"] + 0.1


@pytest.fixture
def tiny(tmp_path):
    train = [synthetic_letor(tmp_path, f"train{i}.txt", 30, i + 1) for i in range(2)]
    test = synthetic_letor(tmp_path, "test.txt", 20, 9)
    return train, test


def test_same_seed_same_numbers_and_parallel_equals_serial(tiny):
    train, test = tiny
    data = prepare(train, test)
    specs = [LearnerSpec("preference_perceptron"), LearnerSpec("random")]
    settings = Settings(impressions=300, runs=2, seed=5, click_model="navigational",
                        checkpoints=6)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa
    serial = strip(simulate(data, specs, settings, workers=1).rows)
    parallel = strip(simulate(data, specs, settings, workers=2).rows)
    again = strip(simulate(data, specs, settings, workers=1).rows)
    assert serial == parallel == again
    other = strip(simulate(data, specs, Settings(**{**settings.__dict__, "seed": 6}),
                           workers=1).rows)
    assert other != serial


def test_even_checkpoints_evaluate_every_few_impressions(tiny):
    """The reference implementation's schedule: an offline evaluation every 10 impressions;
    the checkpoints change when the metrics are read, not the run."""
    train, test = tiny
    data = prepare(train, test)
    spec = LearnerSpec("preference_perceptron")
    even, _ = run_one(data, spec, Settings(impressions=300, checkpoints=30,
                                           checkpoint_spacing="even"), 0)
    assert [row["t"] for row in even] == list(range(10, 301, 10))
    logged, _ = run_one(data, spec, Settings(impressions=300, checkpoints=30), 0)
    assert logged[0]["t"] == 1 and logged[-1]["t"] == 300
    for metric in ("offline_ndcg@10", "utility_regret", "kl_cost", "clicks"):
        assert even[-1][metric] == logged[-1][metric]
    with pytest.raises(ValueError, match="spacing"):
        run_one(data, spec, Settings(impressions=10, checkpoint_spacing="linear"), 0)


def test_learning_on_synthetic_data(tiny):
    train, test = tiny
    data = prepare(train, test)
    rows, _ = run_one(data, LearnerSpec("preference_perceptron"),
                      Settings(impressions=1500, click_model="perfect", checkpoints=8), 0)
    random_rows, _ = run_one(data, LearnerSpec("random"),
                             Settings(impressions=1500, click_model="perfect", checkpoints=8), 0)
    assert rows[-1]["offline_ndcg@10"] > random_rows[-1]["offline_ndcg@10"] + 0.15
    assert rows[-1]["utility_regret"] < rows[1]["utility_regret"]


def test_reports(tiny, tmp_path):
    train, test = tiny
    data = prepare(train, test)
    specs = [LearnerSpec("preference_perceptron"), LearnerSpec("random")]
    result = simulate(data, specs, Settings(impressions=200, runs=2, checkpoints=5), workers=1)
    document = write_reports(result, tmp_path / "out", {"note": "test"})
    with open(tmp_path / "out" / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 2 * 5
    assert set(rows[0]) >= {"learner", "run", "t", "utility_regret", "dcg_star_regret",
                            "online_ndcg@10", "offline_ndcg@10", "kl_cost"}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(document))
    entry = summary["learners"]["preference_perceptron"]
    assert entry["runs"] == 2 and entry["impressions"] == 200
    for key in ("offline_ndcg@10", "online_ndcg@10", "utility_regret", "dcg_star_regret",
                "impressions_per_second"):
        assert entry[key]["mean"] is not None and entry[key]["stderr"] >= 0
    assert (tmp_path / "out" / "offline_ndcg_at_10.png").stat().st_size > 5000


def test_simulate_command(tiny, tmp_path):
    train, test = tiny
    out = tmp_path / "sim"
    result = run_cli("simulate", "--train", *map(str, train), "--test", str(test),
                     "--learner", "preference_perceptron", "--click-model", "perfect",
                     "--impressions", "300", "--runs", "2", "--seed", "3", "--out", str(out),
                     "--backend-feature", "1", "--workers", "1")
    assert "preference_perceptron" in result.stdout and "backend_order" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["learners"]) == {"preference_perceptron", "random",
                                        "backend_order(feature=f1)"}
    assert summary["settings"]["click_model"] == "perfect"
    assert summary["settings"]["start"] == "engine" and summary["settings"]["click_features"]
    assert len(list(out.glob("*.png"))) == len(QUALITY_MEASURES) + 1  # and the windows' plot
    # online NDCG@10 per full window of 200 impressions: one per run of 300
    with open(out / "windows.csv", newline="") as handle:
        windows = list(csv.DictReader(handle))
    assert len(windows) == 3 * 2 and {row["t"] for row in windows} == {"200"}

    def window(learner):
        return np.mean([float(row["window_online_ndcg@10"]) for row in windows
                        if row["learner"] == learner])

    for learner, entry in summary["learners"].items():
        assert entry["worst_window"]["mean"] == pytest.approx(window(learner))
        assert entry["worst_window_gap"]["mean"] == pytest.approx(
            window(learner) - window("backend_order(feature=f1)"))
    assert summary["learners"]["random"]["worst_window_gap"]["mean"] < -0.1
    assert "worst gap" in result.stdout
    # the papers' protocol: all-zero start, no click features
    run_cli("simulate", "--train", *map(str, train), "--test", str(test),
            "--learner", "preference_perceptron", "--impressions", "100", "--runs", "1",
            "--out", str(out), "--workers", "1", "--start", "zero", "--no-click-features")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["start"] == "zero" and not summary["settings"]["click_features"]


def test_simulate_plan_file(tiny, tmp_path):
    train, test = tiny
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"train: [{train[0].name}, {train[1].name}]\ntest: {test.name}\n"
                    f"learners:\n  - preference_perceptron\n  - name: preference_perceptron\n"
                    f"    label: pp-depth-test\nimpressions: 100\nruns: 1\nout: plan-out\n"
                    f"click_model: noisy:5\n")
    (tmp_path / train[0].name).write_text(train[0].read_text())
    run_cli("simulate", "--config", str(plan), "--workers", "1")
    summary = json.loads((tmp_path / "plan-out" / "summary.json").read_text())
    assert "pp-depth-test" in summary["learners"]


@pytest.mark.parametrize("args, message", [
    (["--learner", "preference_perceptron", "--no-base"], "needs --train"),
    (["--train", "X", "--test", "X", "--no-base"], "needs at least one --learner"),
    (["--learner", "nope"], "unknown learner 'nope'"),
    (["--learner", "preference_perceptron", "--click-model", "clicky"], "click model 'clicky'"),
    (["--learner", "preference_perceptron", "--param", "preference_perceptron.eta=1"],
     "has no parameter 'eta'"),
    (["--learner", "preference_perceptron", "--backend-feature", "99"], "no such feature"),
    (["--learner", "preference_perceptron", "--param", "pdgdx.learning_rate=0.3"],
     "--param: parameters for learner 'pdgdx', which is not simulated (learners: "
     "preference_perceptron)"),
    # names are checked before the data are read (here: a file that is not there)
    (["--train", "missing.txt", "--test", "X", "--learner", "preferense_perceptron",
      "--no-base"], "--learner: unknown learner 'preferense_perceptron'"),
    (["--train", "missing.txt", "--test", "X", "--learner", "pdgd", "--click-model", "clicky",
      "--no-base"], "--click-model: unknown click model 'clicky'"),
])
def test_simulate_errors(tiny, tmp_path, args, message):
    train, test = tiny
    base = ["--train", str(train[0]), "--test", str(test)]
    if "--no-base" in args:
        args, base = [a for a in args if a != "--no-base"], []
    result = run_cli("simulate", *base, *args, "--impressions", "10", "--runs", "1",
                     "--workers", "1", "--out", str(tmp_path / "out"), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("line, message", [
    ("runs: 0", "plan.yaml: runs: 0 is not in the range x>=1"),
    ("impressions: -5", "plan.yaml: impressions: -5 is not in the range x>=1"),
    ("seed: abc", "plan.yaml: seed: 'abc' is not a valid integer"),
    ("gain: foo", "plan.yaml: gain: 'foo' is not one of 'linear', 'exp'"),
    ("click_features: maybe", "plan.yaml: click_features: 'maybe' is not a valid boolean"),
])
def test_a_plan_files_values_are_checked_as_the_options_are(tiny, tmp_path, line, message):
    train, test = tiny
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"train: {train[0]}\ntest: {test}\nlearners: [pdgd]\n{line}\n")
    result = run_cli("simulate", "--config", str(plan), "--workers", "1", "--out",
                     str(tmp_path / "out"), check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_plan_files_values_are_taken_as_the_options_take_them(tiny, tmp_path):
    """Quoted numbers and booleans, and one learner without a list."""
    train, test = tiny
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"train: {train[0]}\ntest: {test}\nlearners: preference_perceptron\n"
                    f"impressions: '60'\nruns: 1\nclick_features: 'false'\nout: o\n")
    result = run_cli("simulate", "--config", str(plan), "--workers", "1")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["settings"]["impressions"] == 60
    assert summary["settings"]["click_features"] is False
    assert "preference_perceptron" in summary["learners"]
    assert "one run: no spread" in result.stdout and " ± " not in result.stdout


def test_binary_labels_get_the_binary_users(tmp_path):
    """Labels 0-1 (the LETOR 3.0 web collections): a relevant document is the top grade, so
    the perfect user clicks every one and nothing else."""
    from reranker.offline.click_models import cascade_model

    rng = np.random.default_rng(0)
    lines = [f"{int(x[0] > 0.6)} qid:{q} " + " ".join(f"{i + 1}:{v:.3f}" for i, v in
                                                      enumerate(x))
             for q in range(20) for x in rng.random((10, 3))]
    (tmp_path / "b.txt").write_text("\n".join(lines) + "\n")
    data = prepare([tmp_path / "b.txt"], tmp_path / "b.txt")
    assert data.grades == 2
    clicks = cascade_model("perfect", data.grades).clicks(np.array([1, 0, 1, 0]), rng)
    assert clicks.tolist() == [True, False, True, False]


def test_bad_data_file_names_file_and_line(tiny, tmp_path):
    train, test = tiny
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:0.5\n1 qid:1 1:oops\n")
    result = run_cli("simulate", "--train", str(bad), "--test", str(test), "--learner",
                     "preference_perceptron", "--workers", "1", "--out", str(tmp_path / "o"),
                     check=False)
    assert "bad.txt, line 2" in result.stderr


def test_simulate_help_documents_every_option():
    out = run_cli("simulate", "--help").stdout
    for option in ("--train", "--test", "--learner", "--param", "--click-model",
                   "--impressions", "--runs", "--seed", "--out", "--depth", "--gain",
                   "--backend-feature", "--checkpoints", "--workers", "--config"):
        assert option in out


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic")
    train = [synthetic_letor(folder, f"train{i}.txt", 30, i + 1) for i in range(2)]
    return prepare(train, synthetic_letor(folder, "test.txt", 20, 9))


@pytest.mark.parametrize("name", LEARNING)
def test_every_learner_learns_from_simulated_clicks(synthetic, name):
    """Navigational cascade users on our own synthetic data: each learner ends far above
    the random floor offline, with a fraction of its utility regret."""
    settings = Settings(impressions=1500, click_model="navigational", checkpoints=4)
    final = {}
    for learner in (name, "random"):
        rows = [run_one(synthetic, LearnerSpec(learner), settings, run)[0][-1]
                for run in range(2)]
        final[learner] = {m: np.mean([r[m] for r in rows])
                          for m in ("offline_ndcg@10", "utility_regret")}
    assert final[name]["offline_ndcg@10"] > final["random"]["offline_ndcg@10"] + 0.2
    assert final[name]["utility_regret"] < 0.5 * final["random"]["utility_regret"]


def test_choice_user_clicks_one_item_by_gain_wherever_it_is(synthetic):
    from reranker.offline.users import make_user

    user = make_user("choice", 3)
    rng = np.random.default_rng(0)
    labels = np.array([0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2])  # gains 3, 1, 3
    ranking = np.arange(12)[::-1].copy()
    picks = []
    for _ in range(7000):
        fb = user.respond(ranking, 5, labels, np.zeros(12), 0.0, rng)
        assert len(fb.clicked) == 1 and ranking[fb.positions[0]] == fb.clicked[0]
        picks.append(int(fb.clicked[0]))
    counts = np.bincount(picks, minlength=12) / 7000
    np.testing.assert_allclose(counts[[1, 3, 11]], [3 / 7, 1 / 7, 3 / 7], atol=0.02)
    nothing = user.respond(ranking, 5, np.zeros(12, dtype=int), np.zeros(12), 0.0, rng)
    assert len(nothing.clicked) == 0


def test_growing_library_reveals_queries_in_order():
    from reranker.offline.simulation import query_stream

    settings = Settings(impressions=1000, library="growing", reveal=0.5)
    rng = np.random.default_rng(0)
    early = query_stream(100, 0, 50, settings, rng)
    assert early.max() < 12  # after 50 of 500 revealing impressions: about 10 queries
    late = query_stream(100, 600, 400, settings, rng)
    assert late.max() > 90 and late.min() < 10  # all available, drawn uniformly
    fixed = query_stream(100, 0, 100, Settings(), rng)
    assert sorted(fixed.tolist()) == list(range(100))


@needs_mq2008
def test_table2_shape_on_a_growing_library(mq2008):
    """Delage, Table 2 in spirit: NoRegret KLRank has the lowest average KL cost (finite,
    below random; deterministic learners are infinite), Greedy KLRank ranks clicked items
    higher than NoRegret KLRank, and all beat random on the click metrics. (The KL cost is
    of the policy that presented each list: the learners' own, so no query's page is
    specialised here.)"""
    specs = [LearnerSpec(n) for n in ("noregret_klrank", "greedy_klrank", "online_ranknet",
                                      "preference_perceptron", "random")]
    result = simulate(mq2008, specs, Settings(impressions=4000, runs=2, click_model="choice",
                                              library="growing", checkpoints=4,
                                              specialize=False))
    summary = {k: {m: v[m]["mean"] for m in v if isinstance(v[m], dict)}
               for k, v in summarize(result).items()}
    assert summary["noregret_klrank"]["kl_cost"] < summary["random"]["kl_cost"] - 0.1
    for name in ("greedy_klrank", "online_ranknet", "preference_perceptron"):
        assert summary[name]["kl_cost"] == "inf"
        assert summary[name]["relative_click_distance"] < summary["random"][
            "relative_click_distance"] - 0.05
    assert summary["greedy_klrank"]["clicked_first_rate"] > \
        summary["noregret_klrank"]["clicked_first_rate"] + 0.03


def test_kl_cost_of_a_perturbed_presentation():
    """The policy cost of a pair-perturbed argmax is -log of the chance the learner shows
    the clicked item first, as its own list probabilities give it: the argmax's first with
    chance 1 - p/2, its second with chance p/2 (the pairing (1, 2), ... is drawn half of the
    time, and reaches the second candidate even when only one result is shown), any other
    never."""
    import itertools

    from reranker_plugins.preference_perceptron import PreferencePerceptron

    from reranker.offline.simulation import _QualityMeasurements

    p = 0.25
    scores = np.array([3.0, 2.0, 1.0])  # argmax: candidate 0, then 1, then 2
    learner = PreferencePerceptron(swap_probability=p)
    learner.initialize(1)
    learner.w_ = np.array([1.0])
    X = scores[:, None]

    def cost(clicked):
        metrics = _QualityMeasurements("exp", 3)
        metrics.add_clicks(0, 3, scores, np.array([clicked]), np.array([0]),
                           learner.first_log_probabilities(X))
        return metrics._click_metrics(1)["kl"][0]

    def first_chance(shown_length, item):
        return sum(np.exp(learner.log_probability(X, np.array(top)))
                   for top in itertools.permutations(range(3), shown_length) if top[0] == item)

    for k in (1, 2, 3):  # the same chances whatever the shown length
        for item in range(3):
            chance = first_chance(k, item)
            assert cost(item) == pytest.approx(-np.log(chance) if chance > 0 else np.inf)
    assert cost(0) == pytest.approx(-np.log(1 - p / 2))
    assert cost(1) == pytest.approx(-np.log(p / 2)) and cost(2) == np.inf


def test_the_evaluate_target_may_be_a_mapping_or_take_params_by_name(tiny, tmp_path):
    train, test = tiny
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"train: {train[0]}\ntest: {test}\nlearners: [random]\nimpressions: 60\n"
                    f"runs: 1\nout: o\nevaluate: {{name: noregret_klrank, params: "
                    f"{{prior_steps: 0}}}}\n")
    run_cli("simulate", "--config", str(plan), "--workers", "1")
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "off_policy" in summary["learners"]["random"]
    result = run_cli("simulate", "--train", str(train[0]), "--test", str(test), "--learner",
                     "random", "--evaluate", "noregret_klrank", "--param",
                     "noregret_klrank.prior_steps=0", "--impressions", "60", "--runs", "1",
                     "--workers", "1", "--out", str(tmp_path / "o2"), check=False)
    assert result.returncode == 0, result.stderr


def test_a_learner_takes_over_from_a_weak_engine_on_evidence_only(tmp_path):
    """--takeover: with a feature of noise as the engine, the duels on queries without clicks
    of their own soon show users prefer the learner, which then serves alone; until then
    (and by default) nothing is counted."""
    data = prepare([synthetic_letor(tmp_path, "train.txt", 600, 3)],
                   synthetic_letor(tmp_path, "test.txt", 20, 9))
    settings = Settings(impressions=2000, click_model="navigational", checkpoints=4,
                        takeover=True, backend_feature="f3")
    for name in ("preference_perceptron", "pdgd"):
        _, timing = run_one(data, LearnerSpec(name), settings, 0)
        record = timing["takeover"]
        assert record["trusted"] and timing["takeover_at"] <= 1000, name
        assert record["wins"] > 2 * record["losses"], name
    # without click features every query is one without clicks of its own
    _, timing = run_one(data, LearnerSpec("preference_perceptron"),
                        replace(settings, click_features=False), 0)
    assert timing["takeover"]["trusted"]
    _, timing = run_one(data, LearnerSpec("preference_perceptron"),
                        Settings(impressions=300, click_model="navigational", checkpoints=2,
                                 backend_feature="f3"), 0)
    assert timing["takeover_at"] is None and timing["takeover"]["wins"] == 0


def test_simulate_takeover_reports_each_run(tiny, tmp_path):
    train, test = tiny
    result = run_cli("simulate", "--train", *map(str, train), "--test", str(test),
                     "--learner", "preference_perceptron", "--impressions", "300", "--runs",
                     "2", "--checkpoints", "3", "--takeover", "--out", str(tmp_path / "out"),
                     # (the learned weights in full: shrunk, on 300 impressions they keep the
                     # engine's order and no duel happens)
                     "--no-shrink", "--no-query-balance")
    assert result.returncode == 0, result.stderr
    assert "Takeover" in result.stdout and "took over at" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    entry = summary["learners"]["preference_perceptron"]
    assert len(entry["takeover"]) == 2
    assert summary["settings"]["takeover"] is True
