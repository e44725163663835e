"""Debian's Chromium, headless, driven by selenium: what the browser tests share."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def require_browser() -> None:
    """Skip the calling test module, with the reason, when either binary is missing (`make
    test` installs both where it can)."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(binary) and shutil.which(binary)):
            pytest.skip(f"the browser tests need Chromium ({CHROMIUM}) and chromedriver "
                        f"({CHROMEDRIVER}); {binary} is missing", allow_module_level=True)


@contextlib.contextmanager
def chromium(page_load_timeout: float, *arguments: str,
             console_log: bool = False) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile and no background traffic (the machine may
    have no internet access)."""
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run",
                     *arguments):
        options.add_argument(argument)
    profile = tempfile.mkdtemp(prefix="reranker-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(page_load_timeout)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
