"""The documentation site builds in strict mode (no broken link or anchor, no warning), its
nav and the pages in docs/ are the same set, and the README's links lead somewhere."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.support.paths import ROOT

DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"


def nav_pages(entries) -> list[str]:
    """Every page a nav (a list of pages, {title: page} and {title: [...]}) names."""
    pages = []
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            if isinstance(value, list):
                pages += nav_pages(value)
            elif not re.match(r"[a-z]+://", value):
                pages.append(value)
    return pages


def config() -> dict:
    return yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))


def test_the_nav_and_the_pages_in_docs_are_the_same_set():
    settings = config()
    assert settings["docs_dir"] == "docs" and settings["strict"] is True
    pages = nav_pages(settings["nav"])
    assert len(pages) == len(set(pages)), "a page is twice in the nav"
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"in mkdocs.yml's nav but not in docs/: {missing}"
    files = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    left_out = [path for path in files if path not in pages]
    assert not left_out, f"in docs/ but not in mkdocs.yml's nav: {left_out}"


def test_the_site_builds_in_strict_mode(tmp_path):
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[test]' installs mkdocs "
                        "and mkdocs-material): the documentation site is not built")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(MKDOCS_YML),
         "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()
    for page in nav_pages(config()["nav"]):
        built = site / page.removesuffix(".md") / "index.html"
        if page == "index.md":
            built = site / "index.html"
        assert built.is_file(), page


def slug(heading: str) -> str:
    """The anchor of a heading, as GitHub and the site's table of contents make it."""
    heading = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", heading)


def test_the_readme_links_lead_to_pages_and_their_headings():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.*)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(heading) for heading in headings}, link
