"""The truth of the sample: what the generator knows (``truth.json``) and the README beside it.

Example:
    >>> GENERATOR_VERSION
    '1.1.0'
"""

from __future__ import annotations

import json
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._state import LIMIT, GeneratorState
from forensics.sample._world import (
    CF_MODEL,
    CONTEXT_NEW,
    ENGINE_LOG_GAP,
    ENGINE_LOG_GAP_NODES,
    ENGINE_TZ,
    GATEWAY_TZ,
    NODES,
    PRIVATE,
    SOURCE_WINDOW_S,
    STARTS,
    STYLE_NAMES,
    T_END,
    T_TRAFFIC,
    starts_of,
)

GENERATOR_VERSION = "1.1.0"

SOURCE_RULE = (
    "possible_sources of a leak = every gateway-visible request whose decode 'Finish:' was logged on the "
    "SAME decode node at a time t_f (UTC, second resolution) with t_r - 600 s <= t_f <= t_r, where t_r is the "
    "leak's decode 'Receive:' time (UTC, second resolution); the leak itself is excluded; requests of the "
    "leak's own tenant are kept and flagged same_tenant=true; health checks (no gateway record) and "
    "requests whose decode aborted (front-end 400, transfer failure) are not sources"
)



class Truth(GeneratorState):
    """Assemble the truth dict from what the run recorded (marks, leaks, traps, counts)."""

    def truth(self) -> dict[str, Any]:
        """Assemble the truth dict."""
        nodes: dict[str, Any] = {}
        windows = []
        for name, node in NODES.items():
            sts = starts_of(name)
            lst = []
            for i, st in enumerate(sts):
                f, ln = self.marks[f"start:{name}:{i}"]
                lst.append(
                    {
                        "ts_utc": F.iso_z(st.t_first),
                        "ts_ready_utc": F.iso_z(st.t_ready),
                        "context_len": st.context_len,
                        "max_total_num_tokens": st.pool,
                        "admission_limit": st.limit,
                        "exposed": st.exposed,
                        "file": f,
                        "line": ln,
                        "release_style": STYLE_NAMES[st.style],
                    }
                )
                if st.exposed:
                    nxt = sts[i + 1] if i + 1 < len(sts) else None
                    windows.append(
                        {
                            "node": name,
                            "start_utc": F.iso_z(st.t_first),
                            "end_utc": F.iso_z(nxt.t_first) if nxt else None,
                            "admission_limit": st.limit,
                            "context_len": st.context_len,
                            "max_total_num_tokens": st.pool,
                        }
                    )
            nodes[name] = {"role": node.role, "ip": node.ip, "port": node.port, "starts": lst}
        nodes["router"] = {"role": "router", "ip": "10.0.3.7", "port": 8000, "starts": []}
        windows.sort(key=lambda w: (w["start_utc"], w["node"]))
        # a leak whose engine lines were all lost is not confirmed: it is among the suspected
        leaks = sorted((x for x in self.leaks.values() if x["request_id"] not in self.suspected),
                       key=lambda x: (x["ts_utc"], x["request_id"]))
        for lk in leaks:
            lk["gateway_file"], lk["gateway_line"] = self.marks[f"gw:{lk['request_id']}"]
            lk["rejection_file"], lk["rejection_line"] = self.marks[f"rej:{lk['request_id']}"]
        suspected = sorted(self.suspected.values(), key=lambda x: (x["ts_utc"], x["request_id"]))
        for sp in suspected:
            sp["gateway_file"], sp["gateway_line"] = self.marks[f"gw:{sp['request_id']}"]
        affected: dict[str, dict[str, int]] = {}
        for conf, rows in (("confirmed", leaks), ("suspected", suspected)):
            for lk in rows:
                a = affected.setdefault(lk["tenant_id"], {"confirmed": 0, "suspected": 0})
                a[conf] += 1
        traps = dict(self.traps)
        traps["redirect_3xx"] = [
            {"request_id": ray, "status": 308, "file": self.marks[f"redirect:{ray}"][0],
             "line": self.marks[f"redirect:{ray}"][1]}
            for ray in self.traps["redirect_3xx"]
        ]
        traps["health_checks"] = self.health_checks
        for k in ("duplicate_records", "malformed_lines", "non_utf8_lines"):
            traps[k] = sorted(traps[k], key=lambda d: (d["file"], d["line"]))
        counts: dict[str, Any] = {
            "files": dict(sorted(self.counts.items())),
            "requests_total": self.requests,
            "requests_by_layer": dict(self.n_by_layer),
            "requests_by_status": dict(sorted(self.n_by_status.items())),
            "long_prompt_requests_random": self.n_long,
            "leaks": len(leaks),
            "suspected": len(suspected),
            "affected_tenants": len(affected),
            "health_checks": self.health_checks,
            "gateway_redirect_records": self.n_redirects,
            "engine_lines_lost": dict(sorted(self.lost_lines.items())),
        }
        tenants = {
            t.tid: {"layer": t.layer, "label": t.label, "role": t.role, **({"organization_id": t.org} if t.org else {})}
            for t in self.tenants
        }
        return {
            "generator": {"name": "forensics.sample", "version": GENERATOR_VERSION, "seed": self.seed, "requests": self.requests},
            "engine_tz": ENGINE_TZ,
            "gateway_tz": GATEWAY_TZ,
            "router_tz": "UTC",
            "model": CF_MODEL,
            "context_len": CONTEXT_NEW,
            "admission_limit": LIMIT,
            "admission_limits": sorted({st.limit for st in STARTS if st.exposed}),
            "admission_formula": "min(context_len - 1, max_total_num_tokens - 1) - 5; rejected when input_tokens >= limit",
            "nodes": nodes,
            "exposure_windows": windows,
            "fleet_window": {
                "start_utc": min(str(w["start_utc"]) for w in windows),
                "end_utc": max(str(w["end_utc"]) for w in windows if w["end_utc"]),
            },
            "source_rule": SOURCE_RULE,
            "source_window_s": SOURCE_WINDOW_S,
            "leaks": leaks,
            "suspected": suspected,
            "suspected_rule": (
                "suspected = a 2xx gateway record with no engine record of its own, whose gateway prompt "
                "token count is >= the smallest admission limit of the nodes exposed at its time, inside "
                "the fleet window; leaked_in_fact says what the generator knows and the logs do not; "
                "possible sources of a suspected response cannot be derived (its decode node is unknown)"
            ),
            "engine_log_gap": {
                "start_utc": F.iso_z(ENGINE_LOG_GAP[0]),
                "end_utc": F.iso_z(ENGINE_LOG_GAP[1]),
                "nodes": list(ENGINE_LOG_GAP_NODES),
                "why": "log-collection outage: no engine line of this span was kept; gateway and router logs are complete",
            },
            "affected_tenants": dict(sorted(affected.items())),
            "tenants": dict(sorted(tenants.items())),
            "traps": traps,
            "counts": counts,
            "counts_doc": (
                "lines = physical lines of the decompressed text; records = log entries (engine/router: lines that "
                "start an entry, i.e. not traceback/wrapped continuation lines; gateway: parseable records incl. "
                "duplicates; CSV: data rows with the right field count, header excluded); malformed = unparseable "
                "lines/rows; duplicates = re-delivered copies; bytes = size on disk; bytes_uncompressed = text size"
            ),
            "timeline_utc": {
                "traffic_start": F.iso_z(T_TRAFFIC),
                "logs_end": F.iso_z(T_END),
                "rolling_restart": "2026-09-03T02:10Z..03:14Z (decode-0, decode-1, prefill-2, prefill-0, prefill-1)",
                "prefill_1_retuned": "2026-09-06T08:05Z (--mem-fraction-static 0.82 -> 0.86: pool 777792, still exposed, limit 777786)",
                "engine_log_gap": f"{F.iso_z(ENGINE_LOG_GAP[0])}..{F.iso_z(ENGINE_LOG_GAP[1])} (all engine nodes)",
                "researcher_report": "2026-09-08T09:12Z (leak reproduced by tenant acct-38-researcher)",
                "operator_reproduction": "2026-09-09T13:05Z",
                "model_private": [F.iso_z(PRIVATE[0]), F.iso_z(PRIVATE[1])],
                "fix_restarts": "prefill-0 2026-09-09T14:41:00Z, prefill-1 2026-09-09T14:47:30Z (all fixed by 14:52)",
            },
            "abuse_evident": False,
            "notes": (
                "Request-log text is short synthetic filler (level-2 truncation shape, shortened halves); "
                "decode-0 emulates 0.5.8-0.5.11 request-log lines without a timestamp prefix; prefill-1 after "
                "the fix emulates 0.5.23 shapes."
            ),
        }



def readme(truth: dict[str, Any]) -> str:
    """Return the deterministic README.md written next to truth.json.

    Example:
        >>> readme({"generator": {"seed": 1, "requests": 2, "version": "x"}, "counts": {"leaks": 0,
        ...     "suspected": 0, "affected_tenants": 0, "requests_by_layer": {}}, "exposure_windows": [],
        ...     "admission_limits": [1], "context_len": 2, "engine_log_gap": {"start_utc": "a",
        ...     "end_utc": "b"}}).splitlines()[0]
        '# Sample incident (generated)'
    """
    g = truth["generator"]
    c = truth["counts"]
    gap = truth["engine_log_gap"]
    wins = "\n".join(
        f"- {w['node']}: {w['start_utc']} .. {w['end_utc']} (pool {w.get('max_total_num_tokens')}, "
        f"admission limit {w['admission_limit']})"
        for w in truth["exposure_windows"]
    )
    return f"""# Sample incident (generated)

Synthetic logs of one SGLang prefill/decode incident, produced by
`python -m forensics.sample --out sample_data --requests {g["requests"]} --seed {g["seed"]}`
(generator {g["version"]}). Do not edit by hand: the tests regenerate it bit for bit.
All request text is synthetic filler; no real data.

- `engine/<node>/sglang.log` (+ rotated `sglang.log.N.gz`): SGLang engine logs, local time
  Asia/Singapore (UTC+8, no zone in the lines); `engine/router/smg.log*`: smg router, UTC.
- `gateway/cloudflare-http/<YYYYMMDD>/<start>Z_<end>Z_<8hex>.log.gz`: Cloudflare Logpush
  `http_requests` NDJSON, UTC epoch nanoseconds.
- `gateway/litellm/LiteLLM_SpendLogs.csv`: Postgres CSV export of LiteLLM_SpendLogs (UTC, no zone).
- `truth.json`: the expected answers (leaks with file:line evidence, windows, traps, counts).

Context length {truth["context_len"]}; admission limits of the exposed configurations
{", ".join(str(v) for v in truth["admission_limits"])} (the fleet's is the smallest).
Exposure windows:
{wins}

Engine log gap (no engine line kept, gateway and router complete): {gap["start_utc"]} .. {gap["end_utc"]}.

{c["leaks"]} confirmed leaked responses, {c["suspected"]} suspected (gateway evidence only),
{c["affected_tenants"]} affected tenants, requests by front door: {json.dumps(c["requests_by_layer"], sort_keys=True)}.
"""

