"""The sgl-router / smg line grammar, for any loader that reads router logs (one implementation).

The engine loader reads router files through the catalogue (kinds ``router_request``,
``router_pd_error``, ...). A gateway preset that treats the router as a front door calls
:func:`parse_router_lines` instead of parsing the lines again: one row per physical line, the
request fields filled for request lines (``finished processing request`` /
``request failed with ...``), nested spans and latency units included, with the same rules.

Example:
    >>> t = parse_router_lines(b'2026-09-02 04:51:59  INFO http_request{method=POST uri=/v1/chat/completions '
    ...                        b'request_id="r-1" status_code=200 latency=41877310}: smg::response: '
    ...                        b'src/middleware.rs:359: finished processing request\\nnot a router line\\n')
    >>> t.column("is_request").to_pylist(), t.column("request_id").to_pylist(), t.column("latency_us").to_pylist()
    ([True, False], ['r-1', None], [41877310, None])
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from forensics.sources.engine import extract_http as xh
from forensics.sources.engine.catalogue import catalogue
from forensics.sources.engine.classify import classify
from forensics.sources.engine.prefix import LEVELS, NO_TS, P_ROUTER, scan_prefixes
from forensics.sources.engine.read import Repairs, repair
from forensics.sources.engine.spans import int_array, parse_ints, to_strings
from forensics.sources.lines import LineBatch

#: The kinds that are request lines (their fields filled).
REQUEST_KINDS = ("router_request", "router_request_cut")


def parse_router_lines(data: bytes | LineBatch, *, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """Every line of router log text as a row: ``line_no``, ``byte_offset``, ``ts`` (UTC, NULL when
    the line has no router time), ``level``, ``kind`` (the catalogue's), ``is_request``, and for
    request lines ``request_id``, ``method``, ``uri``, ``status``, ``latency_us``, ``target``,
    ``message``."""
    batch = repair(data if isinstance(data, LineBatch) else LineBatch.from_bytes(data), Repairs())
    con = con or duckdb.connect()
    cat = catalogue()
    pfx = scan_prefixes(batch)
    kinds = classify(batch, pfx, cat)
    names = np.array(cat.names, dtype=object)
    kind_names = names[kinds]
    req = np.isin(kind_names, REQUEST_KINDS)
    buf = batch.buf
    sp, lat, lat_ok = xh.scan_router(buf, pfx.msg_start, batch.ends)
    for f in range(sp.shape[1]):
        sp[~req, f, 0] = -1
    ts = np.where(pfx.kind == P_ROUTER, pfx.ts_us, NO_TS)
    status_v, status_st = parse_ints(buf, sp[:, xh.R_STATUS, 0], sp[:, xh.R_STATUS, 1])
    return pa.table({
        "line_no": pa.array(batch.line_no), "byte_offset": pa.array(batch.offset),
        "ts": pa.array(ts, type=pa.int64(), mask=ts == NO_TS).cast(pa.timestamp("us")),
        "level": pa.array([LEVELS[x - 1] if x > 0 else None for x in pfx.level.tolist()], type=pa.string()),
        "kind": pa.array(kind_names.tolist(), type=pa.string()),
        "is_request": pa.array(req),
        "request_id": to_strings(buf, sp[:, xh.R_REQUEST_ID, 0], sp[:, xh.R_REQUEST_ID, 1]),
        "method": to_strings(buf, sp[:, xh.R_METHOD, 0], sp[:, xh.R_METHOD, 1]),
        "uri": to_strings(buf, sp[:, xh.R_URI, 0], sp[:, xh.R_URI, 1]),
        "status": int_array(con, buf, sp[:, xh.R_STATUS, 0], sp[:, xh.R_STATUS, 1], status_v, status_st,
                            pa.int32()),
        "latency_us": pa.array(lat, mask=~(lat_ok & req)),
        "target": to_strings(buf, sp[:, xh.R_TARGET, 0], sp[:, xh.R_TARGET, 1]),
        "message": to_strings(buf, sp[:, xh.R_MESSAGE, 0], sp[:, xh.R_MESSAGE, 1]),
    })
