import gzip

import numpy as np
import pytest

from reranker.core.errors import DataError
from reranker.offline.letor import load_letor, load_many
from tests.support.paths import SHARED_DATA

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
    ("# a comment\n\n1 qid:1 1:1\n1 1:1\n", "line 4: no qid, while other lines have one"),
    ("1 1:1\n", "no qid and there is no bad.txt.query file"),
    ("# only a comment\n", "holds no data lines"),
    ("nan qid:1 1:1\n", "line 1: label 'nan' must be a non-negative integer"),
    ("1 qid:1 1:1\ninf qid:1 1:1\n", "line 2: label 'inf' must be a non-negative integer"),
    ("1 qid:1 3:0.2 1:1 3:0.9\n", "line 1: feature 3 is given twice"),
    ("1 qid:1 1:1 2:1:3\n", "line 1: bad feature '2:1:3'"),
    ("1 qid:1 1:1 2:x\n", "line 1: bad feature '2:x'"),
    ("1 qid:1 1.5:1\n", "line 1: bad feature '1.5:1'"),
    ("1 qid:1 1:1 qid:2\n", "line 1: 'qid:' must come right after the label"),
    ("1 qid:1 1:1e999\n", "line 1: bad feature '1:1e999'"),
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
    from reranker.offline.simulation import prepare

    (tmp_path / "train.txt").write_text("1 qid:1 1:0.5\n0 qid:1 1:0.2\n"
                                        "5 qid:2 1:0.9\n0 qid:2 1:0.1\n")
    (tmp_path / "test.txt").write_text("1 qid:3 1:0.5\n0 qid:3 1:0.1\n")
    with pytest.raises(DataError, match=r"train.txt, line 3: label 5 is above 4"):
        prepare([tmp_path / "train.txt"], tmp_path / "test.txt")


def test_what_editors_and_other_tools_leave_in_a_file_is_read(tmp_path):
    """A byte-order mark, Windows line ends, a byte that is not UTF-8 in a comment,
    feature ids out of order and a line without features."""
    path = tmp_path / "odd.txt"
    path.write_bytes("\ufeff2 qid:7 3:0.5 1:1.5 # docid = a\r\n".encode("utf-8")
                     + b"0 qid:7 # docid = b \xe9\r\n1 qid:8 2:2\r\n")
    data = load_letor(path)
    assert data.qids == ["7", "8"] and data.feature_ids == [1, 2, 3]
    np.testing.assert_array_equal(data.X, [[1.5, 0, 0.5], [0, 0, 0], [0, 2, 0]])
    assert data.labels.tolist() == [2, 0, 1] and data.doc_ids == ["a", "b", None]


def test_a_truncated_gzip_file_names_the_line_reached(tmp_path):
    import gzip

    text = "".join(f"{i % 3} qid:{i // 10} 1:{i} 2:0.5\n" for i in range(20000)).encode()
    whole = gzip.compress(text)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"cut.txt.gz: cannot be read after line \d+"):
        load_letor(path)


def test_a_query_file_with_a_size_of_zero_is_named(tmp_path):
    (tmp_path / "t.txt").write_text("1 1:1\n0 1:2\n")
    (tmp_path / "t.txt.query").write_text("2\n0\n")
    with pytest.raises(DataError, match=r"t.txt.query, line 2: a query size must be at least "
                                        r"1, got 0"):
        load_letor(tmp_path / "t.txt")


def test_the_matrix_matches_a_token_by_token_reading(tmp_path):
    """Random sparse lines with ids in any order and queries interleaved: the matrix equals
    the one built token by token."""
    rng = np.random.default_rng(3)
    lines, expected = [], []
    for i in range(300):
        ids = rng.choice(np.arange(1, 60), size=rng.integers(0, 12), replace=False)
        values = np.round(rng.normal(size=ids.shape[0]), 4)
        lines.append(f"{i % 5} qid:{rng.integers(0, 20)} "
                     + " ".join(f"{f}:{v}" for f, v in zip(ids, values, strict=True)))
        expected.append(dict(zip(ids.tolist(), values.tolist(), strict=True)))
    path = tmp_path / "sparse.txt"
    path.write_text("\n".join(lines) + "\n")
    data = load_letor(path)
    for row, line in enumerate(data.lines.tolist()):
        want = expected[line - 1]
        got = {f: v for f, v in zip(data.feature_ids, data.X[row].tolist(), strict=True) if v}
        assert got == {f: v for f, v in want.items() if v}
        assert data.labels[row] == (line - 1) % 5
