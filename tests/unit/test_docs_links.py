"""Every relative link of the README and docs/ leads to a file that exists: the pages moved once
(issue 28) and point at each other."""

import re

import pytest

from indexer.testing.cluster import REPO

PAGES = [REPO / "README.md", REPO / "BENCHMARKS.md", REPO / "RELIABILITY.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page):
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    assert [t for t in links if not t.startswith(("http://", "https://")) and not (page.parent / t).exists()] == []
