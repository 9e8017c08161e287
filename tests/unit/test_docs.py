"""The README stays a user guide and every document is reachable from the docs index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_README_LINES = 220


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES}): " \
                                           f"move measurement logs and details into docs/"


def test_docs_index_lists_every_doc_and_every_link_resolves():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    missing = [name for name in docs if f"]({name})" not in index]
    assert not missing, f"docs/README.md does not index {missing}"
    for source in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for ref in re.findall(r"`(docs/[\w./-]+\.md)`", source.read_text(encoding="utf-8")):
            assert (ROOT / ref).exists(), f"{source.name} names {ref}, which does not exist"
