"""Delivery-retry duplicates: flagged, never deleted (the first copy in the case stays the original)."""

from __future__ import annotations

import duckdb


def flag_duplicates(con: duckdb.DuckDBPyConnection, file_ids: list[int]) -> dict[int, int]:
    """Flag delivery-retry copies (same layer, request_id, ts_start, ts_end) among these files' rows.

    The first occurrence in the case (lowest file_id, then line) stays the original; files are
    loaded in order, so a copy in a later file or later line is the one flagged.
    """
    ids = ", ".join(str(int(i)) for i in file_ids)
    # the first files of a case have no earlier rows to repeat: then the copies within these files
    # are all there is to find (and the second pass and the UNION cost a third: 0.6 -> 0.4 s at 5 M)
    others = con.execute(
        f"SELECT EXISTS (SELECT 1 FROM gateway_requests WHERE file_id NOT IN ({ids}))").fetchall()[0][0]
    across = f"""
        UNION
        SELECT h FROM mine WHERE h IN (
            SELECT hash(layer, request_id, ts_start, ts_end) FROM gateway_requests
            WHERE file_id NOT IN ({ids}) AND request_id IS NOT NULL)""" if others else ""
    # A 64-bit hash narrows the candidates cheaply; the exact comparison is done on those only.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE gateway_duplicate_candidates AS
        WITH mine AS (
            SELECT hash(layer, request_id, ts_start, ts_end) AS h FROM gateway_requests
            WHERE file_id IN ({ids}) AND request_id IS NOT NULL
        )
        SELECT h FROM mine GROUP BY h HAVING count(*) > 1{across}
        """
    )
    if not con.execute("SELECT count(*) FROM gateway_duplicate_candidates").fetchall()[0][0]:
        con.execute("DROP TABLE gateway_duplicate_candidates")
        return {}
    con.execute(
        f"""
        UPDATE gateway_requests SET is_duplicate = true WHERE rowid IN (
            SELECT rid FROM (
                SELECT rowid AS rid, file_id,
                       row_number() OVER (PARTITION BY layer, request_id, ts_start, ts_end
                                          ORDER BY file_id, line_no, rowid) AS k
                FROM gateway_requests
                WHERE request_id IS NOT NULL AND hash(layer, request_id, ts_start, ts_end) IN (SELECT h FROM gateway_duplicate_candidates)
            ) WHERE k > 1 AND file_id IN ({ids}))
        """
    )
    rows = con.execute(
        f"SELECT file_id, count(*) FROM gateway_requests WHERE file_id IN ({ids}) AND is_duplicate GROUP BY file_id"
    ).fetchall()
    con.execute("DROP TABLE gateway_duplicate_candidates")
    return {int(f): int(n) for f, n in rows}
