"""The same analysis as a responder would write it in a notebook, without this toolkit.

This is the baseline of the benchmark's "pandas / toolkit" ratio: plain pandas and Python ``re``,
written straightforwardly (no toolkit code, no DuckDB), but not deliberately slow:

1. Cloudflare ``http_requests`` NDJSON: ``pd.read_json(lines=True)`` per hourly file (falling back
   to ``json.loads`` line by line for a file with a malformed line, as one does after the first
   ``ValueError``); x-request-id from the ``RequestHeaders`` dicts; the tenant from
   ``/accounts/<id>/`` in the path; delivery-retry duplicates dropped.
2. LiteLLM ``SpendLogs`` CSV: ``pd.read_csv`` (only used for tenants/tokens, never for the verdict).
3. Engine logs: every line of every node, in time order (rotated ``.gz`` first), through a few
   ``str`` tests and ``re`` matches: node starts (role from ``disaggregation_mode``, pool from
   ``max_total_num_tokens``, ``context_len``), scheduler rejections (``Input length ... exceeds the
   maximum allowed length ..., self.rid='...'``), ``Receive:`` request lines (rid,
   bootstrap_room, the logged x-request-id header).
4. Merges: rejected rid -> its prefill ``Receive`` (room, x-request-id); rejection time -> the
   node start in force (``merge_asof``), kept when that start was exposed (a prefill node whose KV
   pool is smaller than its context length); room -> the decode node's ``Receive`` (decode rid);
   then the client's record: Cloudflare by x-request-id with status 200, or LiteLLM by request_id
   (= the decode rid) with status ``success`` -> affected.

Example:
    >>> from benchmarks.pandas_reference import analyze            # doctest: +SKIP
    >>> result = analyze("benchmarks/.data/100k")                  # doctest: +SKIP
    >>> result.affected[["request_id", "tenant_id"]].head()         # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: [A-Z_0-9 ]*)?\] ")
ROLE_RE = re.compile(r"""disaggregation_mode'?[=:] ?'(\w+)'""")
POOL_RE = re.compile(r"max_total_num_tokens=(\d+).*?context_len=(\d+)")
REJECT_RE = re.compile(
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\).*?self\.rid='([^']+)'"
)
RID_RE = re.compile(r"\brid='([^']+)'")
ROOM_RE = re.compile(r"\bbootstrap_room=(\d+)")
XRID_RE = re.compile(r"""['"]x-request-id['"]: ?['"]([^'"]+)['"]""")
TENANT_RE = r"/accounts/([^/]+)/"


@dataclass
class Result:
    """The affected requests and what it took to find them."""

    affected: pd.DataFrame  # request_id (RayID), header_request_id, tenant_id, prefill_node, ts
    tenants: pd.DataFrame  # tenant_id, n_requests
    rows_read: int = 0  # gateway records + engine lines
    timings: dict[str, float] = field(default_factory=dict)


# -- gateway --------------------------------------------------------------------------------------


def _read_ndjson(path: Path) -> pd.DataFrame:
    try:
        return pd.read_json(path, lines=True, compression="infer", encoding_errors="replace",
                            dtype={"RayID": str})
    except ValueError:
        # a malformed line somewhere: read the file line by line and skip what does not parse
        records = []
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            for raw in fh:
                try:
                    records.append(json.loads(raw))
                except ValueError:
                    continue
        return pd.DataFrame.from_records(records)


def load_cloudflare(data_dir: Path) -> pd.DataFrame:
    """All Cloudflare http_requests records, with x-request-id and tenant columns."""
    root = data_dir / "gateway" / "cloudflare-http"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    frames = [_read_ndjson(p) for p in files]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if df.empty:
        return pd.DataFrame(columns=["RayID", "x_request_id", "tenant_id", "EdgeResponseStatus"])
    df = df.dropna(subset=["RayID"])
    df["x_request_id"] = df["RequestHeaders"].map(
        lambda h: h.get("x-request-id") if isinstance(h, dict) else None
    )
    df["tenant_id"] = df["ClientRequestPath"].astype(str).str.extract(TENANT_RE, expand=False)
    # delivery retries repeat the whole record
    df = df.drop_duplicates(subset=["RayID", "EdgeStartTimestamp"])
    return df


def load_litellm(data_dir: Path) -> pd.DataFrame:
    """The LiteLLM SpendLogs export(s)."""
    root = data_dir / "gateway" / "litellm"
    files = sorted(p for p in root.rglob("*.csv*") if p.is_file()) if root.is_dir() else []
    frames = [pd.read_csv(p, encoding_errors="replace", on_bad_lines="skip", low_memory=False) for p in files]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# -- engine ---------------------------------------------------------------------------------------


def _rotation_order(path: Path) -> tuple[int, str]:
    # sglang.log.2.gz is older than sglang.log.1.gz, which is older than sglang.log
    m = re.search(r"\.log\.(\d+)", path.name)
    return (-int(m.group(1)) if m else 0, path.name)


def _node_files(node_dir: Path) -> list[Path]:
    files = [p for p in node_dir.rglob("*") if p.is_file() and ".log" in p.name]
    return sorted(files, key=_rotation_order)


def _lines(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def parse_engine(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, int]:
    """Scan every engine log line once: starts, rejections, Receive records, line count."""
    starts: list[dict[str, object]] = []
    rejections: list[dict[str, object]] = []
    receives: list[dict[str, object]] = []
    n_lines = 0
    root = data_dir / "engine"
    for node_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        node = node_dir.name
        role = None
        last_ts = None
        for path in _node_files(node_dir):
            with _lines(path) as fh:
                for line in fh:
                    n_lines += 1
                    m = TS_RE.match(line)
                    if m:
                        last_ts = m.group(1)
                    if "Receive:" in line:
                        rid = RID_RE.search(line)
                        room = ROOM_RE.search(line)
                        xrid = XRID_RE.search(line)
                        receives.append({
                            "node": node,
                            "rid": rid.group(1) if rid else None,
                            "bootstrap_room": int(room.group(1)) if room else None,
                            "x_request_id": xrid.group(1) if xrid else None,
                        })
                    elif "exceeds the maximum allowed length" in line:
                        r = REJECT_RE.search(line)
                        if r:
                            rejections.append({
                                "node": node, "ts": last_ts, "input_tokens": int(r.group(1)),
                                "limit": int(r.group(2)), "rid": r.group(3),
                            })
                    elif "server_args=" in line:
                        r = ROLE_RE.search(line)
                        role = r.group(1) if r else role
                    elif "max_total_num_tokens=" in line:
                        r = POOL_RE.search(line)
                        if r:
                            starts.append({
                                "node": node, "ts": last_ts, "role": role,
                                "pool": int(r.group(1)), "context_len": int(r.group(2)),
                            })
    return pd.DataFrame(starts), pd.DataFrame(rejections), pd.DataFrame(receives), n_lines


def _utc(local: pd.Series, tz: str) -> pd.Series:
    return pd.to_datetime(local).dt.tz_localize(tz).dt.tz_convert("UTC")


# -- the analysis ---------------------------------------------------------------------------------


def analyze(data_dir: str | os.PathLike[str], tz: str = "Asia/Singapore") -> Result:
    """Find the 200 responses that should have been 400, from the raw files of ``data_dir``."""
    data_dir = Path(data_dir)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    cf = load_cloudflare(data_dir)
    timings["read_cloudflare"] = time.perf_counter() - t
    t = time.perf_counter()
    ll = load_litellm(data_dir)
    timings["read_litellm"] = time.perf_counter() - t
    t = time.perf_counter()
    starts, rejections, receives, n_lines = parse_engine(data_dir)
    timings["parse_engine"] = time.perf_counter() - t
    t = time.perf_counter()

    empty = pd.DataFrame(columns=["request_id", "header_request_id", "tenant_id", "prefill_node", "ts"])
    if starts.empty or rejections.empty:
        timings["join"] = time.perf_counter() - t
        return Result(empty, pd.DataFrame(columns=["tenant_id", "n_requests"]),
                      len(cf) + len(ll) + n_lines, timings)

    # exposure: a prefill node start whose pool is smaller than its context length, in force
    # from its own timestamp until the node's next start
    starts["ts"] = _utc(starts["ts"], tz)
    starts["exposed"] = (starts["role"] == "prefill") & (starts["pool"] < starts["context_len"])
    rejections["ts"] = _utc(rejections["ts"], tz)
    rej = pd.merge_asof(
        rejections.sort_values("ts"), starts.sort_values("ts")[["node", "ts", "exposed", "role"]],
        on="ts", by="node", direction="backward",
    )
    rej = rej[rej["exposed"].fillna(False).astype(bool)]

    # the rejected request's own Receive line on that prefill node: room and x-request-id
    rec = receives.dropna(subset=["rid"]).drop_duplicates(subset=["node", "rid"])
    rej = rej.merge(rec, on=["node", "rid"], how="left")

    # where the prefill line has no x-request-id, the decode node's Receive of the same room may
    decode_nodes = set(starts.loc[starts["role"] == "decode", "node"])
    dec = rec[rec["node"].isin(decode_nodes) & rec["bootstrap_room"].notna() & (rec["bootstrap_room"] != 0)]
    dec = dec[["bootstrap_room", "x_request_id", "rid", "node"]].rename(
        columns={"x_request_id": "dec_x_request_id", "rid": "decode_rid", "node": "decode_node"}
    ).drop_duplicates(subset=["bootstrap_room"])
    rej = rej.merge(dec, on="bootstrap_room", how="left")
    rej["x_request_id"] = rej["x_request_id"].fillna(rej["dec_x_request_id"])

    # edge tenants: the client saw Cloudflare's status; the record is found by x-request-id
    edge = rej.merge(
        cf[["RayID", "x_request_id", "tenant_id", "EdgeResponseStatus"]], on="x_request_id", how="inner"
    )
    edge = edge[pd.to_numeric(edge["EdgeResponseStatus"], errors="coerce") == 200]
    edge = edge.rename(columns={"RayID": "request_id", "x_request_id": "header_request_id"})

    # proxy tenants: LiteLLM's request_id is the decode node's rid; status 'success' = HTTP 200
    proxy = pd.DataFrame(columns=["request_id", "tenant_id"])
    if not ll.empty:
        spend = ll.dropna(subset=["request_id"]).drop_duplicates(subset=["request_id"])
        spend = spend[spend["status"] == "success"][["request_id", "team_id"]]
        proxy = rej.merge(spend, left_on="decode_rid", right_on="request_id", how="inner")
        proxy = proxy.rename(columns={"team_id": "tenant_id"})
        proxy["header_request_id"] = None

    cols = ["request_id", "header_request_id", "tenant_id", "node", "ts"]
    affected = (
        pd.concat([edge[cols], proxy[cols]], ignore_index=True)
        .rename(columns={"node": "prefill_node"})
        .drop_duplicates(subset=["request_id"])
        .sort_values("ts")
        .reset_index(drop=True)
    )
    tenants = (
        affected.groupby("tenant_id").size().rename("n_requests").reset_index()
        .sort_values(["n_requests", "tenant_id"], ascending=[False, True]).reset_index(drop=True)
    )
    timings["join"] = time.perf_counter() - t
    return Result(affected, tenants, len(cf) + len(ll) + n_lines, timings)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.pandas_reference DATA_DIR``: print the affected requests."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m benchmarks.pandas_reference DATA_DIR [TZ]", file=sys.stderr)
        return 2
    result = analyze(args[0], *(args[1:2] or []))
    print(result.affected.to_string())
    print(result.tenants.to_string())
    print(json.dumps(result.timings, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
