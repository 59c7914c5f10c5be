"""The seven presets are TOML files in the users' own mapping format; a copy of one is a mapping.

A user's mapping can say everything a preset says (signature, extra fields, per-field SQL, keep),
and its SQL is held to one expression over the record's fields.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import forensics
from forensics.errors import MappingError
from forensics.sources.gateway.mapping import load_mapping_text
from forensics.sources.gateway.presets import PRESETS, preset_toml

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "gateway"

#: preset -> a fixture it reads
PRESET_FIXTURES = {
    "cloudflare-http": "cloudflare_http_ns.ndjson",
    "cloudflare-ai-gateway": "ai_gateway_rest.json",
    "nginx-json": "nginx.ndjson",
    "envoy": "envoy_new.ndjson",
    "litellm": "litellm_spendlogs.csv",
    "otel": "otlp_spans.json",
    "smg-router": "smg_router.log",
}

ROWS = ("SELECT * EXCLUDE (source_format, file_id) FROM gateway_requests ORDER BY line_no, request_id")


def test_every_preset_is_a_shipped_toml_file() -> None:
    assert list(PRESETS) == list(PRESET_FIXTURES)
    for name in PRESETS:
        assert load_mapping_text(preset_toml(name), f"{name}.toml", preset=True) == PRESETS[name]


@pytest.mark.parametrize(("preset", "fixture"), PRESET_FIXTURES.items())
def test_a_copy_of_a_preset_is_a_mapping_that_loads_the_same_rows(tmp_path: Path, preset: str, fixture: str) -> None:
    copy = tmp_path / f"my-{preset}.toml"
    r = subprocess.run([sys.executable, "-m", "forensics", "preset", preset], capture_output=True, text=True,
                       cwd=ROOT, check=True)
    copy.write_text(r.stdout)
    a = forensics.open_case(":memory:")
    b = forensics.open_case(":memory:")
    fa = a.ingest_gateway(FIX / fixture, format=preset).files[0]
    fb = b.ingest_gateway(FIX / fixture, format=str(copy)).files[0]
    assert (fa.lines_read, fa.rows_loaded, fa.rows_rejected) == (fb.lines_read, fb.rows_loaded, fb.rows_rejected)
    assert a.sql(ROWS).fetchall() == b.sql(ROWS).fetchall()
    assert b.sql("SELECT DISTINCT source_format FROM gateway_requests").fetchall() in ([], [(f"mapping:{copy.name}",)])


def test_preset_command_lists_the_presets() -> None:
    r = subprocess.run([sys.executable, "-m", "forensics", "preset"], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    assert [ln.split()[0] for ln in r.stdout.splitlines()] == list(PRESETS)


def test_a_mapping_with_signature_extra_fields_sql_and_keep(tmp_path: Path) -> None:
    mapping = tmp_path / "acme.toml"
    mapping.write_text('''
[gateway]
name = "acme"
layer = "proxy"
signature = [["acme_id"], ["begin"]]
keep = "{f:kind} = 'request'"
keep_reason = "not a request record"

[columns]
request_id = "acme_id"
ts_start = { field = "begin", unit = "ms" }
tenant_id = { field = "account", extra_fields = ["org"], sql = "coalesce({v}, 'org:' || {f:org})" }
model = { field = "model", sql = "lower({v})" }
status = "code"
''')
    data = tmp_path / "acme.ndjson"
    data.write_text(
        '{"acme_id": "a1", "begin": 1788357791482, "account": "t1", "model": "GLM-5", "code": 200, "kind": "request"}\n'
        '{"acme_id": "a2", "begin": 1788357791482, "org": "o9", "model": "GLM-5", "code": 500, "kind": "request"}\n'
        '{"acme_id": "a3", "begin": 1788357791482, "kind": "heartbeat"}\n')
    case = forensics.open_case(":memory:")
    f = case.ingest_gateway(data, format=str(mapping)).files[0]
    assert (f.rows_loaded, f.rows_rejected) == (2, 1)
    assert case.sql("SELECT request_id, tenant_id, model, status FROM gateway_requests ORDER BY 1").fetchall() == [
        ("a1", "t1", "glm-5", 200), ("a2", "org:o9", "glm-5", 500)]
    assert case.sql("SELECT reason FROM rejected_lines").fetchall() == [("not a request record",)]


BAD_SQL = [
    ("a subquery", "(SELECT max(x) FROM read_csv('/etc/passwd'))", "not a query"),
    ("a second statement", "lower({v}); DROP TABLE evidence_files", "one expression"),
    ("not SQL", "lower({v}", "not valid SQL"),
    ("a table function in an expression", "coalesce({v}, (SELECT 1))", "not a query"),
]


@pytest.mark.parametrize(("label", "sql", "message"), BAD_SQL, ids=[b[0] for b in BAD_SQL])
def test_mapping_sql_is_one_expression_over_the_record(label: str, sql: str, message: str) -> None:
    text = f'[columns]\nts_start = "t"\nmodel = {{ field = "m", sql = "{sql}" }}\n'
    with pytest.raises(MappingError, match=message):
        load_mapping_text(text, "evil.toml")
