"""The memory of a serving process: its resident size idle and after many searches, and the
parts it is made of.

On the demo's configuration (the generated corpus in the embedded index, the SQLite store,
the default learner, the trainer on), in one run:

1. a fresh Python process opens the service step by step and prints its resident set size
   (``VmRSS``) after each: the interpreter, numpy, the reranker service's modules, the
   service opened (the index, the store, the plugins, the compiled ranking loops), one
   search, and, as the baseline of what a lazy import saves, ``scipy.stats``, which the
   serving process no longer imports (the experiments' statistics use ``scipy.special``);
2. ``reranker serve`` in a process of its own (one process, no workers), its resident size
   once ready and after ``--searches`` searches with clicks through HTTP from simulated
   users, in steps.

Run: python benchmarks/bench_memory.py [--searches 20000]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
import yaml

from reranker.commands.demo import demo_config
from reranker.offline.click_models import cascade_model
from reranker.offline.democorpus import generate_corpus
from reranker.testing import cli_env, reranker_command

STAGES = r"""
import os, sys, json
def rss():
    for line in open(f"/proc/{os.getpid()}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
out = [("interpreter", rss())]
import numpy
out.append(("numpy", rss()))
import reranker.serving.service, reranker.api.app
out.append(("the service's modules", rss()))
from reranker.core.config import load_config
from reranker.serving.service import RerankerService
service = RerankerService(load_config(sys.argv[1])).open()
out.append(("the service opened (index, store, plugins, compiled loops)", rss()))
service.search("tea kettle", 10)
out.append(("one search", rss()))
import scipy.stats
out.append(("scipy.stats, no longer imported (baseline)", rss()))
service.close()
print(json.dumps(out))
"""


def rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=4, help="lines of the serving part")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    corpus = generate_corpus(7)
    with open(workdir / "docs.jsonl", "w", encoding="utf-8") as handle:
        for doc in corpus.documents:
            handle.write(json.dumps(doc) + "\n")
    config = demo_config("preference_perceptron")
    (workdir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    subprocess.run(reranker_command() + ["index", "-c", str(workdir / "config.yaml"),
                                         str(workdir / "docs.jsonl")],
                   check=True, capture_output=True, env=cli_env())

    stages = json.loads(subprocess.run([sys.executable, "-c", STAGES,
                                        str(workdir / "config.yaml")],
                                       check=True, capture_output=True, text=True,
                                       env=cli_env()).stdout)
    print("the parts of a serving process (resident MB after each step, and what it added):")
    previous = 0.0
    for name, value in stages:
        print(f"  {name:62} {value:7.1f} {value - previous:+7.1f}")
        previous = value
    opened = dict(stages)["one search"]
    with_stats = dict(stages)["scipy.stats, no longer imported (baseline)"]
    print(f"  ratio, without scipy.stats to with it: {opened / with_stats:.2f}")

    log = open(workdir / "serve.log", "w", encoding="utf-8")
    server = subprocess.Popen(reranker_command() + ["serve", "-c", str(workdir / "config.yaml"),
                                                    "--port", "0"],
                              stdout=subprocess.PIPE, stderr=log, text=True, env=cli_env())
    try:
        url = "http://127.0.0.1:" + re.search(r":(\d+)", server.stdout.readline()).group(1)
        while requests.get(url + "/readyz", timeout=30).status_code != 200:
            time.sleep(0.2)
        print(f"reranker serve (one process): {rss(server.pid):.1f} MB once ready")
        users, rng = cascade_model("navigational", 3), np.random.default_rng(0)
        session = requests.Session()
        step = max(1, args.searches // args.steps)
        started = time.perf_counter()
        for t in range(1, args.searches + 1):
            query, topic = corpus.queries[rng.integers(len(corpus.queries))]
            page = session.post(url + "/search", json={"query": query}, timeout=30).json()
            ids = [hit["id"] for hit in page["hits"]]
            labels = np.array([corpus.label(topic, d) for d in ids])
            for j in np.flatnonzero(users.clicks(labels, rng)):
                session.post(url + "/click", json={"impression_id": page["impression_id"],
                                                   "doc_id": ids[j]}, timeout=30)
            if t % step == 0:
                print(f"  after {t:>7,} searches: {rss(server.pid):7.1f} MB "
                      f"({t / (time.perf_counter() - started):.0f} searches/s with clicks)")
    finally:
        server.terminate()
        server.wait(60)
        log.close()


if __name__ == "__main__":
    main()
