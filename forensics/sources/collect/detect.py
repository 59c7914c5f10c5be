"""Tell a file's collection wrapper from its content (never its name).

The first lines of the decompressed head are tried against every wrapper's shape; the wrapper
that matches the most sampled lines wins if it matches at least half of them, otherwise the file
is plain. JSON is recognised by its keys (a Docker record has ``log`` and ``time``; a Loki one
``line`` and ``timestamp``; ...), pretty-printed documents (``aws logs``, ``gcloud``, ES
``_search``) by the keys around their records. SGLang's own JSON lines (request logs, metrics)
have none of those keys and stay plain.

Example:
    >>> detect_wrapper(b"2026-08-27T03:10:00.1Z stderr F [2026-08-27 11:10:00 TP0] x\\n").name
    'cri'
    >>> detect_wrapper(b"[2026-08-27 11:10:00 TP0] Prefill batch, #new-seq: 1\\n").name
    'plain'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.errors import ParameterError
from forensics.sources.collect.prefix import Cri, JournalIso, Kubectl, Syslog5424, SyslogBsd
from forensics.sources.collect.record_formats import FORMATS
from forensics.sources.collect.records import RecordWrapper
from forensics.sources.collect.wrappers import Plain, Wrapper

#: Lines of the head tried per file.
SAMPLE_LINES = 200

_TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"
_LINE_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cri", re.compile(rf"^{_TS} (?:stdout|stderr) [FP](?::\S*)?(?: |$)")),
    ("syslog-5424", re.compile(r"^<\d{1,3}>1 \S+ \S+ \S+ \S+ \S+ (?:-|\[)")),
    ("journal-iso", re.compile(rf"^(?:<\d{{1,3}}>)?{_TS} \S+ [^\s\[:]+(?:\[\d+\])?:(?: |$)|^-- ")),
    ("syslog-bsd", re.compile(r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s\[:]+(?:\[\d+\])?:(?: |$)|^-- ")),
    ("kubectl", re.compile(rf"^(?:\[pod/[^/\]\s]+/[^\]\s]+\] )?{_TS}(?: |$)|^\[pod/[^/\]\s]+/[^\]\s]+\] ")),
)

#: Every wrapper name ``read_lines(wrapper=...)`` accepts.
WRAPPERS: tuple[str, ...] = ("plain", "cri", "kubectl", "journal-iso", "syslog-bsd", "syslog-5424", *FORMATS)

_CLASSES: dict[str, type[Wrapper]] = {
    "plain": Plain, "cri": Cri, "kubectl": Kubectl, "journal-iso": JournalIso, "syslog-bsd": SyslogBsd,
    "syslog-5424": Syslog5424,
}


@dataclass(frozen=True)
class Detection:
    """The wrapper found for a file and why.

    Example:
        >>> Detection("cri", "cri: 3 of 3 sampled lines").name
        'cri'
    """

    name: str
    note: str


def make_wrapper(name: str, path: Path, context: dict[str, object]) -> Wrapper:
    """A fresh wrapper instance for one file.

    Example:
        >>> make_wrapper("cri", Path("0.log"), {}).name
        'cri'
    """
    if name in _CLASSES:
        return _CLASSES[name](path, context)
    if name in FORMATS:
        return RecordWrapper.for_format(name, path, context)
    raise ParameterError(f"unknown collection wrapper {name!r}", hint=f"use auto or one of {', '.join(WRAPPERS)}")


def _json_kind(rec: dict[str, Any]) -> str | None:
    keys = set(rec)
    if "__REALTIME_TIMESTAMP" in keys or ("MESSAGE" in keys and ("__CURSOR" in keys or "_HOSTNAME" in keys)):
        return "journald-json"
    if "line" in keys and "timestamp" in keys and isinstance(rec.get("line"), str):
        return "loki-jsonl"
    if "_source" in keys and isinstance(rec.get("_source"), dict):
        return "es-hit-lines"
    if ("textPayload" in keys or "jsonPayload" in keys) and ({"logName", "resource", "insertId"} & keys):
        return "gcp-logging-lines"
    if "message" in keys and isinstance(rec.get("timestamp"), int | float) and (
            {"logStreamName", "ingestionTime", "eventId"} & keys):
        return "cloudwatch-lines"
    if ("_id" in keys and "date" in keys and "message" in keys) or (
            rec.get("type") == "log" and isinstance(rec.get("attributes"), dict)
            and "message" in rec["attributes"]):
        return "datadog"
    if "log" in keys and "time" in keys and not ({"@timestamp", "kubernetes"} & keys):
        return "docker-json"
    if ("log" in keys or "message" in keys) and ({"@timestamp", "kubernetes", "k8s"} & keys):
        return "shipper-ndjson"
    return None


def _document_kind(head: str) -> str | None:
    lead = head.lstrip()[:1]
    if lead == "{" and '"events"' in head and re.search(r'"(logStreamName|ingestionTime|eventId)"', head):
        return "cloudwatch"
    if lead == "{" and '"hits"' in head and '"_source"' in head:
        return "es-hits"
    if lead == "[" and re.search(r'"(textPayload|jsonPayload)"', head) and re.search(r'"(logName|insertId|resource)"', head):
        return "gcp-logging"
    if lead == "{" and '"data"' in head and re.search(r'"type"\s*:\s*"log"', head) and '"attributes"' in head:
        return "datadog-api"
    return None


def detect_wrapper(head: bytes) -> Detection:
    """The collection wrapper of a file, from its first decompressed bytes.

    Example:
        >>> detect_wrapper(b'{"log":"[2026-08-27 11:10:00] x\\\\n","stream":"stderr","time":"2026-08-27T03:10:00Z"}\\n').name
        'docker-json'
    """
    text = head.decode("utf-8", "replace")
    lines = text.split("\n")
    if len(head) >= 1024 and not head.endswith(b"\n") and len(lines) > 1:
        lines = lines[:-1]  # the head may end inside a line
    sample = [ln.rstrip("\r") for ln in lines if ln.strip()][:SAMPLE_LINES]
    if not sample:
        return Detection("plain", "plain (empty)")
    first = sample[0].lstrip()
    # JSON: an object, or an array of objects (`[`, `[{`); not `[pod/...] ` or `[2026-...] `
    if first.startswith("{") or first.rstrip() == "[" or first.replace(" ", "").startswith(("[{", "[]")):
        kinds: dict[str, int] = {}
        parsed = 0
        for ln in sample[:50]:
            try:
                rec = json.loads(ln)
            except ValueError:
                continue
            parsed += 1
            if isinstance(rec, dict):
                k = _json_kind(rec)
                if k:
                    kinds[k] = kinds.get(k, 0) + 1
        if parsed == 0 or (first in ("{", "[") or not kinds):
            doc = _document_kind(text)
            if doc:
                return Detection(doc, f"{doc}: a JSON document with its keys in the first {len(head)} bytes")
        if kinds:
            best = max(kinds, key=lambda k: kinds[k])
            n = min(len(sample), 50)
            if kinds[best] * 2 >= n:
                return Detection(best, f"{best}: {kinds[best]} of {n} sampled JSON lines")
        return Detection("plain", "plain (JSON lines without a collector's keys)")
    counts = {name: sum(1 for ln in sample if rx.match(ln)) for name, rx in _LINE_SHAPES}
    # a CRI line also looks like a kubectl line (time then text): CRI wins where both match
    if counts["cri"]:
        counts["kubectl"] -= counts["cri"]
    best = max(counts, key=lambda k: counts[k])
    if counts[best] * 2 >= len(sample) and counts[best] > 0:
        return Detection(best, f"{best}: {counts[best]} of {len(sample)} sampled lines")
    others = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    return Detection("plain", f"plain (no collector prefix on most lines{': ' + others if others else ''})")
