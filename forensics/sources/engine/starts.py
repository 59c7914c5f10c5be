"""``engine_starts``: one row per node start, rebuilt from the node's startup facts.

A start begins at a ``server_args`` line, at any startup line seen after the node was ready, or at
a second ``max_total_num_tokens`` line of the same rank (a restart without server_args in the
logs). Lines printed by every TP rank (KV Cache, early ``max_total_num_tokens``) make no extra
starts. The admission limit is not stored: the ``start_periods`` view derives it from
``context_len`` and ``max_total_num_tokens`` (its one definition).

Example:
    >>> from forensics.case import open_case
    >>> rebuild_starts(open_case(":memory:"), [])
    0
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.case import Case, LoadTarget


def _truthy(value: Any) -> bool | None:
    if value is None:
        return None
    return str(value).strip().lower() in {"true", "1", "yes"}


def _as_int(value: Any) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def rebuild_starts(case: Case | LoadTarget, nodes: Iterable[str]) -> int:
    """Recompute ``engine_starts`` for ``nodes`` from all their startup facts; return the row count.

    A start begins at a ``server_args`` line, or at any startup line seen after the node was
    ready, or at a second ``max_total_num_tokens`` line of the same rank (a restart without
    server_args in the logs).

    Example:
        >>> from forensics.case import open_case
        >>> rebuild_starts(open_case(":memory:"), ["n"])
        0
    """
    con = case.con
    total = 0
    for node in sorted(set(nodes)):
        con.execute("DELETE FROM engine_starts WHERE node = $n", {"n": node})
        facts = con.execute(
            """SELECT ts, ts_inferred, ranks, fact, file_id, line_no, args, text, pod FROM engine_startup_facts
               WHERE node = $n ORDER BY pod, ts NULLS LAST, file_id, line_no""",
            {"n": node},
        ).fetchall()
        starts: list[dict[str, Any]] = []
        cur: dict[str, Any] | None = None
        pod_now: str | None = None
        for ts, inferred, ranks, fact, file_id, line_no, args, text, pod in facts:
            if pod != pod_now:
                # each pod (process) is its own series of starts
                cur, pod_now = None, pod
            new = cur is None or (
                (fact == "server_args" and cur["n_facts"] > 0)
                or (cur["ready"] is not None and fact not in ("ready", "bootstrap", "pool_warning"))
                or (fact == "max_total" and ranks in cur["max_total_ranks"])
            )
            if new:
                cur = {"pod": pod, "ts_start": ts, "ts_inferred": inferred, "ready": None, "n_facts": 0, "args": None,
                       "max_total": None, "max_total_ranks": set(), "kv": None, "kv_label_only": None,
                       "kv_dtype_line": None,
                       "pool_warning": False, "first_loc": (file_id, line_no)}
                starts.append(cur)
            assert cur is not None
            cur["n_facts"] += 1
            if fact == "server_args" and args:
                cur["args"] = {k: v for k, v in json.loads(args).items() if k != "server_args"}
            elif fact == "max_total":
                cur["max_total_ranks"].add(ranks)
                if cur["max_total"] is None:
                    kv = dict(re.findall(r"(\w+)=([\w.]+)", text or ""))
                    cur["max_total"] = (kv, file_id, line_no)
            elif fact == "kv_cache":
                m = re.search(r"#tokens: (\d+)", text or "")
                d = re.search(r"dtype: ([\w.]+)", text or "")
                labelled = not (text or "").startswith("KV Cache is allocated")
                info = (int(m.group(1)) if m else None, d.group(1) if d else None)
                if not labelled and cur["kv"] is None:
                    cur["kv"] = info
                elif labelled and cur["kv_label_only"] is None:
                    cur["kv_label_only"] = info
            elif fact == "kv_dtype" and cur["kv_dtype_line"] is None:
                m = re.search(r"Using KV cache dtype: (\S+)", text or "")
                cur["kv_dtype_line"] = m.group(1) if m else None
            elif fact == "ready" and cur["ready"] is None:
                cur["ready"] = ts
            elif fact == "pool_warning":
                cur["pool_warning"] = True
        rows = []
        # numbered per node in time order, whatever pod they belong to
        starts.sort(key=lambda st: (st["ts_start"] is None, st["ts_start"] or dt.datetime.min, st["pod"]))
        for seq, s in enumerate(starts, start=1):
            args = s["args"] or {}
            kvl, fid, lno = s["max_total"] or ({}, *s["first_loc"])
            ctx = _as_int(kvl.get("context_len"))
            pool = _as_int(kvl.get("max_total_num_tokens"))
            kvc = s["kv"] or s["kv_label_only"] or (None, None)
            mode = args.get("disaggregation_mode")
            role = role_source = None
            if mode is not None:
                role, role_source = ({"prefill": "prefill", "decode": "decode"}.get(str(mode), "unified"),
                                     "server_args")
            rows.append({
                "node": node, "pod": s["pod"], "seq": seq, "ts_start": s["ts_start"], "ts_ready": s["ready"],
                "ts_inferred": bool(s["ts_inferred"]), "role": role, "role_source": role_source,
                "ctx": ctx, "pool": pool, "ctx_arg": _as_int(args.get("context_length")),
                "chunked": _as_int(kvl.get("chunked_prefill_size") or args.get("chunked_prefill_size")),
                "max_prefill": _as_int(kvl.get("max_prefill_tokens") or args.get("max_prefill_tokens")),
                "max_running": _as_int(kvl.get("max_running_requests") or args.get("max_running_requests")),
                "tp": _as_int(args.get("tp_size")), "dp": _as_int(args.get("dp_size")),
                "model": args.get("model_path"),
                "kv_dtype": kvc[1] or s["kv_dtype_line"]
                or (args.get("kv_cache_dtype") if args.get("kv_cache_dtype") != "auto" else None)
                or args.get("kv_cache_dtype"),
                "kv_tokens": kvc[0], "pool_warning": s["pool_warning"],
                "auto_trunc": _truthy(args.get("allow_auto_truncate")),
                "checksum": (_truthy(args.get("disaggregation_enable_kv_checksum")) or _truthy(args.get("kv_canary")))
                if ("disaggregation_enable_kv_checksum" in args or "kv_canary" in args) else (False if args else None),
                "args": json.dumps(args, sort_keys=True) if args else None, "fid": fid, "lno": lno,
            })
        for r in rows:
            con.execute(
                """INSERT INTO engine_starts VALUES ($node, $pod, $seq, $ts_start, $ts_ready, $ts_inferred, $role,
                   $role_source, $ctx, $pool, $ctx_arg, $chunked, $max_prefill, $max_running, $tp, $dp,
                   $model, $kv_dtype, $kv_tokens, $pool_warning, $auto_trunc, $checksum, $args, $fid, $lno)""",
                r,
            )
        total += len(rows)
        _infer_roles(case, node)
    return total


def _infer_roles(case: Case | LoadTarget, node: str) -> None:
    """Role from the batch lines of each start when server_args did not say it."""
    case.con.execute(
        """
        UPDATE engine_starts SET role = x.role, role_source = x.src
        FROM (
            SELECT s.start_seq,
                   CASE WHEN bool_or(b.kind = 'prefill' AND (contains(b.fields_raw, ' #inflight-req: ')
                                     OR contains(b.fields_raw, ' #bootstrap-req: ')
                                     OR contains(b.fields_raw, ' #unbootstrapped-req: ')
                                     OR contains(b.fields_raw, ' #transferring-req: '))) THEN 'prefill'
                        WHEN bool_or(b.kind = 'decode' AND (contains(b.fields_raw, ' #transfer-req: ')
                                     OR contains(b.fields_raw, ' pre-allocated usage: ')
                                     OR contains(b.fields_raw, ' #prealloc-req: '))) THEN 'decode'
                        ELSE 'unified' END AS role,
                   CASE WHEN count(b.kind) > 0 THEN 'batch_lines' ELSE 'default' END AS src
            FROM (SELECT * FROM (SELECT start_seq, pod, ts_start, role,
                                        lead(ts_start) OVER (PARTITION BY pod ORDER BY start_seq) AS ts_next
                                 FROM engine_starts WHERE node = $n)
                  WHERE role IS NULL) s  -- only starts whose role server_args did not give
            LEFT JOIN engine_batches b ON b.node = $n AND b.pod = s.pod AND (s.ts_start IS NULL OR b.ts >= s.ts_start)
                 AND (s.ts_next IS NULL OR b.ts < s.ts_next)
            GROUP BY s.start_seq
        ) x
        WHERE engine_starts.node = $n AND engine_starts.start_seq = x.start_seq AND engine_starts.role IS NULL
        """,
        {"n": node},
    )
