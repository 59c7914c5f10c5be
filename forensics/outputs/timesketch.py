"""The incident timeline in Timesketch's JSONL import format (``forensics export timesketch``).

Timesketch imports a ``.jsonl`` file of one JSON object per line; its server requires ``message``,
``datetime`` (ISO 8601) and ``timestamp_desc`` on every line and derives ``timestamp``
(microseconds since the epoch) when absent (``timesketch/lib/utils.py``,
``read_and_validate_jsonl``). The import client (``timesketch-import-client``) drops fields whose
name starts with ``_`` and writes ``datetime`` with an explicit offset. Each event here carries:

* the three mandatory fields, ``datetime`` in UTC with ``+00:00`` and microseconds, and
  ``timestamp`` (int microseconds, the same instant);
* ``data_type`` (``forensics:<event>``, the plaso-style name Timesketch's analysers group by) and
  ``tag`` (a list of strings: ``affected``, the confidence, or the start's verdict);
* flat fields: ``node``, ``layer``, ``tenant_id``, ``request_id``, ``header_request_id``,
  ``engine_rid``, ``confidence``, ``status``, ``prompt_tokens``, ``evidence`` (FILE:LINE),
  ``evidence_file``, ``evidence_line``. NULL fields are left out (Timesketch shows absent fields
  as empty); no field name starts with ``_`` or holds a dot (OpenSearch would nest it).

The events are the rows of :func:`forensics.timeline` (``queries/timeline.sql``): every
gateway, router and engine record of each affected request's evidence chain, and every node
start. A record without a timestamp cannot be placed on a timeline: it is counted, not written.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> import forensics
    >>> from forensics.sample import sample_case
    >>> write_timesketch(forensics.timeline(sample_case()), Path(tempfile.mkdtemp()) / "timeline.jsonl")
    TimesketchExport(events=237, skipped=0)
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.outputs.export import Tabular, record_batches

#: timestamp_desc per event kind: what the time of the record means.
TIMESTAMP_DESC = {
    "gateway_request": "Request Start (gateway)",
    "router_request": "Request Logged (router)",
    "scheduler_rejection": "Scheduler Rejection Logged",
    "prefill_received": "Prefill Request Received",
    "prefill_finished": "Prefill Request Finished",
    "decode_received": "Decode Request Received",
    "decode_finished": "Decode Request Finished",
    "node_start": "Engine Start",
}

EVENT_TITLE = {
    "gateway_request": "gateway request",
    "router_request": "router request",
    "scheduler_rejection": "scheduler rejected the prompt (placeholder path)",
    "prefill_received": "prefill received",
    "prefill_finished": "prefill finished",
    "decode_received": "decode received",
    "decode_finished": "decode finished",
    "node_start": "engine start",
}

FIELDS = ("node", "layer", "tenant_id", "request_id", "header_request_id", "engine_rid", "confidence",
          "status", "prompt_tokens", "evidence")


@dataclass(frozen=True)
class TimesketchExport:
    """What :func:`write_timesketch` wrote: events written, records left out (no timestamp)."""

    events: int
    skipped: int


def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.UTC) if ts.tzinfo is None else ts.astimezone(dt.UTC)


def event_dict(row: dict[str, Any]) -> dict[str, Any]:
    """One timeline row as a Timesketch event (the JSON object of one line).

    Example:
        >>> e = event_dict({"ts": dt.datetime(2026, 9, 3, 7, 57, 2), "event": "scheduler_rejection",
        ...                 "node": "prefill-0", "request_id": "r1", "tenant_id": "t1",
        ...                 "confidence": "confirmed", "detail": "input 932905 tokens, limit 681274",
        ...                 "evidence": "engine/prefill-0/sglang.log:4318", "file_id": 3, "line_no": 4318})
        >>> e["datetime"], e["timestamp"], e["timestamp_desc"]
        ('2026-09-03T07:57:02.000000+00:00', 1788422222000000, 'Scheduler Rejection Logged')
        >>> e["message"]
        'prefill-0: scheduler rejected the prompt (placeholder path): input 932905 tokens, limit 681274 [request r1, tenant t1, confirmed]'
    """
    ts = _utc(row["ts"])
    event = str(row["event"])
    where = row.get("node") or row.get("layer") or "gateway"
    context = ", ".join(
        f"{label} {row[key]}" for label, key in (("request", "request_id"), ("tenant", "tenant_id"))
        if row.get(key) is not None
    )
    if row.get("confidence"):
        context = f"{context}, {row['confidence']}" if context else str(row["confidence"])
    message = f"{where}: {EVENT_TITLE.get(event, event)}"
    if row.get("detail"):
        message += f": {row['detail']}"
    if context:
        message += f" [{context}]"
    out: dict[str, Any] = {
        "message": message,
        "datetime": ts.isoformat(timespec="microseconds"),
        "timestamp": (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1),
        "timestamp_desc": TIMESTAMP_DESC.get(event, "Time Logged"),
        "data_type": f"forensics:{event}",
    }
    for key in FIELDS:
        value = row.get(key)
        if value is not None:
            out[key] = value
    evidence = row.get("evidence")
    if isinstance(evidence, str) and ":" in evidence:
        file_part, _, line_part = evidence.rpartition(":")
        out["evidence_file"] = file_part
        if line_part.isdigit():
            out["evidence_line"] = int(line_part)
    tags = ["affected", str(row["confidence"])] if row.get("confidence") else []
    if event == "node_start" and row.get("detail"):
        tags.append("start-" + str(row["detail"]).rsplit("verdict ", 1)[-1])
    if tags:
        out["tag"] = tags
    return out


def write_timesketch(rel: Tabular, path: str | os.PathLike[str]) -> TimesketchExport:
    """Write timeline rows as Timesketch JSONL (one event per line, UTF-8, LF line ends).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> import forensics
        >>> from forensics.sample import sample_case
        >>> path = Path(tempfile.mkdtemp()) / "timeline.jsonl"
        >>> write_timesketch(forensics.timeline(sample_case()), path).events == len(path.read_text().splitlines())
        True
    """
    written = skipped = 0
    with Path(path).open("w", encoding="utf-8", newline="\n") as fh:
        # batch by batch: a timeline of every request of a large incident is never held whole
        for batch in record_batches(rel):
            for row in batch.to_pylist():
                if row.get("ts") is None:
                    skipped += 1
                    continue
                fh.write(json.dumps(event_dict(row), ensure_ascii=False, sort_keys=False) + "\n")
                written += 1
    return TimesketchExport(events=written, skipped=skipped)
