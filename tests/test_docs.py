"""The reference docs keep their rules (docs/README.md): no link leaves the repository, every
link inside it resolves, and no project issue number appears (an upstream source is cited by its
project's name first: "sglang issue #9266")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

#: upstream projects cited in the docs; a number after one of these names is the project's, not ours
UPSTREAM = r"(?:sglang|SGLang|LMCache(?:/LMCache)?|sgl-router|vLLM|containerd|kubernetes|moby)"
CITATION = re.compile(UPSTREAM + r"(?: (?:issues?|PRs?))? ?#\d+(?:(?:,| and|, proposed(?: " + UPSTREAM + r" PRs?)?) #\d+)*")
ISSUE_REF = re.compile(r"#\d+|\b[Ii]ssues? \d+")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (values there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`]+`", "", text)  # a code span may run over a line break


def issue_numbers(text: str) -> list[str]:
    """Issue-like numbers of the prose that are not upstream citations."""
    return ISSUE_REF.findall(CITATION.sub("", prose(text)))


def outside_links(text: str) -> list[str]:
    p = prose(text)
    return re.findall(r"\b(?:https?|ftp)://\S+|\bwww\.\S+", p) + [t for t in LINK.findall(p) if ":" in t]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_has_no_link_outside_the_repository(doc: Path) -> None:
    assert outside_links(doc.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_links_resolve_inside_the_repository(doc: Path) -> None:
    targets = [t.split("#")[0] for t in LINK.findall(prose(doc.read_text(encoding="utf-8")))]
    missing = [t for t in targets if t and not (doc.parent / t).resolve().exists()]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_names_no_project_issue_number(doc: Path) -> None:
    assert issue_numbers(doc.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Issue #11/#14's budget", ["#11", "#14"]),
        ("(issue #11 §3; fixtures", ["#11"]),
        ("the performance work of issue 4", ["issue 4"]),
        ("targets of issues #3–#6", ["#3", "#6"]),
        ("lines posted in sglang issue #6836 and sglang PR #4880", []),
        ("sglang issues #9266 and #12688", []),
        ("LMCache/LMCache#2441", []),
        ("SGLang PRs #36988 and #38935, proposed SGLang PR #38704", []),
        ("a start `prefill-3 #1` in code", []),
        ("```\nsee #12\n```\n", []),
    ],
)
def test_issue_numbers_are_told_from_citations(text: str, found: list[str]) -> None:
    assert issue_numbers(text) == found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("[sqlglot](https://sqlglot.com)", ["https://sqlglot.com)", "https://sqlglot.com"]),
        ("see www.example.org", ["www.example.org"]),
        ("[results](../benchmarks/RESULTS.md) and [design](#design)", []),
        ("`--spark-master k8s://https://api:6443`", []),
    ],
)
def test_outside_links_are_found(text: str, found: list[str]) -> None:
    assert outside_links(text) == found
