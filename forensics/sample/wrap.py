"""Write an incident's engine logs as a log pipeline would have kept them (CRI, Docker, journald, shippers).

The same lines, wrapped by a collector: the toolkit must give the same answer on the wrapped copy
as on the plain one (tests), and the benchmark measures what the wrapper costs. Each wrapper is
written the way its producer writes it (see ``docs/engine.md``, collection wrappers):
collector times are the engine's local time in UTC plus a small, deterministic pipe latency;
lines longer than 16 KiB are split as containerd and Docker split them (``P`` chunks, records
without ``\\n``); CRI output goes to a kubelet layout (``pods/<ns>_<pod>_<uid>/<container>/0.log``
with its rotations and the ``containers/`` symlinks).

Example:
    >>> lines = [b"[2026-09-02 12:51:17 TP0] Prefill batch, #new-seq: 1", b"Receive: obj=GenerateReqInput(rid='a')"]
    >>> out = list(wrap_lines(lines, "cri", tz="Asia/Singapore"))
    >>> out[0].decode()
    '2026-09-02T04:51:17.000317Z stderr F [2026-09-02 12:51:17 TP0] Prefill batch, #new-seq: 1\\n'
    >>> out[1].decode()[:40]
    '2026-09-02T04:51:17.000634Z stdout F Rec'
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import shutil
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

#: Wrappers this module writes.
WRITERS = ("cri", "docker-json", "kubectl", "kubectl-prefix", "journald-json", "journal-iso", "syslog-5424",
           "syslog-bsd", "loki-jsonl", "shipper-ndjson", "shipper-raw-cri", "es-hits", "cloudwatch", "gcp-logging",
           "datadog")

#: containerd's and Docker's default split size.
CHUNK = 16 * 1024

_ENGINE_TS = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?")
_ROUTER_TS = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})?)Z? +(?:TRACE|DEBUG|INFO|WARN|ERROR) ")


def _line_time(line: bytes, zone: dt.tzinfo) -> dt.datetime | None:
    m = _ENGINE_TS.match(line)
    if m:
        t = dt.datetime.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S")
        if m.group(2):
            t = t.replace(microsecond=int(m.group(2).decode().ljust(6, "0")))
        return t.replace(tzinfo=zone).astimezone(dt.UTC)
    r = _ROUTER_TS.match(line)
    if r:
        return dt.datetime.fromisoformat(r.group(1).decode()[:26]).replace(tzinfo=dt.UTC)
    return None


def _stream(line: bytes) -> str:
    # Python logging writes to stderr; print() (0.5.8-0.5.11 request logs) and uvicorn's access
    # log go to stdout.
    if b"] INFO:     " in line[:60] or line.startswith((b"Receive:", b"Finish:", b"INFO:")):
        return "stdout"
    return "stderr"


def _rfc3339(t: dt.datetime, *, fixed: bool = False) -> str:
    """Go's RFC3339Nano (trailing fraction zeros trimmed) or RFC3339NanoFixed, UTC."""
    frac = f"{t.microsecond:06d}000"
    if not fixed:
        frac = frac.rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def wrap_lines(
    lines: Iterable[bytes], wrapper: str, *, tz: str = "UTC", pod: str = "sglang-0", host: str = "gpu-node-1",
    container: str = "sglang", namespace: str = "inference",
) -> Iterator[bytes]:
    """Each engine line (no terminator) as the wrapper writes it: physical lines with ``\\n``.

    Document wrappers (``es-hits``, ``cloudwatch``, ``gcp-logging``) yield their framing too.
    """
    zone: dt.tzinfo = dt.UTC if tz == "UTC" else ZoneInfo(tz)
    lines = list(lines)
    # lines before the first timestamped one were read by the collector just before it
    last = next((t for t in (_line_time(ln, zone) for ln in lines) if t is not None),
                dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    first = True
    if wrapper == "es-hits":
        yield b'{\n  "took": 12,\n  "timed_out": false,\n  "hits": {\n    "total": {"value": 0, "relation": "gte"},\n    "hits": [\n'
    elif wrapper == "cloudwatch":
        yield b'{\n    "events": [\n'
    elif wrapper == "gcp-logging":
        yield b"[\n"
    for k, line in enumerate(lines, start=1):
        t = _line_time(line, zone)
        if t is not None:
            last = t
        # pipe latency: a few hundred microseconds, deterministic
        at = last + dt.timedelta(microseconds=(k * 317) % 9000)
        # JSON writers replace invalid UTF-8 with U+FFFD (Go's encoding/json, Python's json via us)
        text = line.decode("utf-8", "replace")
        stream = _stream(line)
        if wrapper == "cri":
            chunks = [line[i : i + CHUNK] for i in range(0, max(len(line), 1), CHUNK)] or [b""]
            for j, c in enumerate(chunks):
                tag = b"F" if j == len(chunks) - 1 else b"P"
                yield _rfc3339(at + dt.timedelta(microseconds=j)).encode() + b" " + stream.encode() + b" " + tag + b" " + c + b"\n"
        elif wrapper == "shipper-raw-cri":
            # Fluent Bit tailing containerd's files without its CRI parser: each CRI line in `log`
            chunks = [line[i : i + CHUNK] for i in range(0, max(len(line), 1), CHUNK)] or [b""]
            for j, c in enumerate(chunks):
                tag_s = "F" if j == len(chunks) - 1 else "P"
                cri_line = (f"{_rfc3339(at + dt.timedelta(microseconds=j))} {stream} {tag_s} "
                            + c.decode("utf-8", "replace"))
                yield (json.dumps({"@timestamp": _rfc3339(at)[:23] + "Z", "log": cri_line + "\n",
                                   "kubernetes": {"pod_name": pod, "namespace_name": namespace}},
                                  ensure_ascii=False) + "\n").encode()
        elif wrapper == "docker-json":
            chunks = [line[i : i + CHUNK] for i in range(0, max(len(line), 1), CHUNK)] or [b""]
            for j, c in enumerate(chunks):
                piece = c.decode("utf-8", "replace") + ("\n" if j == len(chunks) - 1 else "")
                yield (json.dumps({"log": piece, "stream": stream, "time": _rfc3339(at)}, separators=(",", ":"))
                       .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n").encode()
        elif wrapper in ("kubectl", "kubectl-prefix"):
            pre = f"[pod/{pod}/{container}] " if wrapper == "kubectl-prefix" else ""
            chunks = [line[i : i + CHUNK] for i in range(0, max(len(line), 1), CHUNK)] or [b""]
            # kubelet writes a partial chunk without newline: the next chunk's time lands inside the line
            body = b"".join(_rfc3339(at, fixed=True).encode() + b" " + c for c in chunks)
            yield pre.encode() + body + b"\n"
        elif wrapper == "journald-json":
            us = int(at.timestamp() * 1_000_000)
            try:
                msg: object = line.decode("utf-8")
            except UnicodeDecodeError:
                msg = list(line)  # journald writes non-UTF-8 messages as byte arrays
            yield (json.dumps({"__CURSOR": f"s=0;i={k:x}", "__REALTIME_TIMESTAMP": str(us), "_HOSTNAME": host,
                               "_SYSTEMD_UNIT": "sglang.service", "SYSLOG_IDENTIFIER": "python3", "_PID": "4242",
                               "PRIORITY": "6", "MESSAGE": msg}, ensure_ascii=False) + "\n").encode()
        elif wrapper == "journal-iso":
            yield at.strftime("%Y-%m-%dT%H:%M:%S+0000").encode() + f" {host} python3[4242]: ".encode() + line + b"\n"
        elif wrapper == "syslog-5424":
            yield (f"<14>1 {_rfc3339(at)} {host} sglang 4242 - - ".encode() + line + b"\n")
        elif wrapper == "syslog-bsd":
            local = at.astimezone(zone)
            yield (f"{local:%b} {local.day:2d} {local:%H:%M:%S} {host} python3[4242]: ".encode() + line + b"\n")
        elif wrapper == "loki-jsonl":
            yield (json.dumps({"labels": {"container": container, "namespace": namespace, "pod": pod,
                                          "stream": stream}, "line": text,
                               "timestamp": at.isoformat().replace("+00:00", "Z")},
                              ensure_ascii=False) + "\n").encode()
        elif wrapper == "shipper-ndjson":
            yield (json.dumps({"@timestamp": _rfc3339(at), "log": text + "\n", "stream": stream, "time": _rfc3339(at),
                               "kubernetes": {"pod_name": pod, "namespace_name": namespace,
                                              "container_name": container, "host": host}},
                              ensure_ascii=False) + "\n").encode()
        elif wrapper == "datadog":
            yield (json.dumps({"_id": f"AW{k:018d}", "date": _rfc3339(at)[:23] + "Z", "host": host,
                               "service": "sglang", "source": "python", "status": "info", "message": text,
                               "attributes": {"service": "sglang"},
                               "tags": [f"kube_namespace:{namespace}", f"pod_name:{pod}",
                                        f"kube_container_name:{container}"]}, ensure_ascii=False) + "\n").encode()
        elif wrapper in ("es-hits", "cloudwatch", "gcp-logging"):
            sep = b"" if first else b",\n"
            if wrapper == "es-hits":
                rec = {"_index": "logs-2026.09", "_id": f"{k:x}", "_score": None,
                       "_source": {"@timestamp": _rfc3339(at), "log": text + "\n", "stream": stream,
                                   "kubernetes": {"pod_name": pod, "namespace_name": namespace}}}
                yield sep + _indent(json.dumps(rec, indent=2, ensure_ascii=False), 6)
            elif wrapper == "cloudwatch":
                rec2 = {"logStreamName": f"{pod}_{namespace}_{container}-{'ab' * 32}",
                        "timestamp": int(at.timestamp() * 1000), "message": text,
                        "ingestionTime": int(at.timestamp() * 1000) + 250, "eventId": f"{k:056d}"}
                yield sep + _indent(json.dumps(rec2, indent=4, ensure_ascii=False), 8)
            else:
                rec3 = {"insertId": f"{k:x}", "logName": f"projects/p/logs/{stream}",
                        "receiveTimestamp": _rfc3339(at + dt.timedelta(milliseconds=40)),
                        "resource": {"labels": {"cluster_name": "c", "container_name": container,
                                                "namespace_name": namespace, "pod_name": pod, "project_id": "p"},
                                     "type": "k8s_container"},
                        "severity": "ERROR" if stream == "stderr" else "INFO", "textPayload": text,
                        "timestamp": _rfc3339(at)}
                yield sep + _indent(json.dumps(rec3, indent=2, ensure_ascii=False), 2)
            first = False
        else:
            raise ValueError(f"unknown wrapper {wrapper!r}; use one of {', '.join(WRITERS)}")
    if wrapper == "es-hits":
        yield b"\n    ]\n  }\n}\n"
    elif wrapper == "cloudwatch":
        yield b'\n    ],\n    "searchedLogStreams": []\n}\n'
    elif wrapper == "gcp-logging":
        yield b"\n]\n"


def _indent(text: str, n: int) -> bytes:
    pad = " " * n
    return "\n".join(pad + ln for ln in text.split("\n")).encode("utf-8")


def _read(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


#: Pod names per sample node: prefill nodes as a StatefulSet, decode nodes and the router as
#: Deployments (ReplicaSet hash + random suffix, dropped by the default node rule).
def pod_name(node: str) -> str:
    """The Kubernetes pod a sample node runs as.

    Example:
        >>> pod_name("prefill-0"), pod_name("decode-1"), pod_name("router")
        ('prefill-0', 'decode-1-7c6d9f8b4-x2k9p', 'router-5d8f7b6c9-q4wzt')
    """
    if node.startswith("decode-"):
        return f"{node}-7c6d9f8b4-x2k9p"
    if node == "router":
        return "router-5d8f7b6c9-q4wzt"
    return node


def wrap_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str], wrapper: str, *, tz: str,
              compress_rotated: bool = True) -> list[Path]:
    """Wrap every node directory of an engine tree (``src/<node>/<files>``) into ``dst``.

    CRI goes to a kubelet layout (``var/log/pods/...`` with rotations named as kubelet names them,
    and ``var/log/containers/`` symlinks); other wrappers keep ``<node>/<file>`` names (their
    compression kept). Returns the files written.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    written: list[Path] = []
    for node_dir in sorted(p for p in src.iterdir() if p.is_dir()):
        node = node_dir.name
        files = sorted(node_dir.iterdir(), key=_age)
        pod = pod_name(node)
        if wrapper == "cri":
            uid = f"{zlib.crc32(node.encode()):08x}-aaaa-bbbb-cccc-{len(node):012d}"
            base = dst / "var" / "log" / "pods" / f"inference_{pod}_{uid}" / "sglang"
            base.mkdir(parents=True, exist_ok=True)
            for i, f in enumerate(files):
                lines = _read(f)
                body = b"".join(wrap_lines(lines, "cri", tz=tz, pod=pod))
                live = i == len(files) - 1
                if live:
                    out = base / "0.log"
                    out.write_bytes(body)
                else:
                    stamp = _stamp(lines, tz)
                    older = i < len(files) - 2
                    out = base / (f"0.log.{stamp}" + (".gz" if older and compress_rotated else ""))
                    out.write_bytes(gzip.compress(body, mtime=0) if out.suffix == ".gz" else body)
                written.append(out)
            links = dst / "var" / "log" / "containers"
            links.mkdir(parents=True, exist_ok=True)
            link = links / f"{pod}_inference_sglang-{'0f' * 32}.log"
            link.symlink_to(os.path.relpath(base / "0.log", links))
        else:
            (dst / node).mkdir(parents=True, exist_ok=True)
            for f in files:
                body = b"".join(wrap_lines(_read(f), wrapper, tz=tz, pod=pod, host=f"gpu-{node}"))
                out = dst / node / f.name
                out.write_bytes(gzip.compress(body, mtime=0) if f.name.endswith(".gz") else body)
                written.append(out)
    return written


def _age(p: Path) -> tuple[int, str]:
    m = re.search(r"\.(\d+)(?:\.gz)?$", p.name)
    return (-int(m.group(1)) if m else 0, p.name)


def _stamp(lines: list[bytes], tz: str) -> str:
    zone: dt.tzinfo = dt.UTC if tz == "UTC" else ZoneInfo(tz)
    for line in reversed(lines):
        t = _line_time(line, zone)
        if t is not None:
            return t.strftime("%Y%m%d-%H%M%S")
    return "20260101-000000"
