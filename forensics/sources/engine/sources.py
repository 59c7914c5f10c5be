"""Which files an engine ingest reads, the node each belongs to, and in what order.

``[NODE=]PATH`` arguments: a directory with subdirectories gives one node per subdirectory
(named after it); a file alone is the node of its name without rotation/compression/``.log``
suffixes. Files of one node are read oldest rotation first (``sglang.log.2.gz``, ``sglang.log.1.gz``,
``sglang.log``), so lines come in time order. Compression is recognised by content, not by name.

Example:
    >>> node_of_file(Path("decode-1.log.2.gz"))
    'decode-1'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import InputError, ParameterError

#: Rank of each rotation suffix: ``sglang.log.2.gz`` (oldest) before ``sglang.log.1.gz`` before ``sglang.log``.
_ROTATION = re.compile(r"^(?P<base>.*?)(?:\.(?P<n>\d+))?(?:\.(?:gz|zst|zstd))?$")
#: ``--export-metrics-to-file`` files (request-metrics JSONL), by name.
METRICS_RE = re.compile(r"sglang-request-metrics-(?P<d>\d{8})_(?P<h>\d{2})")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


@dataclass
class EngineSource:
    """One file to read, with the node it belongs to.

    Example:
        >>> EngineSource(node="prefill-0", path=Path("sglang.log")).kind
        'log'
    """

    node: str
    path: Path
    kind: str = "log"  # 'log' | 'metrics'
    order: tuple[Any, ...] = field(default_factory=tuple)


# -- path resolution ------------------------------------------------------------------------------


def node_of_file(path: Path) -> str:
    """The node name a lone file stands for: its name without rotation/compression/.log suffixes.

    Example:
        >>> node_of_file(Path("decode-1.log.2.gz"))
        'decode-1'
        >>> node_of_file(Path("sglang-request-metrics-20260828_13.log"))
        'sglang-request-metrics'
    """
    name = path.name
    for suf in _COMPRESSED_SUFFIXES:
        if name.endswith(suf):
            name = name[: -len(suf)]
    name = re.sub(r"\.\d+$", "", name)
    name = re.sub(r"\.(log|txt|out|err|jsonl|json)$", "", name)
    name = re.sub(r"-\d{8}_\d{2}$", "", name)
    return name or path.name


def _rotation_key(path: Path) -> tuple[Any, ...]:
    # Older rotations carry larger numbers; read them first so lines come in time order.
    m = _ROTATION.match(path.name)
    base = m.group("base") if m else path.name
    n = int(m.group("n")) if m and m.group("n") else 0
    return (str(path.parent), base, -n, path.name)


def _files_in(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def resolve_sources(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[EngineSource]:
    """Turn ``[NODE=]PATH`` arguments into files with their node, in reading order.

    A directory whose subdirectories hold files gives one node per subdirectory (named after it;
    files directly inside it are nodes by their stem); a file alone is the node of its stem.

    Example:
        >>> resolve_sources([])
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: no engine paths given (pass --engine [NODE=]PATH)
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    items = [os.fspath(p) for p in paths]
    if not items:
        raise InputError("no engine paths given", hint="pass --engine [NODE=]PATH")
    out: list[EngineSource] = []
    for item in items:
        node: str | None = None
        raw = item
        if "=" in item and not Path(item).exists():
            node, raw = item.split("=", 1)
            node = node.strip()
            if not node:
                raise ParameterError(f"empty node name in {item!r}", hint="use NODE=PATH")
        p = Path(raw)
        if p.is_file():
            out.append(EngineSource(node or node_of_file(p), p))
        elif p.is_dir():
            files = _files_in(p)
            if not files:
                raise InputError(f"directory {raw} contains no files", hint="check the path")
            for f in files:
                rel = f.relative_to(p)
                if node is not None:
                    n = node
                elif len(rel.parts) > 1:
                    n = rel.parts[0]
                else:
                    n = node_of_file(f)
                out.append(EngineSource(n, f))
        else:
            raise InputError(f"{raw}: no such file or directory", hint="check the path")
    seen: set[Path] = set()
    unique: list[EngineSource] = []
    for s in out:
        r = s.path.resolve()
        if r in seen:
            continue
        seen.add(r)
        s.kind = "metrics" if METRICS_RE.search(s.path.name) else "log"
        s.order = (s.node, s.kind != "log", *_rotation_key(s.path))
        unique.append(s)
    unique.sort(key=lambda s: s.order)
    return unique
