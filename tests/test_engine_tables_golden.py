"""The engine tables, row for row, on the bundled sample and on a generated incident (golden).

Each golden holds, per table and source file, the row count and a digest of the sorted row
fingerprints (every column but ``file_id`` and ``byte_offset``, keyed by the file's path relative
to the ``engine/`` directory). The first version of both goldens was written from the previous
loader (classification and extraction in DuckDB SQL, commit 4b0f4ad) and the scanner reproduced
it exactly: this is the row-for-row comparison of the two loaders, kept as the guard of every
later change.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import GoldenCheck

from forensics.case import open_case

ROOT = Path(__file__).resolve().parent.parent

TABLES = ("engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
          "router_requests", "engine_other_lines", "engine_startup_facts", "engine_starts", "rejected_lines")


def table_digests(con: duckdb.DuckDBPyConnection) -> str:
    """Per table and file: row count and sha256 of the sorted md5 of each row (text, one line each)."""
    out = []
    for t in TABLES:
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $t AND table_schema = 'main' "
            "ORDER BY ordinal_position", {"t": t}).fetchall() if r[0] not in ("file_id", "byte_offset")]
        row = "concat_ws(chr(31), " + ", ".join(f"coalesce(CAST(t.{c} AS VARCHAR), chr(0))" for c in cols) + ")"
        rows = con.execute(
            f"""SELECT regexp_replace(f.path, '^.*/engine/', '') AS rel, count(*),
                       sha256(string_agg(md5({row}), '' ORDER BY md5({row})))
                FROM {t} t JOIN evidence_files f USING (file_id) GROUP BY rel ORDER BY rel""").fetchall()
        for rel, n, digest in rows:
            out.append(f"{t}\t{rel}\t{n}\t{digest[:16]}")
    return "\n".join(out) + "\n"


@pytest.mark.golden
@pytest.mark.slow
def test_engine_tables_of_the_sample(golden: GoldenCheck) -> None:
    case = open_case(":memory:")
    case.ingest_engine([ROOT / "sample_data" / "engine"], tz="Asia/Singapore")
    golden("engine_tables_sample.tsv", table_digests(case.con))


@pytest.mark.golden
@pytest.mark.slow
def test_engine_tables_of_a_generated_incident(golden: GoldenCheck, tmp_path: Path) -> None:
    from forensics.sample import generate

    generate(tmp_path / "inc", requests=4000, seed=20261201)
    case = open_case(":memory:")
    case.ingest_engine([tmp_path / "inc" / "engine"], tz="Asia/Singapore")
    golden("engine_tables_generated.tsv", table_digests(case.con))


def test_digest_ignores_file_ids_and_order() -> None:
    """Two cases holding the same rows under other file_ids give the same digest."""
    a, b = duckdb.connect(), duckdb.connect()
    for con, fid in ((a, 1), (b, 7)):
        open_case(":memory:")  # schema text below is the case's own
        from forensics.schema import schema_sql

        con.execute(schema_sql())
        con.execute(f"INSERT INTO evidence_files (file_id, path, sha256, size, kind) VALUES ({fid}, '/x/engine/n/a.log', "
                    "'s', 1, 'engine')")
    a.execute("INSERT INTO engine_http (node, pod, status, file_id, line_no) VALUES ('n', 'n', 200, 1, 1), ('n', 'n', 404, 1, 2)")
    b.execute("INSERT INTO engine_http (node, pod, status, file_id, line_no) VALUES ('n', 'n', 404, 7, 2), ('n', 'n', 200, 7, 1)")
    assert table_digests(a) == table_digests(b)
    b.execute("UPDATE engine_http SET status = 500 WHERE line_no = 2")
    assert table_digests(a) != table_digests(b)
