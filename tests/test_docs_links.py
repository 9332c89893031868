"""The links of the README, the docs and the results log: every relative link names a
file of the repository, and every ``#anchor`` a heading of its page (GitHub's anchors:
lower case, punctuation dropped, spaces as hyphens). Also the ``docs/<page>.md#anchor``
references in the package's comments and docstrings."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "benchmarks").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
SOURCE_REFERENCE = re.compile(r"docs/([\w\-/]+\.md)(?:#([\w\-]+))?")


def anchors(page: pathlib.Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def broken(page: pathlib.Path, target: str) -> str | None:
    if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return f"{page.relative_to(ROOT)}: {target}: no file {path}"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{page.relative_to(ROOT)}: {target}: no heading #{anchor} in {path or page.name}"
    return None


def test_every_link_of_the_readme_and_docs_leads_somewhere():
    problems = [
        problem
        for page in PAGES
        for target in LINK.findall(page.read_text())
        if (problem := broken(page, target))
    ]
    assert not problems, "\n".join(problems)


def test_the_packages_references_to_the_docs_lead_somewhere():
    problems = []
    for source in sorted((ROOT / "recsys_dist").rglob("*.py")):
        for page, anchor in SOURCE_REFERENCE.findall(source.read_text()):
            file = ROOT / "docs" / page
            if not file.exists() or (anchor and anchor not in anchors(file)):
                problems.append(f"{source.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert not problems, "\n".join(problems)
