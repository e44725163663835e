"""What a reranked search costs against a plain one on the same engine, side by side in one
run:

  (a) the embedded (Tantivy) index: a plain top-10 search (the same query over the same
      fields, the 10 hits' stored documents loaded) against a whole reranked search
      (``RerankerService.search``: 100 candidates with per-field scores, click features,
      features, Preference Perceptron ranking, impression and exposures logged), with the
      parts of the reranked search timed alone: as configured by default, where a repeated
      query's candidates, click counts and shown documents come from the process's caches;
      as configured by default, a new query each (a known query without a word or two,
      never searched before), against the plain search of the same text; and with every
      cache off (``features.click_refresh: 0``: every count read on every search), as a
      search of a new query showing new documents in a new process would be; the plain
      search given the reranked search's caches; and the mean cost of searches back to
      back until the last one's impression is written (the writer thread's work counted);
  (b) the Elasticsearch stand-in (the tests' protocol-level server, which answers from its
      own Tantivy index): a plain top-10 ``multi_match`` search through the official client
      against the reranked search through the Elasticsearch backend (the candidates'
      features in one ``_search``, the shown documents in a second, of their ids; and
      with every candidate's ``_source`` in the one ``_search``,
      ``backend.fetch_sources: candidates``), with the requests and the bytes sent to and
      received from the cluster per search;
  (c) in process: features + normalisation + ranking of 100 candidates against a bare
      ``np.argsort(-(X @ w))`` (the numpy floor).

On the Cranfield collection when ``shared/data/cranfield`` is beside the project (as
``examples/cranfield.py`` reads it; ``--data`` to point elsewhere), else on the generated
demo corpus. The cases of each part are timed in alternating blocks, so that the ratios
compare like with like on a busy machine.

Run: python benchmarks/bench_search_overhead.py [--searches N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import median_p99_us, time_calls, time_interleaved

from reranker.core.config import config_from_dict
from reranker.core.plugins import backend_class, get_plugin_manager
from reranker.features.clicks import click_lifts
from reranker.serving.service import RerankerService

ROOT = Path(__file__).resolve().parents[1]
CRANFIELD = ROOT.parent / "shared" / "data" / "cranfield"


def load_collection(folder: Path) -> tuple[str, list[dict], list[str]]:
    """The documents and queries: Cranfield when it is there, else the demo corpus."""
    if (folder / "cran.all.1400").is_file():
        sys.path.insert(0, str(ROOT / "examples"))
        from cranfield import load_cranfield

        cranfield = load_cranfield(folder)
        return "Cranfield", cranfield.documents, [q.text for q in cranfield.queries]
    from reranker.offline.democorpus import generate_corpus

    corpus = generate_corpus(7)
    return (f"the demo corpus ({folder} has no Cranfield collection)", corpus.documents,
            [q for q, _ in corpus.queries])


def warm_up(service: RerankerService, queries: list[str], n: int,
            rng: np.random.Generator) -> None:
    """Searches with a click on every other page, so that the event store's counts are
    those of a store in use."""
    for i in range(n):
        page = service.search(queries[i % len(queries)], 10)
        if page["hits"] and i % 2:
            hit = page["hits"][int(rng.integers(len(page["hits"])))]
            service.click(page["impression_id"], hit["id"])


def cycle(queries: list[str]):
    state = {"i": 0}

    def next_query() -> str:
        state["i"] += 1
        return queries[state["i"] % len(queries)]
    return next_query


def new_queries(queries: list[str], analyse, n: int) -> list[str]:
    """``n`` queries none of which analyses like a query in ``queries`` or like another:
    each query without one of its words, then without two (a long tail of new queries close
    to the known ones, as real traffic has)."""
    seen = {tuple(analyse(q)) for q in queries}
    out: list[str] = []
    for drop in (1, 2):
        for q in queries:
            words = q.split()
            for i in range(len(words) - drop + 1):
                text = " ".join(words[:i] + words[i + drop:])
                terms = tuple(analyse(text))
                if terms and terms not in seen:
                    seen.add(terms)
                    out.append(text)
                    if len(out) == n:
                        return out
    raise SystemExit(f"only {len(out)} new queries could be made from the collection's "
                     f"{len(queries)}; ask for fewer --searches")


def embedded_service(folder: Path, documents: list[dict], queries: list[str],
                     rng: np.random.Generator, **sections) -> RerankerService:
    """A service on a new embedded index of the documents, after 1,000 searches with
    clicks; ``sections`` override the configuration's."""
    folder.mkdir(exist_ok=True)
    data = {"backend": {"path": "index", "fields": ["title", "body"]},
            "features": {"numeric_fields": []},
            "store": {"path": "events.sqlite", "models": "models"}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    config = config_from_dict(data, folder)
    backend_class(get_plugin_manager(), "embedded")(config).index_documents(
        ((d["id"], d) for d in documents), recreate=True)
    service = RerankerService(config).open()
    warm_up(service, queries, 1000, rng)
    return service


def sustained_us(service: RerankerService, query, n: int) -> float:
    """Mean microseconds per search of ``n`` searches back to back, until the last one's
    impression is written (the writer thread's work counted)."""
    started = time.perf_counter_ns()
    for _ in range(n):
        service.search(query(), 10)
    service.events.flush()
    return (time.perf_counter_ns() - started) / n / 1000.0


def embedded_part(folder: Path, documents: list[dict], queries: list[str], n: int,
                  rng: np.random.Generator) -> dict:
    """Two services on the same documents: as configured by default (a repeated search
    answered from the engine's cache, the count cache and the document cache; a new query
    from none but the document cache and the counts over all queries), and with every
    cache off."""
    repeated = embedded_service(folder / "repeated", documents, queries, rng)
    new = embedded_service(folder / "new", documents, queries, rng,
                           backend={"cache_size": 0, "document_cache_mb": 0.0},
                           features={"click_refresh": 0.0})
    try:
        backend = new.backend
        query = cycle(queries)

        def plain(next_query=query):
            searcher = backend._current_searcher()
            hits = searcher.search(backend._field_query(backend.fields,
                                                        backend._terms(next_query())), 10).hits
            return [json.loads(searcher.doc(a)["_source"][0]) for _, a in hits]

        view = repeated.backend._new_view(repeated.backend._current_searcher())

        def plain_cached():
            """The plain search given the reranked search's caches (the backend's own):
            its hits kept per analysed query, its documents' stored JSON per address."""
            terms = tuple(backend._terms(query()))
            addresses = view.searches.get(terms)
            if addresses is None:
                addresses = [a for _, a in view.searcher.search(
                    backend._field_query(backend.fields, list(terms)), 10).hits]
                view.searches.put(terms, addresses)
            return [json.loads(view.stored(a)) for a in addresses]

        fixed = [(q, backend.search(q, 100)) for q in queries[:50]]
        which = cycle(list(range(len(fixed))))

        def click_features(service):
            q, c = fixed[which()]
            return click_lifts(service.events.click_counts(q, c.ids), 5.0)

        clicks = [click_lifts(new.events.click_counts(q, c.ids), 5.0) for q, c in fixed]
        asked = iter(range(10**9)).__next__

        def click_features_new_query():  # a query never searched, known candidates
            q, c = fixed[which()]
            return click_lifts(repeated.events.click_counts(f"{q} {asked()}", c.ids), 5.0)

        def features_and_ranking():
            i = which()
            X = new.spec.build(fixed[i][1], clicks[i])
            return new.model.rank(X, 10, new.ranker.rng, check=False)

        # Queries never searched, each searched once by the default service (and as often
        # as the timing takes by the plain search, which keeps nothing between searches).
        unseen = new_queries(queries, backend._terms, n + 50)
        fresh_query, unseen_query = iter(unseen).__next__, cycle(unseen)

        # Each service's impressions are written before the next case's block starts: the
        # writer thread's work counts in its own searches, not in the others'.
        samples = time_interleaved({
            "plain": plain, "plain, same caches": plain_cached,
            "plain, new queries' text": lambda: plain(unseen_query),
            "reranked": lambda: repeated.search(query(), 10),
            "reranked, new query": lambda: repeated.search(fresh_query(), 10),
            "reranked, new": lambda: new.search(query(), 10)}, n, settle={
            "reranked": repeated.events.flush, "reranked, new query": repeated.events.flush,
            "reranked, new": new.events.flush})
        repeated.events.flush()
        new.events.flush()
        parts = time_interleaved({
            "candidates": lambda: repeated.backend.search(query(), 100),
            "candidates, new": lambda: backend.search(query(), 100),
            "click features": lambda: click_features(repeated),
            "click features, new query": click_features_new_query,
            "click features, new": lambda: click_features(new),
            "features + ranking": features_and_ranking}, n)
        out = {name: median_p99_us(s) for name, s in {**samples, **parts}.items()}
        out["sustained"] = sustained_us(repeated, query, n)
        out["sustained, new"] = sustained_us(new, query, n)
        out["plain mean"] = float(np.mean(samples["plain"])) / 1000.0
        return out
    finally:
        repeated.close()
        new.close()


def elasticsearch_part(folder: Path, documents: list[dict], queries: list[str], n: int,
                       rng: np.random.Generator) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from es_standin import Standin

    standin = Standin("8.15.1")
    services = {}
    try:
        for fetch in ("shown", "candidates"):
            config = config_from_dict({
                "backend": {"type": "elasticsearch", "hosts": [standin.url],
                            "index": "cranfield", "fields": ["title", "body"],
                            "request_timeout": 30.0, "fetch_sources": fetch},
                "features": {"numeric_fields": []},
                "store": {"path": f"events-{fetch}.sqlite", "models": f"models-{fetch}"}},
                folder)
            if not services:
                backend_class(get_plugin_manager(), "elasticsearch")(config).index_documents(
                    ((d["id"], d) for d in documents), recreate=True)
            services[fetch] = RerankerService(config).open()
            warm_up(services[fetch], queries, 200, rng)
        es = services["shown"].backend.es
        query = cycle(queries)

        def plain():
            return es.search(index="cranfield", size=10, query={
                "multi_match": {"query": query(), "fields": ["title", "body"]}})

        cases = {"plain": plain,
                 "reranked": lambda: services["shown"].search(query(), 10),
                 "reranked, sources with the search":
                     lambda: services["candidates"].search(query(), 10)}
        traffic = {}
        for name, func in cases.items():
            requests, sent, answered, serving = (len(standin.requests),
                                                 sum(len(b) for _, _, b in standin.bodies),
                                                 standin.answered_bytes,
                                                 standin.serving_seconds)
            started = time.perf_counter()
            for _ in range(len(queries)):
                func()
            elapsed = time.perf_counter() - started
            count = len(queries)
            serving = standin.serving_seconds - serving
            traffic[name] = ((len(standin.requests) - requests) / count,
                             (sum(len(b) for _, _, b in standin.bodies) - sent) / count,
                             (standin.answered_bytes - answered) / count,
                             serving / count * 1e6, (elapsed - serving) / count * 1e6)
        samples = time_interleaved(cases, n, settle={
            "reranked": services["shown"].events.flush,
            "reranked, sources with the search": services["candidates"].events.flush})
        return {"times": {name: median_p99_us(s) for name, s in samples.items()},
                "traffic": traffic}
    finally:
        for service in services.values():
            service.close()
        standin.stop()


def in_process_part(folder: Path, n: int, rng: np.random.Generator) -> dict:
    """Features (from a backend's answer and the click features) + normalisation + the
    default learner's ranking with its perturbed pairs and logged chances, as the service
    runs them, against the bare numpy floor on the same matrix."""
    from reranker.backends import Candidates
    from reranker.features.extraction import FeatureSpec
    from reranker.models.model import ModelFactory

    config = config_from_dict({"features": {"numeric_fields": ["popularity"]}}, folder)
    spec = FeatureSpec.from_config(config)
    model = ModelFactory.from_config(config, get_plugin_manager()).new()
    model.learner.w_ = rng.normal(size=len(spec.names))
    k = 100
    candidates = Candidates(ids=[f"doc{i}" for i in range(k)],
                            scores=np.sort(rng.gamma(2.0, 3.0, size=k))[::-1],
                            field_scores=rng.gamma(1.5, 2.0, size=(k, len(spec.fields))),
                            numeric=rng.uniform(0, 100, size=(k, 1)),
                            load_sources=lambda indices: [{} for _ in indices])
    clicks = rng.gamma(4.0, 0.25, size=(k, 2))
    X = spec.build(candidates, clicks)
    w = model.learner.weights()
    ranking_rng = np.random.default_rng(1)

    def layer():
        return model.rank(spec.build(candidates, clicks), 10, ranking_rng, check=False)

    def floor():
        return np.argsort(-(X @ w))

    samples = time_interleaved({"layer": layer, "floor": floor}, n)
    out = {name: median_p99_us(s) for name, s in samples.items()}
    out["validating"] = median_p99_us(time_calls(
        lambda: model.rank(spec.build(candidates, clicks), 10, ranking_rng), n // 4))
    return out


def table(rows: list[tuple[str, tuple[float, float]]]) -> None:
    print(f"  {'case':<58}{'median us':>11}{'p99 us':>11}")
    for label, (median, p99) in rows:
        print(f"  {label:<58}{median:>11.1f}{p99:>11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=CRANFIELD,
                        help="folder with cran.all.1400 and cran.qry")
    parser.add_argument("--searches", type=int, default=2000,
                        help="timed searches per case on the embedded index")
    parser.add_argument("--es-searches", type=int, default=300,
                        help="timed searches per case through the Elasticsearch stand-in")
    parser.add_argument("--rankings", type=int, default=20000,
                        help="timed rankings per case in process")
    parser.add_argument("--parts", default="embedded,es,local",
                        help="the parts to run, of embedded, es and local (comma-separated)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    name, documents, queries = load_collection(args.data)
    print(f"{name}: {len(documents)} documents, {len(queries)} queries "
          f"(python {sys.version.split()[0]}, numpy {np.__version__})")
    with tempfile.TemporaryDirectory() as tmp:
        parts = {part.strip() for part in args.parts.split(",")}
        unknown = parts - {"embedded", "es", "local"}
        if unknown:
            parser.error(f"--parts: unknown part {sorted(unknown)[0]!r} (embedded, es, local)")
        for part in parts:
            (Path(tmp) / part).mkdir()
        if "embedded" in parts:
            report_embedded(embedded_part(Path(tmp) / "embedded", documents, queries,
                                          args.searches, rng), args.searches)
        if "es" in parts:
            report_es(elasticsearch_part(Path(tmp) / "es", documents, queries,
                                         args.es_searches, rng))
        if "local" in parts:
            report_local(in_process_part(Path(tmp) / "local", args.rankings, rng))


def report_embedded(emb: dict, searches: int) -> None:
    new_query = emb["reranked, new query"][0] / emb["plain, new queries' text"][0]
    print("\n(a) embedded index, 100 candidates reranked, 10 shown")
    table([("plain top-10 search (+ the 10 stored documents)", emb["plain"]),
           ("plain top-10 search with the reranked search's caches", emb["plain, same caches"]),
           ("reranked search, repeated queries (the default)", emb["reranked"]),
           ("  part: candidates (backend.search, answered from its cache)",
            emb["candidates"]),
           ("  part: click features (the count cache)", emb["click features"]),
           ("plain top-10 search of the new queries' text", emb["plain, new queries' text"]),
           ("reranked search, a new query each (the default)", emb["reranked, new query"]),
           ("  part: click features of a new query (its own cells read alone)",
            emb["click features, new query"]),
           ("reranked search, every cache off", emb["reranked, new"]),
           ("  part: candidates (retrieval, ids, per-field scores)", emb["candidates, new"]),
           ("  part: click features read from the event store", emb["click features, new"]),
           ("part: features + normalisation + ranking", emb["features + ranking"])])
    print(f"  reranked / plain (median): repeated queries "
          f"{emb['reranked'][0] / emb['plain'][0]:.1f}x (against the plain search with the "
          f"same caches {emb['reranked'][0] / emb['plain, same caches'][0]:.1f}x), a new "
          f"query each {new_query:.1f}x"
          f" (against the plain search of the same text), every cache off "
          f"{emb['reranked, new'][0] / emb['plain'][0]:.1f}x")
    print(f"  sustained, {searches} searches back to back until the last impression is "
          f"written: repeated {emb['sustained']:.0f} us per search "
          f"({emb['sustained'] / emb['plain mean']:.1f}x the plain search's mean of "
          f"{emb['plain mean']:.0f} us), every cache off {emb['sustained, new']:.0f} us "
          f"({emb['sustained, new'] / emb['plain mean']:.1f}x)")


def report_es(es: dict) -> None:
    print("\n(b) Elasticsearch stand-in, the same queries")
    times = es["times"]
    table([("plain top-10 multi_match search", times["plain"]),
           ("reranked (backend.fetch_sources: shown, the default)", times["reranked"]),
           ("reranked, every _source with the search (candidates)",
            times["reranked, sources with the search"])])
    for name in ("reranked", "reranked, sources with the search"):
        print(f"  {name} / plain (median): {times[name][0] / times['plain'][0]:.1f}x")
    print(f"  {'per search (mean)':<36}{'requests':>10}{'bytes sent':>12}"
          f"{'bytes received':>16}{'stand-in us':>13}{'rest us':>10}")
    for label, (requests, sent, received, serving, rest) in es["traffic"].items():
        print(f"  {label:<36}{requests:>10.1f}{sent:>12.0f}{received:>16.0f}"
              f"{serving:>13.0f}{rest:>10.0f}")
    print("  (stand-in: its own time answering, mostly its Python evaluation of the queries; "
          "rest: the client's, the layer's and the connection's)")


def report_local(local: dict) -> None:
    print("\n(c) in process, 100 candidates, 7 features")
    table([("features + normalisation + preference_perceptron rank", local["layer"]),
           ("  the same through the validating public Learner.rank", local["validating"]),
           ("floor: bare np.argsort(-(X @ w))", local["floor"])])
    print(f"  layer / floor (median): {local['layer'][0] / local['floor'][0]:.1f}x")


if __name__ == "__main__":
    main()
