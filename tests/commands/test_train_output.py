"""What `reranker train` says of the pages it applied without learning from them."""

import re

from reranker.core.config import load_config
from reranker.serving.service import RerankerService
from tests.support.servers import run_cli


def test_train_says_how_many_pages_the_query_balance_passed_over(workdir):
    service = RerankerService(load_config(workdir / "config.yaml")).open()
    try:  # three queries searched once, then one forty times: the balance passes over
        for query in ["green tea", "tea cup", "black tea"] + ["tea kettle"] * 40:
            page = service.search(query, 10)
            service.click(page["impression_id"], page["hits"][3]["id"])
    finally:
        service.close()
    out = run_cli("train", "-c", str(workdir / "config.yaml"), "--close-all").stdout
    found = re.search(r"(\d+) pages of frequent queries passed over by the query balance", out)
    assert found and 0 < int(found.group(1)) < 40, out
