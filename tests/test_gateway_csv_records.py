"""A CSV record of the wrong width is rejected with its reason, file and line, never loaded cut or padded.

DuckDB's non-strict CSV reader silently drops the fields beyond the header's; its strict mode
refuses a whole file whose lines end in both CRLF and LF. ``csv_records`` reads one column more
than the header and keeps empty fields apart from missing ones, so each record is judged alone.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import forensics

HEADER = ("request_id,call_type,api_key,spend,total_tokens,prompt_tokens,completion_tokens,startTime,"
          "endTime,completionStartTime,model,model_group,api_base,user,metadata,team_id,end_user,"
          "status,organization_id,session_id")
REDACTED = b" <redacted: rest of line>"


def row(rid: str, metadata: str = "{}", team: str = "team-a", tail: str = "o,s") -> str:
    return (f"{rid},acompletion,h,0.1,3,2,1,2026-09-02 12:51:01,2026-09-02 12:52:00,"
            f"2026-09-02 12:52:00,m,m,http://x,u,{metadata},{team},c,success,{tail}")


# (label, lines after the header with their line ends, loaded request_ids, rejects (line, reason))
CASES = [
    ("extra-field", [row("r-1") + "\n", row("r-2") + ",EXTRA\n", row("r-3") + "\n"],
     ["r-1", "r-3"], [(3, "CSV row has too many fields")]),
    ("extra-empty-field", [row("r-1") + ",\n", row("r-2") + "\n"], ["r-2"], [(2, "CSV row has too many fields")]),
    ("two-extra-fields", [row("r-1") + ",x,y\n", row("r-2") + "\n"], ["r-2"], [(2, "CSV row has too many fields")]),
    ("short-row", [row("r-1") + "\n", "r-x,acompletion,h\n", row("r-3") + "\n"],
     ["r-1", "r-3"], [(3, "CSV row has too few fields")]),
    ("last-field-missing", [row("r-1", tail="o") + "\n", row("r-2") + "\n"], ["r-2"],
     [(2, "CSV row has too few fields")]),
    ("last-field-empty", [row("r-1", tail="o,") + "\n", row("r-2") + "\n"], ["r-1", "r-2"], []),
    ("quoted-comma", [row("r-1", '"{""note"": ""a, b, c""}"') + "\n", row("r-2", '"x,y"') + ",EXTRA\n"],
     ["r-1"], [(3, "CSV row has too many fields")]),
    ("mixed-crlf-lf", [row("r-1") + "\r\n", row("r-2") + "\n", row("r-3") + ",EXTRA\r\n", row("r-4") + "\r\n",
                       "r-x,acompletion\n", row("r-6") + "\n"],
     ["r-1", "r-2", "r-4", "r-6"], [(4, "CSV row has too many fields"), (6, "CSV row has too few fields")]),
    ("bom", ["\ufeff" + row("r-1") + "\n", row("r-2") + ",EXTRA\n"], ["r-1"], [(3, "CSV row has too many fields")]),
    ("quoted-newline-then-extra", [row("r-1", '"{""note"": ""two\nlines""}"') + "\n", row("r-3") + ",EXTRA\n",
                                   row("r-4") + "\n"], ["r-1", "r-4"], [(4, "CSV row has too many fields")]),
]


@pytest.mark.parametrize(("label", "lines", "loaded", "rejects"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("compress", ["none", "gzip"])
def test_csv_record_of_the_wrong_width_is_rejected_not_cut(tmp_path: Path, label: str, lines: list[str],
                                                           loaded: list[str], rejects: list[tuple[int, str]],
                                                           compress: str) -> None:
    if label == "bom":  # the byte-order mark starts the file, before the header
        text = "\ufeff" + HEADER + "\n" + lines[0].removeprefix("\ufeff") + "".join(lines[1:])
    else:
        text = HEADER + "\n" + "".join(lines)
    data = text.encode()
    p = tmp_path / ("SpendLogs.csv.gz" if compress == "gzip" else "SpendLogs.csv")
    p.write_bytes(gzip.compress(data) if compress == "gzip" else data)
    case = forensics.open_case(":memory:")
    f = case.ingest_gateway(p, format="litellm").files[0]
    assert f.reconciles and not f.warnings, f.warnings
    assert (f.lines_read, f.rows_loaded, f.rows_rejected) == (len(loaded) + len(rejects), len(loaded), len(rejects))
    got = case.sql("SELECT request_id FROM gateway_requests ORDER BY line_no").fetchall()
    assert [r for (r,) in got] == loaded
    physical = data.split(b"\n")
    for line_no, rid in case.sql("SELECT line_no, request_id FROM gateway_requests").fetchall():
        assert physical[line_no - 1].lstrip("\ufeff".encode()).startswith(rid.encode() + b","), (line_no, rid)
    kept = case.sql("SELECT line_no, reason, raw, raw_length FROM rejected_lines ORDER BY line_no").fetchall()
    assert [(ln, reason) for ln, reason, _, _ in kept] == rejects
    for line_no, _, raw, _ in kept:
        # the record's own bytes at its line, cut at its first text column (api_key): the extra
        # field, like any field after a prompt column, is never stored
        original = physical[line_no - 1]
        assert raw.endswith(REDACTED) and original.startswith(raw.removesuffix(REDACTED)), (raw, original)
        assert b"api_key" not in raw and b"EXTRA" not in raw and raw.count(b",") <= 2, raw


def test_csv_empty_fields_read_as_before(tmp_path: Path) -> None:
    # empty and quoted-empty fields are NULL, as DuckDB's default reading gave them (the reader now
    # keeps them as '' only to tell a missing field from an empty one)
    p = tmp_path / "SpendLogs.csv"
    p.write_text(HEADER + "\n" + row("r-1", team="") + "\n" + row("r-2", team='""') + "\n")
    case = forensics.open_case(":memory:")
    case.ingest_gateway(p, format="litellm")
    assert case.sql("SELECT request_id, tenant_id FROM gateway_requests ORDER BY line_no").fetchall() == [
        ("r-1", None), ("r-2", None)]


def test_a_litellm_csv_larger_than_the_memory_limit_loads(tmp_path: Path) -> None:
    # DuckDB's single-threaded CSV reader held memory in proportion to the file: a 1.43 GB export
    # ran out of the 572 MiB load budget. 66 MB of records under a 128 MB limit needed more than
    # 192 MB that way; read in parallel (8 MiB buffers) it needs under 96 MB, whatever the size.
    # Two threads: the parallel reader's buffers in flight grow with the thread count.
    p = tmp_path / "SpendLogs.csv"
    prompt = '"{""messages"": ""' + "x" * 800 + '""}"'
    n = 70_000
    with p.open("w") as fh:
        fh.write(HEADER + "\n")
        fh.writelines(row(f"r-{i}", prompt, team=f"team-{i % 7}") + "\n" for i in range(n))
        fh.write(row("r-extra") + ",EXTRA\n")  # line n + 2: rejected whole, under the limit too
        fh.write(row(f"r-{n - 1}", prompt, team=f"team-{(n - 1) % 7}") + "\n")  # a delivery retry
    assert p.stat().st_size > 60 << 20
    case = forensics.open_case(tmp_path / "case.duckdb", memory_limit="128MB", threads=2)
    f = case.ingest_gateway(p, format="litellm").files[0]
    assert f.reconciles and not f.warnings, f.warnings
    assert (f.lines_read, f.rows_loaded, f.rows_rejected, f.rows_duplicate) == (n + 2, n, 1, 1)
    assert case.sql("SELECT line_no, reason FROM rejected_lines").fetchall() == [
        (n + 2, "CSV row has too many fields")]
    assert case.sql("SELECT min(line_no), max(line_no), count(DISTINCT line_no) FROM gateway_requests "
                    "WHERE NOT is_duplicate").fetchall() == [(2, n + 1, n)]


def test_a_grown_csv_whose_new_records_hold_a_quoted_newline_loads_them(tmp_path: Path) -> None:
    # the new records are read from a private copy; the parallel reader refuses the quoted
    # newline there too, and the copy is read again on one thread, numbered as the file's lines
    p = tmp_path / "SpendLogs.csv"
    p.write_text(HEADER + "\n" + row("r-1") + "\n" + row("r-2") + "\n")
    case = forensics.open_case(tmp_path / "case.duckdb")
    case.ingest_gateway(p, format="litellm")
    with p.open("a") as fh:
        fh.write(row("r-3", '"{""note"": ""two\nlines""}"') + "\n" + row("r-4") + ",EXTRA\n" + row("r-5") + "\n")
    f = case.ingest_gateway(p, format="litellm").files[0]
    assert f.reconciles and (f.lines_read, f.rows_loaded, f.rows_rejected) == (3, 2, 1)
    assert case.sql("SELECT line_no, request_id FROM gateway_requests WHERE file_id = $f ORDER BY line_no",
                    {"f": f.file_id}).fetchall() == [(4, "r-3"), (7, "r-5")]
    assert case.sql("SELECT line_no, reason FROM rejected_lines").fetchall() == [(6, "CSV row has too many fields")]
    assert case.sql("SELECT count(*) FROM evidence_files").fetchall() == [(2,)]
