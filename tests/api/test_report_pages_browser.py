"""The search analytics page and the compare page in a real headless Chromium, against the
real service: the analytics page shows the top query, the totals and a bar per clicked rank
as GET /analytics says; its query links to the compare page, which shows the engine's column
and the arm's, each hit with its features as GET /compare.json says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.headless import chromium, require_browser

require_browser()

WAIT = 15  # seconds, at most, for a page to show its data

#: What the error box says, null when it is hidden.
ERROR = ('document.getElementById("error").hidden ? null : '
         'document.getElementById("error").textContent')

READ_ANALYTICS = """
return {
  window: document.getElementById("window").textContent,
  searches: document.getElementById("total-searches").textContent,
  ctr: document.getElementById("total-ctr").textContent,
  top: Array.from(document.querySelectorAll("#top_queries tbody tr[data-query]"),
                  row => row.getAttribute("data-query")),
  noResult: Array.from(document.querySelectorAll("#no_result tbody tr[data-query]"),
                       row => row.getAttribute("data-query")),
  bars: Array.from(document.querySelectorAll("#click-ranks rect.bar"), bar => ({
    rank: Number(bar.getAttribute("data-rank")), clicks: Number(bar.getAttribute("data-clicks")),
    height: Number(bar.getAttribute("height"))})),
  error: ERROR,
};
""".replace("ERROR", ERROR)

READ_COMPARE = """
return {
  error: ERROR,
  columns: Array.from(document.querySelectorAll("#columns .column"), column => ({
    label: column.getAttribute("data-label"),
    heading: column.querySelector("h2").textContent,
    hits: Array.from(column.querySelectorAll("li.hit"), hit => ({
      id: hit.getAttribute("data-id"),
      rank: hit.querySelector(".hit-rank").textContent,
      where: hit.querySelector(".hit-where").textContent,
      features: Object.fromEntries(Array.from(hit.querySelectorAll("tr.feature"), row => [
        row.getAttribute("data-name"), row.querySelector("td").getAttribute("data-value")])),
      featuresShown: hit.querySelector("tr.feature td").getClientRects().length > 0
    }))
  }))
};
""".replace("ERROR", ERROR)


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    with chromium(WAIT, "--window-size=1280,1000", console_log=True) as browser:
        yield browser


def loaded(driver: webdriver.Chrome, status_id: str) -> None:
    """Wait until the page shows its data, or an error."""
    def done(d: webdriver.Chrome) -> bool:
        if d.find_element(By.ID, status_id).get_dom_attribute("data-loaded") == "true":
            return True
        return d.find_element(By.ID, "error").get_dom_attribute("hidden") is None

    WebDriverWait(driver, WAIT).until(done)


def severe(driver: webdriver.Chrome) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_analytics_page_and_the_compare_page_it_links_to(driver, live):
    pages = [live.post("/search", {"query": "espresso grinder", "size": 5}).json()
             for _ in range(3)]
    live.post("/search", {"query": "zzzz qqqq"})
    for page, rank in zip(pages, (1, 1, 4), strict=True):
        assert live.post("/click", {"impression_id": page["impression_id"],
                                    "doc_id": page["hits"][rank - 1]["id"]}).status_code == 202
    report = live.get("/analytics").json()

    driver.get_log("browser")
    driver.get(live.url + "/dashboard/analytics")
    loaded(driver, "window")
    page = driver.execute_script(READ_ANALYTICS)
    assert page["error"] is None
    assert page["top"] == ["espresso grinder", "zzzz qqqq"]
    assert page["noResult"] == ["zzzz qqqq"]
    assert page["searches"] == str(report["totals"]["searches"]) == "4"
    assert page["ctr"] == f"{100 * report['totals']['ctr']:.0f}%" == "100%"
    assert [(bar["rank"], bar["clicks"]) for bar in page["bars"]] == [
        (entry["rank"], entry["clicks"]) for entry in report["click_ranks"]] == [
        (1, 2), (2, 0), (3, 0), (4, 1)]
    heights = [bar["height"] for bar in page["bars"]]
    assert heights[0] == pytest.approx(2 * heights[3]) and heights[1] == 0
    assert severe(driver) == []

    # the top query's link opens the compare page for it
    driver.find_element(By.CSS_SELECTOR, '#top_queries tr[data-query="espresso grinder"] a'
                        ).click()
    WebDriverWait(driver, WAIT).until(lambda d: "/compare?" in d.current_url)
    loaded(driver, "status")
    shown = driver.execute_script(READ_COMPARE)
    answer = live.get("/compare.json", params={"query": "espresso grinder"}).json()
    assert shown["error"] is None
    engine, arm = shown["columns"]
    assert (engine["label"], engine["heading"]) == ("engine", "Engine's order")
    assert arm["label"] == live.service.arms[0].label
    for column, expected in zip(shown["columns"], answer["columns"], strict=True):
        assert [hit["id"] for hit in column["hits"]] == [hit["id"] for hit in expected["hits"]]
        assert [hit["rank"] for hit in column["hits"]] == [
            str(rank) for rank in range(1, len(expected["hits"]) + 1)]
    first = arm["hits"][0]
    expected = answer["columns"][1]["hits"][0]
    name = answer["features"][0]
    assert float(first["features"][name]) == expected["features"][name]
    assert set(first["features"]) == set(answer["features"]) and first["featuresShown"]
    where = expected["ranks"][0]
    assert f"engine {'#' + str(where) if where else '–'}" in first["where"]
    assert severe(driver) == []
