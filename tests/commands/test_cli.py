"""The command line: help everywhere, and clear errors for bad input."""

import pytest

from reranker.commands.main import cli
from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from tests.support.configs import write_config, write_docs
from tests.support.servers import ServeProcess, run_cli


@pytest.mark.parametrize("command", [[], *([name] for name in cli.commands)])
def test_every_command_has_help(command):
    out = run_cli(*command, "--help").stdout
    assert "Usage:" in out
    if command:
        assert len(out.splitlines()) > 4


def test_learners_lists_the_default_learner():
    out = run_cli("learners").stdout
    assert "preference_perceptron" in out and "Coactive Learning" in out
    # what each learns from as an experiment's arm
    lines = out.splitlines()
    said = {line.split()[0]: lines[i + 1].strip() for i, line in enumerate(lines[:-1])
            if line and not line.startswith(" ")}
    assert said["eels"].startswith("experiments: learns only from pages it ranks itself: "
                                   "experiment.mode split")
    for name in ("pdgd", "dbgd", "preference_perceptron"):
        assert said[name] == ("experiments: learns from its own pages and the mixed pages it "
                              "takes part in; any mode")
    assert said["random"] == "experiments: a floor: it never learns; any mode"


def failing(*args):
    result = run_cli(*args, check=False)
    assert result.returncode != 0
    return result.stderr


def test_corrupt_config_is_named(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("backend: {fields: [title\n")
    err = failing("serve", "-c", str(path))
    assert "broken.yaml is not valid YAML" in err
    assert "Traceback" not in err


def test_unknown_key_and_wrong_type_are_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: {intervall: 3}\n")
    assert "unknown key trainer.intervall" in failing("train", "-c", str(path))
    path.write_text("server: {port: http}\n")
    assert "server.port must be an integer, got 'http'" in failing("serve", "-c", str(path))


def test_unknown_learner_lists_the_available_ones(tmp_path):
    path = write_config(tmp_path, learner={"name": "gradient_magic"})
    err = failing("train", "-c", str(path))
    assert "unknown learner 'gradient_magic'" in err and "preference_perceptron" in err


def test_bad_learner_parameter_is_named(tmp_path):
    path = write_config(tmp_path, learner={"params": {"learning_rate": 0.1}})
    err = failing("train", "-c", str(path))
    assert "learner.params" in err and "'learning_rate'" in err


def test_missing_backend_directory_is_named(tmp_path):
    path = write_config(tmp_path, backend={"path": "no-such-index"})
    err = failing("serve", "-c", str(path), "--port", "0")
    assert "backend.path" in err and "no-such-index does not exist" in err
    assert "reranker index" in err


def test_missing_config_file_is_named(tmp_path):
    assert "nothere.yaml does not exist" in failing("serve", "-c", str(tmp_path / "nothere.yaml"))


def test_index_reports_bad_lines_by_number(tmp_path):
    path = write_config(tmp_path)
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "title": "tea", "body": "hot", "popularity": 1}\n\n'
                    '{"id": "b", "title": \n')
    err = failing("index", "-c", str(path), str(docs))
    assert "docs.jsonl, line 3: not valid JSON" in err
    docs.write_text('{"id": "a", "title": "tea", "body": "x", "popularity": 1}\n'
                    '{"title": "no id"}\n')
    assert "docs.jsonl, line 2: field 'id' must be" in failing("index", "-c", str(path), str(docs))
    assert "nodocs.jsonl does not exist" in failing("index", "-c", str(path),
                                                    str(tmp_path / "nodocs.jsonl"))


@pytest.mark.parametrize("config, message", [
    ({"backend": {"fields": ["title", "bdy"]}},
     "backend.fields: none of the first 3 documents holds a field 'bdy'; did you mean 'body'?"),
    ({"features": {"numeric_fields": ["popularty"]}},
     "features.numeric_fields: none of the first 3 documents holds a field 'popularty'; did "
     "you mean 'popularity'?"),
])
def test_index_refuses_a_field_no_document_holds_and_leaves_nothing(tmp_path, config, message):
    path = write_config(tmp_path, **config)
    docs = write_docs(tmp_path, [{"id": str(i), "title": "tea", "body": "hot tea",
                                  "popularity": i} for i in range(3)])
    err = failing("index", "-c", str(path), str(docs))
    assert message in err and "they hold: body, id, popularity, title" in err
    assert not (tmp_path / "index").exists()  # nothing left to break the next, correct run
    run_cli("index", "-c", str(write_config(tmp_path)), str(docs))


def test_index_names_a_document_whose_number_is_a_string(tmp_path):
    path = write_config(tmp_path)
    docs = write_docs(tmp_path, [{"id": "a", "title": "tea", "body": "x", "popularity": 3},
                                 {"id": "b", "title": "tea", "body": "y",
                                  "popularity": "12.50"}])
    result = run_cli("index", "-c", str(path), str(docs), check=False)
    assert result.returncode == 1 and "indexed 1 documents" in result.stdout
    assert "docs.jsonl, line 2 (id b): numeric field 'popularity' holds '12.50', not a " \
           "number" in result.stderr


def test_a_failed_first_index_leaves_nothing_behind(tmp_path):
    path = write_config(tmp_path)
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"title": "no id", "body": "x", "popularity": 1}\n')
    failing("index", "-c", str(path), str(docs))
    assert not (tmp_path / "index").exists()
    failing("index", "-c", str(path), str(tmp_path / "missing.jsonl"))
    assert not (tmp_path / "index").exists()


def test_an_index_run_that_loads_nothing_fails_and_leaves_nothing(tmp_path):
    """An empty file, a file of lines that are not JSON documents (NaN is not JSON), and
    documents that all fail: exit 1, and no index made by the run."""
    path = write_config(tmp_path)
    docs = tmp_path / "docs.jsonl"
    for text, message in [
            ("\n  \n", "docs.jsonl holds no document to index"),
            ('[1, 2]\n{"id": "a", "popularity": NaN}\n',
             "docs.jsonl holds no document to index (2 failed; the first: "),
            ('{"id": "a", "title": "tea", "body": "x", "popularity": "3"}\n',
             "indexed 0 documents")]:
        docs.write_text(text)
        result = run_cli("index", "-c", str(path), str(docs), check=False)
        assert result.returncode == 1 and message in result.stdout + result.stderr
        assert not (tmp_path / "index").exists()
    docs.write_text('{"id": "a", "title": "tea", "body": "x", "popularity": 1}\n'
                    '{"id": "b", "title": "tea", "body": "x", "popularity": Infinity}\n'
                    '{"id": "c", "title": "tea", "body": "x", "popularity": 1e999}\n'
                    '{"id": "d", "title": "tea", "body": "x", "popularity": 1' + "0" * 400
                    + '}\n')
    err = failing("index", "-c", str(path), str(docs))
    assert "docs.jsonl, line 2: not valid JSON: Infinity is not a JSON value" in err
    assert "docs.jsonl, line 3: not valid JSON: the number 1e999 is too large for a float" \
        in err
    assert "docs.jsonl, line 4 (id d): numeric field 'popularity' holds 1000" in err
    assert "0\u2026, a number too large for a float" in err  # (not 400 digits)


def test_index_names_where_a_line_stops_being_json(tmp_path):
    path = write_config(tmp_path)
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "title": "tea", "body": "x", "popularity": 1}\n'
                    '{"id": "b", "title": "tea" "body": "x"}\n')
    assert "line 2: not valid JSON: Expecting ',' delimiter at line 1, column 28" in failing(
        "index", "-c", str(path), str(docs))


def test_a_recreate_with_a_misspelt_field_keeps_the_index(tmp_path, corpus):
    """The documents are checked against the config before --recreate deletes anything."""
    path = write_config(tmp_path)
    docs = write_docs(tmp_path, corpus.documents[:20])
    run_cli("index", "-c", str(path), str(docs))
    misspelt = write_config(tmp_path, backend={"fields": ["title", "bdy"]})
    for run in (("index", "-c", str(misspelt), str(docs), "--recreate"),
                ("index", "-c", str(path), str(tmp_path / "empty.jsonl"), "--recreate")):
        (tmp_path / "empty.jsonl").write_text("")
        failing(*run)
        service = RerankerService(load_config(write_config(tmp_path))).open()
        try:
            assert len(service.search(corpus.documents[0]["title"], 10)["hits"]) > 0
        finally:
            service.close()


def test_documents_added_to_an_index_may_lack_a_field(tmp_path, corpus):
    """The fields were checked when the index was made: an update of a few documents that
    lack the numeric field (or a text field) is taken; the field is then missing."""
    path = write_config(tmp_path)
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, corpus.documents[:20])))
    update = tmp_path / "update.jsonl"
    update.write_text('{"id": "new-1", "title": "zanzibar spice tea", "body": "cloves"}\n')
    assert "indexed 1 documents" in run_cli("index", "-c", str(path), str(update)).stdout
    service = RerankerService(load_config(path)).open()
    try:
        assert service.search("zanzibar", 10)["hits"][0]["id"] == "new-1"
    finally:
        service.close()
    # a new index still wants the fields somewhere in its first documents
    assert "none of the first 1 documents holds a field 'popularity'" in failing(
        "index", "-c", str(path), str(update), "--recreate")


def test_index_refuses_a_config_that_changed_the_fields(tmp_path, corpus):
    path = write_config(tmp_path)
    docs = write_docs(tmp_path, corpus.documents[:20])
    run_cli("index", "-c", str(path), str(docs))
    path = write_config(tmp_path, backend={"fields": ["title"]})
    assert "--recreate" in failing("index", "-c", str(path), str(docs))
    assert "indexed 20 documents" in run_cli("index", "-c", str(path), str(docs),
                                             "--recreate").stdout


def test_serve_refuses_to_start_when_no_saved_model_loads(tmp_path, corpus):
    path = write_config(tmp_path)
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, corpus.documents[:20])))
    models = tmp_path / "models" / "preference_perceptron"
    models.mkdir(parents=True)
    (models / "model-000001.json").write_text("{ not json")
    err = failing("serve", "-c", str(path), "--port", "0")
    assert "model-000001.json is refused" in err


def test_serve_prints_where_it_listens_and_stops_on_sigterm(tmp_path, corpus):
    path = write_config(tmp_path)
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, corpus.documents[:20])))
    server = ServeProcess(path)
    try:
        assert server.post("/search", {"query": "tea"}).status_code == 200
    finally:
        server.stop()
    assert server.proc.returncode == 0


def test_serve_names_the_experiment_and_its_arms(tmp_path, corpus):
    path = write_config(tmp_path, experiment={
        "mode": "interleave", "name": "trial",
        "arms": {"perceptron": {"name": "preference_perceptron"},
                 "engine": {"name": "backend_order"}}})
    run_cli("index", "-c", str(path), str(write_docs(tmp_path, corpus.documents[:20])))
    server = ServeProcess(path)
    try:
        assert server.banner.startswith(
            "reranker serving experiment trial (interleave: engine = backend_order v0, "
            "perceptron = preference_perceptron v0) on http://127.0.0.1:")  # (the file's order)
    finally:
        server.stop()
