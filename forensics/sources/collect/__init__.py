"""The collection stage: turn source files into :class:`~forensics.sources.lines.LineBatch` objects.

A responder holds what the cluster's log pipeline kept, not raw ``sglang.log`` files. This
package reads any such file and hands the line scanners the engine's own lines:

* :mod:`.blocks` -- a file's decompressed bytes in bounded blocks (plain, gzip via ISA-L, zstd;
  every member and frame; truncation, damage and trailing bytes reported);
* :mod:`.reader` -- blocks into batches of lines (numpy newline index, CRLF, last line without
  newline, resume at a byte offset and line number, memory bounded);
* :mod:`.detect`, :mod:`.prefix`, :mod:`.records` -- the collection wrappers, detected per file
  from content and stripped vectorised: CRI (containerd / CRI-O), ``kubectl logs``, journald,
  syslog, Docker json-file, Loki, Elasticsearch / OpenSearch, CloudWatch, Google Cloud Logging,
  Datadog;
* :mod:`.layout` -- which files to read, in which order, for which pod and logical node
  (Kubernetes ``/var/log/pods`` and ``/var/log/containers``, kubelet rotation, ``--node-map``).

Example:
    >>> from forensics.sources import collect
    >>> "cri" in collect.WRAPPERS
    True
"""

from __future__ import annotations

from forensics.sources.collect.blocks import StreamStatus, iter_blocks
from forensics.sources.collect.detect import WRAPPERS, Detection, detect_wrapper, make_wrapper
from forensics.sources.collect.reader import LineReader, ReadResult, read_lines

__all__ = [
    "WRAPPERS",
    "Detection",
    "LineReader",
    "ReadResult",
    "StreamStatus",
    "detect_wrapper",
    "iter_blocks",
    "make_wrapper",
    "read_lines",
]
