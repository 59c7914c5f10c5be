"""The JSON record formats of collected logs, declared as data (one :class:`RecordFormat` each).

Where a format's text, time, pod, host and stream are, and where its records live; the reader
(:mod:`.records`) and detection (:mod:`.detect`) read this table, nothing else names a field.

Example:
    >>> FORMATS["docker-json"].message, FORMATS["cloudwatch"].array_path
    (('log',), ('events',))
    >>> split_path("labels.compute.googleapis.com/resource_name")
    ['labels', 'compute.googleapis.com/resource_name']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class RecordFormat:
    """One JSON record format: field paths (dotted, first non-empty wins) and where records live."""

    name: str
    message: tuple[str, ...]
    time: tuple[str, ...]
    #: ``rfc3339`` (string), ``epoch_ms`` / ``epoch_us`` (number or numeric string), ``epoch_s``
    time_unit: str
    pod: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    stream: tuple[str, ...] = ()
    #: a tag list (``["pod_name:x", ...]``) holding the pod, and the tag's prefix
    pod_tag: tuple[str, str] | None = None
    #: the record's text continues in the next record of the same stream unless it ends with ``\n``
    join_partial: bool = False
    #: the message may be a JSON array of byte values (journald, non-UTF-8 text)
    bytes_message: bool = False
    #: None: one record per line (NDJSON); else the key path of the records array in a document
    array_path: tuple[str, ...] | None = None
    #: pod and node come from the host and this identifier (journald: host/unit)
    host_unit: tuple[str, ...] = ()
    #: where the format is documented
    source: str = ""


#: Every JSON wrapper, by name. Detection (:mod:`.detect`) tells them apart by their keys.
FORMATS: dict[str, RecordFormat] = {f.name: f for f in (
    RecordFormat(
        "docker-json", message=("log",), time=("time",), time_unit="rfc3339", stream=("stream",),
        join_partial=True,
        source="moby `daemon/logger/jsonfilelog/jsonlog/jsonlogbytes.go` (log, stream, attrs, time "
               "RFC3339Nano); lines over 16 KiB split into records whose `log` lacks the final `\\n`"),
    RecordFormat(
        "journald-json", message=("MESSAGE",), time=("__REALTIME_TIMESTAMP",), time_unit="epoch_us",
        host=("_HOSTNAME",), host_unit=("_SYSTEMD_UNIT", "SYSLOG_IDENTIFIER", "_COMM"), bytes_message=True,
        source="systemd `docs/JOURNAL_EXPORT_FORMATS.md` (JSON format: `__REALTIME_TIMESTAMP` µs as a "
               "string, binary or non-UTF-8 `MESSAGE` as an array of byte values) and `journalctl -o json`"),
    RecordFormat(
        "loki-jsonl", message=("line",), time=("timestamp",), time_unit="rfc3339",
        pod=("labels.pod", "labels.pod_name", "labels.k8s_pod_name", "labels.kubernetes_pod_name"),
        host=("labels.node_name", "labels.host", "labels.hostname", "labels.instance"),
        stream=("labels.stream",),
        source="grafana/loki `pkg/logcli/output/jsonl.go` (`logcli query -o jsonl`: labels, line, "
               "timestamp in the chosen zone)"),
    RecordFormat(
        "es-hits", message=("_source.log", "_source.message", "_source.body"),
        time=("_source.@timestamp", "_source.timestamp", "_source.time"), time_unit="rfc3339",
        pod=("_source.kubernetes.pod_name", "_source.kubernetes.pod.name", "_source.k8s.pod.name"),
        host=("_source.kubernetes.host", "_source.kubernetes.node.name", "_source.host.name", "_source.host"),
        stream=("_source.stream",), array_path=("hits", "hits"),
        source="Elasticsearch / OpenSearch `_search` response (`hits.hits[]._source`) of documents "
               "written by Fluent Bit (`log`, `kubernetes.pod_name`), Filebeat (`message`, "
               "`kubernetes.pod.name`) or Vector (`message`, `kubernetes.pod_name`)"),
    RecordFormat(
        "es-hit-lines", message=("_source.log", "_source.message", "_source.body"),
        time=("_source.@timestamp", "_source.timestamp", "_source.time"), time_unit="rfc3339",
        pod=("_source.kubernetes.pod_name", "_source.kubernetes.pod.name", "_source.k8s.pod.name"),
        host=("_source.kubernetes.host", "_source.kubernetes.node.name", "_source.host.name", "_source.host"),
        stream=("_source.stream",),
        source="Elasticsearch / OpenSearch hits one per line (elasticdump, `_search` scrolled to NDJSON)"),
    RecordFormat(
        "shipper-ndjson", message=("log", "message", "body"), time=("@timestamp", "timestamp", "time", "date"),
        time_unit="rfc3339",
        pod=("kubernetes.pod_name", "kubernetes.pod.name", "k8s.pod.name", "kubernetes.pod_id"),
        host=("kubernetes.host", "kubernetes.node.name", "host.name", "hostname", "host"),
        stream=("stream",),
        source="Fluent Bit `es`/`file` outputs and the kubernetes filter (`log`, `@timestamp`, "
               "`kubernetes.pod_name`); Filebeat ECS (`message`, `kubernetes.pod.name`); Vector "
               "`kubernetes_logs` source (`message`, `timestamp`, `kubernetes.pod_name`)"),
    RecordFormat(
        "cloudwatch", message=("message",), time=("timestamp",), time_unit="epoch_ms",
        pod=("logStreamName",), array_path=("events",),
        source="AWS CLI `aws logs filter-log-events` / `get-log-events` output (`events[]` with "
               "`logStreamName`, `timestamp` ms since the epoch, `message`, `ingestionTime`)"),
    RecordFormat(
        "cloudwatch-lines", message=("message",), time=("timestamp",), time_unit="epoch_ms",
        pod=("logStreamName",),
        source="CloudWatch Logs events one per line (`aws logs ... | jq -c '.events[]'`, subscription exports)"),
    RecordFormat(
        "gcp-logging", message=("textPayload", "jsonPayload.message", "jsonPayload.log", "jsonPayload.msg"),
        time=("timestamp", "receiveTimestamp"), time_unit="rfc3339",
        pod=("resource.labels.pod_name", "labels.k8s-pod/name"),
        host=("labels.compute.googleapis.com/resource_name", "resource.labels.node_name"), array_path=(),
        source="Google Cloud Logging `LogEntry` (`textPayload` / `jsonPayload`, `timestamp`, "
               "`resource.labels.pod_name`) as `gcloud logging read --format=json` prints them"),
    RecordFormat(
        "gcp-logging-lines", message=("textPayload", "jsonPayload.message", "jsonPayload.log", "jsonPayload.msg"),
        time=("timestamp", "receiveTimestamp"), time_unit="rfc3339",
        pod=("resource.labels.pod_name", "labels.k8s-pod/name"),
        host=("labels.compute.googleapis.com/resource_name", "resource.labels.node_name"),
        source="Google Cloud Logging sink exports to Cloud Storage (one `LogEntry` per line)"),
    RecordFormat(
        "datadog", message=("attributes.message", "message", "content.message"),
        time=("attributes.timestamp", "date", "timestamp", "content.timestamp"), time_unit="rfc3339",
        host=("attributes.host", "host", "content.host"), pod_tag=("tags", "pod_name:"),
        source="Datadog log archives (one JSON log per line: `_id`, `date`, `host`, `service`, `message`, "
               "`attributes`, `tags` with `pod_name:`) and Logs API v2 `data[].attributes`"),
    RecordFormat(
        "datadog-api", message=("attributes.message",), time=("attributes.timestamp",), time_unit="rfc3339",
        host=("attributes.host",), pod_tag=("attributes.tags", "pod_name:"), array_path=("data",),
        source="Datadog Logs API v2 `POST /api/v2/logs/events/search` response (`data[].attributes`)"),
)}


def schema_of(paths: list[str]) -> pa.Schema:
    """An explicit pyarrow schema holding just these dotted paths (leaves typed later, as text)."""
    tree: dict[str, Any] = {}
    for p in paths:
        node = tree
        parts = split_path(p)
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node.setdefault(parts[-1], None)

    def typ(v: Any) -> pa.DataType:
        if v is None:
            return pa.string()
        return pa.struct([(k, typ(x)) for k, x in v.items()])

    return pa.schema([(k, typ(v)) for k, v in tree.items()])


def split_path(path: str) -> list[str]:
    """Dotted path parts; ``labels.compute.googleapis.com/resource_name`` keeps its dotted key."""
    if path.startswith("labels.") and ("/" in path or path.count(".") > 1):
        return ["labels", path[len("labels."):]]
    return path.split(".")
