"""Gateway-side records of the sample: Cloudflare Logpush NDJSON and the LiteLLM CSV export.

Records carry the gateway's own quirks: hourly files, a truncated line re-delivered in the
next file, delayed duplicates, string timestamps for a span, a 308 before a retry.

Example:
    >>> import tempfile
    >>> g = GatewayRecords(tempfile.mkdtemp(), requests=300, seed=1)
    >>> sorted(g._cf_client(g.customers[0], 10))[:2]
    ['ClientIP', 'ClientRequestBytes']
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from forensics.sample import _formats as F
from forensics.sample._state import LONG_MIN, GeneratorState, Tenant
from forensics.sample._world import (
    CF_DIR,
    CF_MODEL,
    CF_STRING_TS,
    CONTEXT_NEW,
)
from forensics.sample._writers import FileWriter


class GatewayRecords(GeneratorState):
    """Write the gateway layers' files (edge NDJSON, proxy CSV)."""

    def cf_write(self, t: int, payload: dict[str, Any]) -> None:
        """Write one Cloudflare record (hourly Logpush files, redelivery, truncation)."""
        hour = t // 3600_000
        if hour != self.cf_hour:
            self.cf_open(hour)
        w = self.cf_writer
        assert w is not None
        line: bytes = payload["line"]
        mark: str | None = payload["mark"]
        if payload.get("truncate"):
            ln = w.write_line(line[: len(line) * 2 // 5], "malformed")
            self.traps["malformed_lines"].append(
                {"file": w.rel, "line": ln, "reason": "truncated JSON line (record cut mid-write); the complete record was re-delivered at the start of the next hourly file"}
            )
            self.cf_pending.append((line, "rec", mark))
        else:
            ln = w.write_line(line, "rec")
            if mark is not None:
                self.marks[mark] = (w.rel, ln)
            if payload.get("nonutf8"):
                self.traps["non_utf8_lines"].append({"file": w.rel, "line": ln})
        if payload.get("dup"):
            self.cf_pending.append((line, "dup", payload["id"]))

    def cf_open(self, hour: int) -> None:
        """Close the current hourly file and open the one of ``hour``."""
        if self.cf_writer is not None:
            self.counts[self.cf_writer.rel] = self.cf_writer.close()
        a = hour * 3600
        b = a + 3600
        day = time.strftime("%Y%m%d", time.gmtime(a))
        sa = time.strftime("%Y%m%dT%H%M%S", time.gmtime(a))
        sb = time.strftime("%Y%m%dT%H%M%S", time.gmtime(b))
        h8 = hashlib.sha256(f"logpush:{self.seed}:{hour}".encode()).hexdigest()[:8]
        self.cf_writer = FileWriter(self.out, f"{CF_DIR}/{day}/{sa}Z_{sb}Z_{h8}.log.gz")
        self.cf_hour = hour
        pend, self.cf_pending = self.cf_pending, []
        for line, kind, mark in pend:
            ln = self.cf_writer.write_line(line, kind)
            if kind == "dup":
                self.traps["duplicate_records"].append({"file": self.cf_writer.rel, "line": ln, "request_id": mark})
            elif mark is not None:
                self.marks[mark] = (self.cf_writer.rel, ln)

    def ll_write(self, line: str, mark: str | None) -> None:
        """Write one LiteLLM CSV row (handles the delayed duplicate)."""
        assert self.ll is not None
        ln = self.ll.write_line(line.encode("utf-8"), "rec")
        if mark is not None:
            self.marks[mark] = (self.ll.rel, ln)
        keep = []
        for wait, pline, pmark in self.ll_pending:
            if wait <= 1:
                ln2 = self.ll.write_line(pline.encode("utf-8"), "dup")
                self.traps["duplicate_records"].append({"file": self.ll.rel, "line": ln2, "request_id": pmark})
            else:
                keep.append((wait - 1, pline, pmark))
        self.ll_pending = keep

    def cf_record(
        self, tenant: Tenant, ray: str, xid: str, t0: int, ge: int, status: int, stream: bool,
        n: int, m: int, ttfb: int, origin_ms: int, mark: str | None, kind: str,
    ) -> None:  # fmt: skip
        """Queue one Cloudflare ``http_requests`` record at its end time."""
        rng = self.rng
        start_ns = t0 * 1_000_000 + rng.randrange(1000) * 1000
        end_ns = ge * 1_000_000 + rng.randrange(1000) * 1000
        body = (180 + 4 * m + 40 * (m // 8)) if (status == 200 and stream) else (420 + 4 * m if status == 200 else 160)
        headers: dict[str, str] = {"x-request-id": xid}
        normal_ok = kind == "ok" and n < LONG_MIN
        nonutf8 = self._flag("cf_nonutf8", 0.6, normal_ok)
        if nonutf8:
            headers["user-agent"] = "caf\u00e9-client/1.4"
        rec: dict[str, Any] = {
            **self._cf_client(tenant, n),
            "EdgeColoCode": rng.choice(["SIN", "SIN", "HKG", "NRT", "FRA", "IAD"]),
            "EdgeEndTimestamp": end_ns,
            "EdgeResponseBodyBytes": body,
            "EdgeResponseBytes": body + 412,
            "EdgeResponseContentType": "text/event-stream" if (stream and status == 200) else "application/json",
            "EdgeResponseStatus": status,
            "EdgeStartTimestamp": start_ns,
            "EdgeTimeToFirstByteMs": ttfb,
            "OriginIP": "198.51.100.20",
            "OriginResponseDurationMs": origin_ms,
            "OriginResponseStatus": status,
            "ParentRayID": "00",
            "RayID": ray,
            "RequestHeaders": headers,
            "WorkerSubrequest": False,
            "ZoneName": "example.net",
        }
        if CF_STRING_TS[0] <= ge < CF_STRING_TS[1]:
            rec["EdgeStartTimestamp"] = str(start_ns)
            rec["EdgeEndTimestamp"] = str(end_ns)
        line = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if nonutf8:
            line = line.replace("caf\u00e9".encode(), b"caf\xe9")
        payload: dict[str, Any] = {"line": line, "mark": mark, "id": ray, "nonutf8": nonutf8}
        plain_ok = normal_ok and not nonutf8
        if self._flag("cf_dup_leak", 0.0, kind == "leak") or self._flag("cf_dup_1", 0.33, plain_ok) or self._flag("cf_dup_2", 0.66, plain_ok):
            payload["dup"] = True
        elif self._flag("cf_trunc", 0.5, plain_ok):
            payload["truncate"] = True
        self.emit(ge, "cf", payload)

    def _cf_client(self, tenant: Tenant, n: int) -> dict[str, Any]:
        """The client side of a Cloudflare record: who asked, for what, with how many bytes."""
        path = f"/client/v4/accounts/{tenant.tid}/ai/run/{CF_MODEL}"
        return {
            "ClientIP": self.rng.choice(tenant.ips),
            "ClientRequestBytes": 4 * n + 600,
            "ClientRequestHost": "api.example.net",
            "ClientRequestMethod": "POST",
            "ClientRequestPath": path,
            "ClientRequestURI": path,
        }

    def cf_redirect(self, tenant: Tenant, xid: str, t0: int, n: int) -> None:
        """Queue the edge's 308 to a client that first came over http (no origin was reached)."""
        rng = self.rng
        ray = self.hexid(64)
        start_ns = (t0 - 180) * 1_000_000 + rng.randrange(1000) * 1000
        end_ns = (t0 - 178) * 1_000_000 + rng.randrange(1000) * 1000
        rec: dict[str, Any] = {
            **self._cf_client(tenant, n),
            "EdgeColoCode": "SIN",
            "EdgeEndTimestamp": end_ns,
            "EdgeResponseBodyBytes": 167,
            "EdgeResponseBytes": 167 + 380,
            "EdgeResponseContentType": "text/html",
            "EdgeResponseStatus": 308,
            "EdgeStartTimestamp": start_ns,
            "EdgeTimeToFirstByteMs": 2,
            "OriginIP": "",
            "OriginResponseDurationMs": 0,
            "OriginResponseStatus": 0,
            "ParentRayID": "00",
            "RayID": ray,
            "RequestHeaders": {"x-request-id": xid},
            "WorkerSubrequest": False,
            "ZoneName": "example.net",
        }
        line = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.traps["redirect_3xx"].append(ray)
        self.n_redirects += 1
        self.emit(t0, "cf", {"line": line, "mark": f"redirect:{ray}", "id": ray, "nonutf8": False})

    def ll_record(
        self, tenant: Tenant, rid: str, t0: int, ge: int, first: int, status: int, stream: bool,
        n: int, m: int, kind: str, router_id: str,
    ) -> None:  # fmt: skip
        """Write one LiteLLM_SpendLogs row (written in startTime order)."""
        ok = status == 200
        pt, ct = (n, m) if ok else (0, 0)
        if kind == "xfer_stream200":
            pt, ct = n, 0
        meta: dict[str, Any] = {
            "user_api_key": tenant.api_key,
            "user_api_key_alias": f"{tenant.label}-prod",
            "user_api_key_team_id": tenant.tid,
            "user_api_key_org_id": tenant.org,
            "user_api_key_user_id": tenant.user,
            "user_api_key_team_alias": tenant.label,
            "requester_ip_address": tenant.ips[0],
            "applied_guardrails": [],
            "usage_object": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
            "model_map_information": {"model_map_key": "glm-5.3", "model_map_value": None},
        }
        if not ok:
            if status == 400:
                msg = f"litellm.BadRequestError: OpenAIException - The input ({n} tokens) is longer than the model's context length ({CONTEXT_NEW} tokens)."
                cls = "BadRequestError"
            else:
                msg = "litellm.InternalServerError: OpenAIException - Decode transfer failed for request"
                cls = "InternalServerError"
            meta["error_information"] = {"error_code": str(status), "error_class": cls, "llm_provider": "openai", "traceback": "", "error_message": msg}
        spend = round(pt * 0.6e-6 + ct * 2.2e-6, 9) if ok else 0.0
        end_user = self.rng.choice(tenant.end_users) if tenant.end_users else ""
        row = [
            rid, "acompletion", tenant.api_key, spend, pt + ct, pt, ct,
            F.pg_ts(t0), F.pg_ts(ge), (F.pg_ts(first + 3) if stream else F.pg_ts(ge)) if ok else None,
            "glm-5.3", "9c1f6e0d2b7a4e58a3f1c2d4b6e8f0a1c3e5d7f9b1a3c5e7d9f1b3a5c7e9d1f3", "glm-5.3", "openai",
            "http://10.0.3.7:8000/v1", tenant.user, F.jsonb(meta), "False", "Cache OFF", "[]", tenant.tid, end_user,
            tenant.ips[0], "{}", "{}", self.uuid4(), "success" if ok else "failure", tenant.org, None, "{}",
            ge - t0, None,
        ]  # fmt: skip
        line = F.pg_csv_row(row)
        mark = f"gw:{rid}" if kind == "leak" or rid in self.suspected else None
        if self._flag("ll_malformed", 0.7, kind == "ok" and n < LONG_MIN):
            cut = F.pg_csv_row(row[:17])
            assert self.ll is not None
            ln = self.ll.write_line(cut.encode(), "malformed")
            self.traps["malformed_lines"].append({"file": self.ll.rel, "line": ln, "reason": "CSV row has 17 fields, expected 32 (interrupted export, row re-exported on the next line)"})
        self.ll_write(line, mark)
        if self._flag("ll_dup", 0.25, kind == "ok"):
            self.ll_pending.append((3, line, rid))

