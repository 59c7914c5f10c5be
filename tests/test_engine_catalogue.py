"""The line-kind catalogue (kinds.toml): every sample line gives its kind and values, the docs match."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from forensics.case import open_case
from forensics.sources.engine.catalogue import catalogue, docs_table, load
from forensics.sources.engine.scan import probe

ROOT = Path(__file__).resolve().parent.parent
CAT = catalogue()

SAMPLES = [(k.name, s.line, s.expect) for k in CAT.kinds for s in k.samples]


@pytest.mark.parametrize(("name", "line", "expect"), SAMPLES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SAMPLES)])
def test_sample_line_gives_its_kind_and_values(name: str, line: str, expect: dict[str, Any]) -> None:
    p = probe(line)
    assert p.kind == name
    kind = CAT.kind(name)
    assert p.table == ("engine_startup_facts" if kind.extractor == "startup" else kind.table)
    for col, want in expect.items():
        got = p.row.get(col)
        if want == "__null__":  # TOML has no null
            want = None
        if isinstance(want, float):
            assert got == pytest.approx(want), col
        else:
            assert got == want, col


def test_every_bulk_kind_has_a_sample() -> None:
    """A kind read by a compiled extractor or by field rules is documented by at least one sample line."""
    missing = [k.name for k in CAT.kinds if (k.extractor or k.fields) and not k.samples
               and k.extractor not in ("request_json", "request_metrics", "startup")]
    assert missing == []


def test_fields_are_columns_of_their_table() -> None:
    con = open_case(":memory:").con
    for k in CAT.kinds:
        cols = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = $t",
                                          {"t": k.table}).fetchall()}
        assert cols, k.table
        assert {f.name for f in k.fields} <= cols, k.name


def test_docs_kinds_table_is_generated_from_the_catalogue() -> None:
    text = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- kinds:begin -->\n(.*?)\n<!-- kinds:end -->", text, re.S)
    assert m, "docs/engine.md lacks the <!-- kinds:begin --> / <!-- kinds:end --> block"
    assert m.group(1) == docs_table(), (
        "docs/engine.md's kinds table is stale: regenerate it with "
        "python -m forensics.sources.engine docs/engine.md")


@pytest.mark.parametrize(
    ("toml", "error"),
    [
        ('[[kind]]\nname = "a"\ntable = "t"\n[[kind]]\nname = "a"\ntable = "t"\n', "duplicate kind names"),
        ('[[kind]]\nname = "a"\ntable = "t"\nmatch = [{ contains = "x" }]\n', "2 bytes or more"),
    ],
)
def test_bad_catalogue_is_refused(toml: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        load(toml)


def test_classification_order_is_the_catalogue_order() -> None:
    """A Finish record quoting a rejection message is still a request record (earlier entry wins)."""
    line = ("[2025-09-01 08:01:06] Finish: obj=GenerateReqInput(rid='a'), out={'meta_info': {'id': 'a', "
            "'finish_reason': {'type': 'abort', 'message': 'Input length (9 tokens) exceeds the maximum allowed "
            "length (5 tokens)'}}}")
    p = probe(line)
    assert (p.kind, p.row["finish_type"]) == ("req_finished", "abort")
    assert CAT.index("req_finished") < CAT.index("rej_input_length")


@pytest.mark.parametrize(("headers", "request_id"), [
    ("{'x-request-id': 'a'}", "a"),
    ("{'X-Request-Id': 'a'}", "a"),  # names compared in lower case
    ("{'x-trace-id': 't', 'x-request-id': 'a'}", "a"),  # the order of preference, not the dict's
    ("{'x-trace-id': 't', 'user-agent': 'curl'}", "t"),
    ("{'x-request-id': 'a', 'X-Request-ID': 'b'}", None),  # a name repeated: which one is unknown
    ("{'user-agent': 'curl'}", None),
])
def test_header_request_id_is_kept_and_the_headers_are_not_stored(headers: str, request_id: str | None) -> None:
    p = probe(f"[2025-09-01 08:01:00] Receive: obj=GenerateReqInput(rid='r1', text='x'), headers={headers}")
    assert (p.row["header_request_id"], "headers" in p.row) == (request_id, False)
