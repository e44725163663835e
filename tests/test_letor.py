import gzip

import numpy as np
import pytest
from conftest import SHARED_DATA

from reranker.errors import DataError
from reranker.letor import load_letor, load_many

SAMPLE = """2 qid:7 1:0.5 3:1.0 # doc a
0 qid:7 1:0.1 2:0.2
1 qid:9 2:0.3 3:0.4
0 qid:7 1:0.9
"""


def test_parses_plain_and_gzip_and_groups_queries(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_text(SAMPLE)
    packed = tmp_path / "a.txt.gz"
    with gzip.open(packed, "wt") as handle:
        handle.write(SAMPLE)
    for path in (plain, packed):
        data = load_letor(path)
        assert data.qids == ["7", "9"]
        assert data.feature_ids == [1, 2, 3]
        X, labels = data.query(0)
        np.testing.assert_array_equal(labels, [2, 0, 0])  # rows of qid 7, file order
        np.testing.assert_array_equal(X[:, 0], [0.5, 0.1, 0.9])
        np.testing.assert_array_equal(data.query(1)[0], [[0.0, 0.3, 0.4]])


def test_query_file_variant(tmp_path):
    path = tmp_path / "rank.train"
    path.write_text("1 1:0.5\n0 2:0.5\n2 1:1\n")
    (tmp_path / "rank.train.query").write_text("2\n1\n")
    data = load_letor(path)
    assert data.n_queries == 2 and list(np.diff(data.offsets)) == [2, 1]


def test_concatenating_files_aligns_features(tmp_path):
    (tmp_path / "a.txt").write_text("1 qid:1 1:1 2:2\n")
    (tmp_path / "b.txt").write_text("0 qid:2 3:3\n")
    data = load_many([tmp_path / "a.txt", tmp_path / "b.txt"])
    assert data.feature_ids == [1, 2, 3]
    np.testing.assert_array_equal(data.X, [[1, 2, 0], [0, 0, 3]])


@pytest.mark.parametrize("text, message", [
    ("x qid:1 1:1\n", "line 1: label 'x' is not a number"),
    ("1 qid:1 1:1\n-1 qid:1 1:2\n", "line 2: label '-1' must be a non-negative integer"),
    ("1 qid:1 1:1\n1 qid:1 a:2\n", "line 2: bad feature 'a:2'"),
    ("1 qid:1 0:1\n", "line 1: bad feature '0:1'"),
    ("1 qid:1 1:nan\n", "line 1: bad feature '1:nan'"),
    ("1 qid:1 1\n", "line 1: expected 'index:value'"),
    ("1 qid:1 1:1\n1 1:1\n", "data line 2 has no qid"),
    ("1 1:1\n", "no qid and there is no"),
    ("# only a comment\n", "holds no data lines"),
])
def test_bad_files_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(DataError) as info:
        load_letor(path)
    assert message in info.value.message and "bad.txt" in info.value.message


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_letor(tmp_path / "none.txt")


@pytest.mark.skipif(not (SHARED_DATA / "letor4-mq2008").is_dir(),
                    reason="shared MQ2008 data not present beside the project")
def test_mq2008_counts_match_its_source_description():
    data = load_many([SHARED_DATA / "letor4-mq2008" / f"S{i}.txt.gz" for i in range(1, 6)])
    assert data.n_queries == 784 and data.X.shape == (15211, 46)
    assert np.bincount(data.labels).tolist() == [12279, 2001, 931]


@pytest.mark.skipif(not (SHARED_DATA / "lightgbm-lambdarank-example").is_dir(),
                    reason="shared LightGBM example data not present beside the project")
def test_lightgbm_query_file_data():
    data = load_letor(SHARED_DATA / "lightgbm-lambdarank-example" / "rank.train.gz")
    assert data.n_queries == 201 and data.X.shape[0] == 3005


def test_grades_above_four_are_refused_by_the_simulator_with_file_and_line(tmp_path):
    from reranker.simulation import prepare

    (tmp_path / "train.txt").write_text("1 qid:1 1:0.5\n0 qid:1 1:0.2\n"
                                        "5 qid:2 1:0.9\n0 qid:2 1:0.1\n")
    (tmp_path / "test.txt").write_text("1 qid:3 1:0.5\n0 qid:3 1:0.1\n")
    with pytest.raises(DataError, match=r"train.txt, line 3: label 5 is above 4"):
        prepare([tmp_path / "train.txt"], tmp_path / "test.txt")
