"""Trust no client (docs/reference/security.md), through real HTTP against the real app on
a real embedded index and event store: signed impression ids bound to whom they were served,
refusals counted by reason, limits per client and per impression, API keys, the address
behind a trusted proxy, key rotation, and the per-client budget of the trainer."""

import time

import pytest

from reranker.api.openapi import REPORT_PATHS
from reranker.core.config import load_config
from reranker.core.errors import ConfigError
from reranker.models.budget import ClientBudget
from reranker.serving.service import RerankerService
from reranker.serving.trust import Binding, ImpressionSigner, parse_keys
from tests.support.configs import write_config
from tests.support.servers import LiveServer, run_cli

KEYS = "RERANKER_SIGNING_KEYS"
OLD = "old:" + "o" * 32
NEW = "new:" + "n" * 32


def served(live, **ids):
    page = live.post("/search", {"query": "espresso grinder", **ids})
    assert page.status_code == 200, page.text
    return page.json()


def click(live, page, rank=0, **ids):
    return live.post("/click", {"impression_id": page["impression_id"],
                                "doc_id": page["hits"][rank]["id"], **ids})


def error_of(response, status):
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["status"] == status
    return error


@pytest.fixture
def server_for(workdir):
    """``server_for(**sections)``: a live server over the workdir's index and store."""
    servers = []

    def start(**sections):
        servers.append(LiveServer(write_config(workdir, **sections)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def rejected(live, endpoint="click"):
    return dict(live.service.trust.rejected_by_reason(endpoint))


def test_an_impression_id_is_a_compact_signed_token(live):
    page = served(live)
    token = page["impression_id"]
    kid, _, data = token.partition(".")
    assert kid and len(data) == 59 and len(token) < 80
    assert set(data) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert click(live, page).status_code == 202
    # the token is the impression's id in the store as well
    assert live.service.events.get_impression(token).clicked == [page["hits"][0]["id"]]


def test_forged_ids_are_refused_and_counted(live):
    page = served(live)
    token = page["impression_id"]
    doc = page["hits"][0]["id"]
    last = "A" if token[-1] != "A" else "B"
    forgeries = [token[:-1] + last,  # a changed signature
                 token[:10] + ("x" if token[10] != "x" else "y") + token[11:],  # changed data
                 "zz" + token[token.index("."):],  # a key id nobody has
                 token.partition(".")[2],  # no key id
                 "0123456789abcdef0123456789abcdef"]  # an id of the old, unsigned kind
    for forged in forgeries:
        error = error_of(live.post("/click", {"impression_id": forged, "doc_id": doc}), 403)
        assert error["field"] == "impression_id"
        assert "'impression_id' is not accepted" in error["message"]
        error = error_of(live.post("/reward", {"impression_id": forged, "value": 1}), 403)
        assert error["field"] == "impression_id"
        error = error_of(live.post("/explain", {"impression_id": forged}), 403)
        assert error["field"] == "impression_id"
    assert rejected(live) == {"forged": len(forgeries)}
    assert rejected(live, "reward") == {"forged": len(forgeries)}
    assert rejected(live, "explain") == {"forged": len(forgeries)}
    # the genuine id still explains its page, whoever asks
    assert live.post("/explain", {"impression_id": token}).json()["impression_id"] == token
    assert live.service.events.get_impression(token).clicked == []


def test_a_page_served_to_a_user_accepts_only_that_users_clicks(live):
    page = served(live, user_id="alice", session_id="s-a")
    for ids, field in [({}, "user_id"), ({"user_id": "mallory"}, "user_id"),
                       ({"session_id": "s-a"}, "session_id"),  # the user decides
                       ({"user_id": "mallory", "session_id": "s-a"}, "user_id")]:
        error = error_of(click(live, page, **ids), 403)
        assert error["field"] == field
        assert "served to another user or session" in error["message"]
    reward = live.post("/reward", {"impression_id": page["impression_id"], "value": 1.0,
                                   "user_id": "mallory"})
    assert error_of(reward, 403)["field"] == "user_id"
    assert rejected(live) == {"foreign": 4} and rejected(live, "reward") == {"foreign": 1}
    assert click(live, page, user_id="alice").status_code == 202
    assert live.post("/reward", {"impression_id": page["impression_id"], "value": 1.0,
                                 "user_id": "alice"}).status_code == 202


def test_a_page_served_to_a_session_accepts_that_sessions_clicks(live):
    page = served(live, session_id="s-1")
    assert error_of(click(live, page, session_id="s-2"), 403)["field"] == "session_id"
    assert error_of(click(live, page), 403)["field"] == "user_id"
    assert click(live, page, session_id="s-1").status_code == 202
    # extra ids do not hurt: the page was served to the session
    assert click(live, page, 1, session_id="s-1", user_id="later-login").status_code == 202


def test_an_anonymous_page_accepts_anyones_clicks(live):
    page = served(live)
    assert click(live, page, 0).status_code == 202
    assert click(live, page, 1, user_id="someone").status_code == 202


def test_expired_ids_are_refused_with_410(live):
    page = served(live, session_id="s")
    signer = live.service.trust.signer
    signer.clock = lambda: time.time() + signer.ttl + 5  # an hour and more later
    error = error_of(click(live, page, session_id="s"), 410)
    assert error["field"] == "impression_id"
    assert "expired" in error["message"] and "security.impression_ttl" in error["message"]
    assert rejected(live) == {"expired": 1}


def test_a_click_replayed_on_a_page_already_trained_on_is_refused(live):
    page = served(live)
    assert click(live, page).status_code == 202
    again = click(live, page)  # a repeated beacon while the page is open: harmless
    assert again.status_code == 202 and again.json()["duplicate"] is True
    live.service.trainer.run_once(close_all=True)
    error = error_of(click(live, page, 1), 409)
    assert "no longer accepts clicks" in error["message"]
    assert rejected(live) == {"replayed": 1}


def test_per_impression_click_limit(server_for):
    live = server_for(security={"clicks_per_impression": 2})
    page = served(live)
    assert click(live, page, 0).status_code == 202
    assert click(live, page, 1).status_code == 202
    response = click(live, page, 2)
    error = error_of(response, 429)
    assert error["field"] == "impression_id"
    assert "security.clicks_per_impression" in error["message"]
    assert int(response.headers["Retry-After"]) >= 1
    assert rejected(live) == {"impression_limit": 1}
    assert click(live, served(live), 0).status_code == 202  # another page has its own


def test_per_client_search_and_click_limits(server_for):
    live = server_for(security={"searches_per_minute": 3, "clicks_per_minute": 2})
    pages = [served(live, user_id="u1") for _ in range(3)]
    response = live.post("/search", {"query": "tea", "user_id": "u1"})
    error = error_of(response, 429)
    assert "security.searches_per_minute" in error["message"]
    assert 1 <= int(response.headers["Retry-After"]) <= 20  # a token comes back every 20 s
    # the message says the header's wait (rounded up, never "retry in 0 s")
    assert error["message"].endswith(f"retry in {response.headers['Retry-After']} s")
    served(live, user_id="u2")  # another user has a budget of its own
    served(live, session_id="s")  # and so has a session ...
    served(live)  # ... and an anonymous client, by its address
    assert click(live, pages[0], user_id="u1").status_code == 202
    assert click(live, pages[1], user_id="u1").status_code == 202
    assert error_of(click(live, pages[2], user_id="u1"), 429)["message"].endswith(" s")
    assert rejected(live, "search") == {"rate_limited": 1}
    assert rejected(live, "click") == {"rate_limited": 1}


def test_the_address_behind_a_trusted_proxy(server_for):
    live = server_for(security={"searches_per_minute": 1,
                                "trusted_proxy_header": "X-Forwarded-For"})

    def search(forwarded):
        return live.post("/search", {"query": "tea"},
                         headers={"X-Forwarded-For": forwarded})

    assert search("203.0.113.7").status_code == 200
    # the nearest proxy appends the address it saw: the client cannot choose it
    assert search("198.51.100.1, 203.0.113.7").status_code == 429
    third = search("203.0.113.8")
    assert third.status_code == 200, third.text


def test_without_a_trusted_proxy_the_header_is_ignored(server_for):
    live = server_for(security={"searches_per_minute": 1})
    assert live.post("/search", {"query": "tea"},
                     headers={"X-Forwarded-For": "203.0.113.7"}).status_code == 200
    assert live.post("/search", {"query": "tea"},
                     headers={"X-Forwarded-For": "203.0.113.8"}).status_code == 429


def test_an_api_key_guards_search_and_explain(server_for, monkeypatch):
    monkeypatch.setenv("SHOP_RERANKER_KEYS", "key-one, key-two")
    live = server_for(security={"api_keys_env": "SHOP_RERANKER_KEYS"})
    body = {"query": "espresso grinder"}
    for headers in [{}, {"X-API-Key": "key-three"}, {"Authorization": "Bearer key"}]:
        response = live.post("/search", body, headers=headers)
        error = error_of(response, 401)
        assert error["field"] == "X-API-Key" and "API key" in error["message"]
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert error_of(live.post("/explain", body), 401)["field"] == "X-API-Key"
    assert rejected(live, "search") == {"unauthorized": 3}
    page = live.post("/search", body, headers={"X-API-Key": "key-two"}).json()
    assert live.post("/search", body,
                     headers={"Authorization": "Bearer key-one"}).status_code == 200
    assert live.post("/explain", body, headers={"X-API-Key": "key-one"}).status_code == 200
    # the page's clicks come from the browser, with the signed id and no key
    assert click(live, page).status_code == 202


def test_the_openapi_document_says_which_endpoints_want_the_api_key(server_for, monkeypatch):
    """Each guarded endpoint answers 401 without the key its description asks for and 200
    with it; the others (the browser's clicks) ask for none."""
    monkeypatch.setenv("SHOP_RERANKER_KEYS", "key-one")
    live = server_for(security={"api_keys_env": "SHOP_RERANKER_KEYS"})
    document = live.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    guarded = {path for path, item in document["paths"].items()
               for operation in item.values() if {} not in operation.get("security", [{}])}
    # the reports too: with API keys, reports_access defaults to api_key
    assert guarded == {"/search", "/explain", "/clicks", *REPORT_PATHS}
    guarded -= set(REPORT_PATHS)
    page = live.post("/search", {"query": "tea"}, headers={"X-API-Key": "key-one"}).json()
    bodies = {"/search": {"query": "tea"}, "/explain": {"query": "tea"},
              "/clicks": {"clicks": [{"impression_id": page["impression_id"],
                                      "doc_id": page["hits"][0]["id"]}]}}
    for path in guarded:
        assert live.post(path, bodies[path]).status_code == 401
        for requirement in document["paths"][path]["post"]["security"]:
            scheme = schemes[next(iter(requirement))]
            headers = ({scheme["name"]: "key-one"} if scheme["type"] == "apiKey"
                       else {"Authorization": "Bearer key-one"})
            assert live.post(path, bodies[path], headers=headers).status_code == 200, path
    assert schemes["adminToken"]["scheme"] == "bearer"
    assert {} in document["paths"]["/healthz"]["get"]["security"]  # optional there


EXPERIMENT = {"mode": "interleave", "name": "trial",
              "arms": {"engine": {"name": "backend_order"}, "random": {"name": "random"}}}


def basic(password, user="anyone"):
    import base64

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.parametrize("access", ["operator", "api_key", None])
def test_the_experiments_results_can_be_kept_to_the_operator_or_the_key_holders(
        server_for, monkeypatch, access):
    """The reports (/experiments, /analytics, /compare and their pages) answer 401 with a
    Basic challenge (a browser asks) to a request without the credential
    security.reports_access asks for, and the results to one with it: as a bearer token, an
    X-API-Key or a Basic password."""
    monkeypatch.setenv("SHOP_RERANKER_KEYS", "key-one")
    live = server_for(experiment=EXPERIMENT,
                      security={"api_keys_env": "SHOP_RERANKER_KEYS",
                                "reports_access": access},
                      server={"admin_token": "operator-secret"})
    key_holders = access != "operator"  # null with API keys: the key holders
    wrong = [{}, {"Authorization": "Bearer nope"}, basic("nope"), {"X-API-Key": "key-two"}]
    if not key_holders:
        wrong += [{"X-API-Key": "key-one"}, basic("key-one")]
    for path in (*REPORT_PATHS[:-1], "/compare.json?query=tea"):
        for headers in wrong:
            response = live.get(path, headers=headers)
            error = error_of(response, 401)
            assert error["field"] == "Authorization"
            assert ("operator's token" if not key_holders else "an API key") in error["message"]
            assert response.headers["WWW-Authenticate"].startswith('Basic realm="reranker')
        right = [{"Authorization": "Bearer operator-secret"}, basic("operator-secret")]
        if key_holders:
            right += [{"X-API-Key": "key-one"}, {"Authorization": "Bearer key-one"},
                      basic("key-one", user="")]
        for headers in right:
            response = live.get(path, headers=headers)
            assert response.status_code == 200, (path, headers, response.text)
    assert live.get("/experiments", headers=basic("operator-secret")).json()["experiment"] \
        == "trial"
    # the search itself is no business of the reports' setting
    assert live.post("/search", {"query": "tea"},
                     headers={"X-API-Key": "key-one"}).status_code == 200


def test_the_results_stay_public_by_default_and_a_missing_credential_stops_start_up(
        server_for, workdir):
    live = server_for(experiment=EXPERIMENT)
    assert live.get("/experiments").status_code == 200
    assert live.get("/dashboard").status_code == 200
    for section, message in (
            ({"security": {"reports_access": "operator"}}, "server.admin_token is not set"),
            ({"security": {"reports_access": "api_key"}}, "security.api_keys_env is not set")):
        path = write_config(workdir, experiment=EXPERIMENT, **section)
        refused = run_cli("serve", "-c", str(path), check=False, timeout=60)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr


def test_an_api_key_variable_that_is_not_set_stops_start_up(workdir, monkeypatch):
    monkeypatch.delenv("SHOP_RERANKER_KEYS", raising=False)
    config = load_config(write_config(workdir, security={"api_keys_env": "SHOP_RERANKER_KEYS"}))
    with pytest.raises(ConfigError, match="SHOP_RERANKER_KEYS, which is unset or empty"):
        RerankerService(config).open()


def test_keys_rotate_the_new_one_signs_and_the_old_one_still_verifies(server_for,
                                                                      monkeypatch):
    monkeypatch.setenv(KEYS, OLD)
    before = server_for()
    old_page = served(before, session_id="s")
    assert old_page["impression_id"].startswith("old.")
    monkeypatch.setenv(KEYS, f"{NEW},{OLD}")
    during = server_for()
    new_page = served(during, session_id="s")
    assert new_page["impression_id"].startswith("new.")
    assert click(during, old_page, session_id="s").status_code == 202
    assert click(during, new_page, session_id="s").status_code == 202
    monkeypatch.setenv(KEYS, NEW)  # the old key dropped, impression_ttl later
    after = server_for()
    error = error_of(click(after, old_page, 1, session_id="s"), 403)
    assert "no configured key has its key id" in error["message"]
    assert click(after, new_page, 1, session_id="s").status_code == 202


def test_without_a_configured_key_processes_sharing_a_store_agree(server_for, monkeypatch):
    monkeypatch.delenv(KEYS, raising=False)
    one, two = server_for(), server_for()  # two services on one event store
    page = served(one, user_id="u")
    assert click(two, page, user_id="u").status_code == 202
    assert served(two)["impression_id"].split(".")[0] == page["impression_id"].split(".")[0]


@pytest.mark.parametrize("text, fragment", [
    ("nocolon", "entry 1 must be kid:secret"),
    ("a b:" + "x" * 20, "entry 1 must be kid:secret"),
    ("k1:short", "shorter than 16 characters"),
    (f"k1:{'x' * 20},k1:{'y' * 20}", "key id 'k1' is given twice"),
])
def test_malformed_signing_keys_name_the_variable_not_the_secret(text, fragment):
    with pytest.raises(ConfigError) as caught:
        parse_keys(text, KEYS)
    assert KEYS in caught.value.message and fragment in caught.value.message
    assert "y" * 20 not in caught.value.message


@pytest.mark.parametrize("key, value, expected", [
    ("client_budget", -1, "security.client_budget must be at least 0"),
    ("impression_ttl", 0, "security.impression_ttl must be at least 1"),
    ("searches_per_minute", "many", "security.searches_per_minute must be an integer"),
    ("trusted_proxy_header", "", "security.trusted_proxy_header must be a non-empty string"),
])
def test_security_settings_are_validated(tmp_path, key, value, expected):
    path = tmp_path / "c.yaml"
    path.write_text(f"security: {{{key}: {value!r}}}\n")
    with pytest.raises(ConfigError, match=f"{path}: {expected}"):
        load_config(path)


def test_a_tokens_binding_is_checked_with_the_key_that_signed_it():
    signer = ImpressionSigner(parse_keys(f"{NEW},{OLD}", KEYS), ttl=60)
    old = ImpressionSigner(parse_keys(OLD, KEYS), ttl=60)
    token = old.sign(Binding.of("alice", None))
    signer.verify(token, "alice", None)
    with pytest.raises(Exception) as caught:
        signer.verify(token, "bob", None)
    assert caught.value.reason == "foreign"


def test_the_budget_decides_each_impression_once():
    budget = ClientBudget(2, window=100.0)
    decisions = [budget.allows("c", seq, created=seq, clicked=True) for seq in range(1, 5)]
    assert decisions == [True, True, False, False]
    # read again (a pass that saved no version): the same decisions, nothing counted twice
    assert [budget.allows("c", seq, seq, True) for seq in range(1, 5)] == decisions
    assert budget.allows("c", 5, created=150.0, clicked=True)  # a new window
    assert budget.allows("other", 6, created=150.0, clicked=True)
    assert budget.allows(None, 7, created=150.0, clicked=True)  # no client: not bounded
    assert budget.allows("c", 8, created=150.0, clicked=False)  # no clicks: nothing to bound


def test_the_budget_bounds_an_address_whatever_ids_it_claims():
    """Ids that are the client's word carry their address's key: each id has its budget,
    and the address one of its own over all of them."""
    budget = ClientBudget(2, window=100.0, address_budget=3)
    minted = [f"session:s{seq}\x1faddress:A" for seq in range(1, 6)]
    assert [budget.allows(c, seq, seq, True) for seq, c in enumerate(minted, 1)] == \
        [True, True, True, False, False]
    assert budget.allows("session:x\x1faddress:B", 6, 6.0, True)  # another address
    # an id over its own budget is passed over even when its address has room
    assert budget.allows("user:u\x1faddress:C", 7, 7.0, True)
    assert budget.allows("user:u\x1faddress:C", 8, 8.0, True)
    assert not budget.allows("user:u\x1faddress:C", 9, 9.0, True)
    # a client known by its address alone counts against that address
    only = ClientBudget(0, window=100.0, address_budget=1)
    assert only.allows("address:D", 10, 10.0, True)
    assert not only.allows("session:y\x1faddress:D", 11, 11.0, True)
    assert only.allows("user:vouched", 12, 12.0, True)  # no address: an API key vouched


def test_the_query_budget_bounds_one_query_whoever_sends_it():
    budget = ClientBudget(0, window=100.0, query_budget=2)
    decisions = [budget.allows(f"address:{i}", i, float(i), True, query="tea kettle")
                 for i in range(1, 5)]
    assert decisions == [True, True, False, False]  # four addresses, one query
    assert budget.allows("address:9", 5, 5.0, True, query="green tea")
    assert budget.allows(None, 6, 6.0, True, query="green tea")  # no client: still counted
    assert not budget.allows(None, 7, 7.0, True, query="green tea")
    assert budget.allows("address:9", 8, 150.0, True, query="tea kettle")  # a new window


def test_an_address_is_limited_whatever_session_ids_it_sends(server_for, monkeypatch):
    proxy = {"searches_per_minute": 0, "clicks_per_minute": 0,
             "address_searches_per_minute": 5, "address_clicks_per_minute": 5,
             "trusted_proxy_header": "X-Forwarded-For"}
    live = server_for(security=proxy)
    one = {"X-Forwarded-For": "203.0.113.9"}
    answers = [live.post("/search", {"query": "tea", "session_id": f"s{i}"}, headers=one)
               for i in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    error = error_of(answers[-1], 429)
    assert "this network address" in error["message"]
    assert "security.address_searches_per_minute" in error["message"]
    assert live.post("/search", {"query": "tea", "session_id": "new"},
                     headers={"X-Forwarded-For": "203.0.113.10"}).status_code == 200
    clicks = [live.post("/click", {"impression_id": a.json()["impression_id"],
                                   "doc_id": a.json()["hits"][0]["id"], "session_id": f"s{i}"},
                        headers=one).status_code for i, a in enumerate(answers[:5])]
    assert clicks == [202] * 5
    refused = live.post("/click", {"impression_id": answers[0].json()["impression_id"],
                                   "doc_id": answers[0].json()["hits"][1]["id"],
                                   "session_id": "s0"}, headers=one)
    assert "security.address_clicks_per_minute" in error_of(refused, 429)["message"]
    # the pages are logged with the address's key after the session's
    imp = live.service.events.get_impression(answers[0].json()["impression_id"])
    assert imp.user_id.startswith("session:s0\x1faddress:")
    # with API keys the site's servers search for their users: no address limit on searches
    monkeypatch.setenv("SHOP_RERANKER_KEYS", "key-one")
    keyed = server_for(security={**proxy, "api_keys_env": "SHOP_RERANKER_KEYS"})
    statuses = {keyed.post("/search", {"query": "tea", "user_id": f"u{i}"},
                           headers={**one, "X-API-Key": "key-one"}).status_code
                for i in range(8)}
    assert statuses == {200}
    page = keyed.post("/search", {"query": "tea", "user_id": "u1"},
                      headers={**one, "X-API-Key": "key-one"}).json()
    assert keyed.service.events.get_impression(page["impression_id"]).user_id == "u1"


def test_the_trainer_passes_over_a_clients_impressions_beyond_its_budget(workdir):
    config = load_config(write_config(workdir, security={"client_budget": 3},
                                      trainer={"enabled": False, "feedback_window": 0.0}))
    service = RerankerService(config).open()
    try:
        for n in range(5):
            for who in ({"session_id": "heavy"}, {"user_id": f"light-{n}"}):
                page = service.search("espresso grinder", **who)
                for rank in (5, 2):
                    service.click(page["impression_id"], page["hits"][rank]["id"], **who)
        report = service.trainer.run_once(close_all=True)
    finally:
        service.close()
    assert report.applied == 10 and report.bounded == 2  # the heavy session's 4th and 5th
    assert report.clicks == 16
