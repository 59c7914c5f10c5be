"""Where the generated incident's files are, and how big they are.

The sample generator writes (``forensics.sample.generate``)::

    <out>/engine/<node>/sglang.log (+ rotated sglang.log.1.gz, ...)
    <out>/engine/router/smg.log
    <out>/gateway/<preset>/...        e.g. cloudflare-http/<YYYYMMDD>/*.log.gz, litellm/*.csv
    <out>/truth.json

Each directory under ``gateway/`` is one gateway source, named after its preset; the bare
DuckDB reader for it is chosen from the file names (``.csv`` -> ``read_csv``, else ``read_json``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from isal import igzip, isal_zlib

#: gateway presets of issue #3; a gateway directory with another name is ingested with 'auto'
KNOWN_PRESETS = (
    "cloudflare-http",
    "cloudflare-ai-gateway",
    "nginx-json",
    "envoy",
    "litellm",
    "otel",
    "smg-router",
)

#: zone of the generated engine logs' zone-less local timestamps
ENGINE_TZ = "Asia/Singapore"

MANIFEST = "bench-manifest.json"


@dataclass
class FileGroup:
    """A set of input files measured together (one gateway source, or all engine logs)."""

    name: str
    files: list[str] = field(default_factory=list)
    disk_bytes: int = 0
    raw_bytes: int = 0  # decompressed
    lines: int = 0  # physical lines of the decompressed text (CSV: including the header)
    reader: str = "lines"  # bare DuckDB reader: 'json', 'csv' or 'lines'
    preset: str = "auto"  # toolkit gateway preset


def _files_under(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _measure(files: list[Path]) -> tuple[int, int, int]:
    disk = raw = lines = 0
    for p in files:
        disk += p.stat().st_size
        with open(p, "rb") as fh:
            magic = fh.read(2)
        # ISA-L inflates in 0.45x gzip's CPU (1.15 vs 2.54 s on a 1.3 GB engine rotation), the
        # same lines and bytes, and the same EOFError at a truncated member: counting a 10 M set's
        # ~70 GB of text is minutes of CPU either way
        opener = igzip.open if magic == b"\x1f\x8b" else open
        last = b"\n"
        try:
            with opener(p, "rb") as fh:
                while block := fh.read(1 << 22):
                    raw += len(block)
                    lines += block.count(b"\n")
                    last = block[-1:]
        except (EOFError, OSError, cast("type[Exception]", isal_zlib.error)):  # a truncated or corrupt .gz: count what is readable
            pass
        if last != b"\n":
            lines += 1
    return disk, raw, lines


def gateway_groups(data_dir: Path) -> list[FileGroup]:
    """One group per directory under ``gateway/`` (sizes not filled in)."""
    root = data_dir / "gateway"
    groups: list[FileGroup] = []
    if not root.is_dir():
        return groups
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = _files_under(sub)
        if not files:
            continue
        csv = all(".csv" in f.name for f in files)
        groups.append(
            FileGroup(
                name=sub.name,
                files=[str(f) for f in files],
                reader="csv" if csv else "json",
                preset=sub.name if sub.name in KNOWN_PRESETS else "auto",
            )
        )
    return groups


def engine_group(data_dir: Path) -> FileGroup:
    """All engine and router log files under ``engine/`` (sizes not filled in)."""
    root = data_dir / "engine"
    files = _files_under(root) if root.is_dir() else []
    return FileGroup(name="engine", files=[str(f) for f in files], reader="lines")


@dataclass
class Manifest:
    """What a generated data set holds: requests, file groups with sizes, truth summary."""

    scale: str
    requests: int
    seed: int
    gateway: list[FileGroup]
    engine: FileGroup
    n_leaks: int | None = None
    generate_s: float | None = None
    generate_peak_rss: int | None = None
    generator_version: str | None = None

    @property
    def gateway_lines(self) -> int:
        """Physical lines over all gateway files."""
        return sum(g.lines for g in self.gateway)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (paths relative to the data set)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """Inverse of :meth:`to_json`."""
        gw = [FileGroup(**g) for g in data["gateway"]]
        eng = FileGroup(**data["engine"])
        rest = {k: v for k, v in data.items() if k not in ("gateway", "engine")}
        return cls(gateway=gw, engine=eng, **rest)


def build_manifest(data_dir: Path, scale: str, requests: int, seed: int) -> Manifest:
    """Scan a generated data set: file groups, on-disk and decompressed bytes, line counts."""
    groups = gateway_groups(data_dir)
    for g in groups:
        g.disk_bytes, g.raw_bytes, g.lines = _measure([Path(f) for f in g.files])
    eng = engine_group(data_dir)
    eng.disk_bytes, eng.raw_bytes, eng.lines = _measure([Path(f) for f in eng.files])
    n_leaks = None
    truth = data_dir / "truth.json"
    if truth.is_file():
        with open(truth, encoding="utf-8") as fh:
            n_leaks = len(json.load(fh).get("leaks", []))
    return Manifest(scale=scale, requests=requests, seed=seed, gateway=groups, engine=eng, n_leaks=n_leaks,
                    generator_version=generator_version())


def generator_version() -> str | None:
    """``forensics.sample.GENERATOR_VERSION`` when the generator provides one."""
    try:
        import forensics.sample as sample
    except ImportError:
        return None
    v = getattr(sample, "GENERATOR_VERSION", None)
    return None if v is None else str(v)


def load_manifest(data_dir: Path) -> Manifest | None:
    """The cached manifest of a data set, or None."""
    p = data_dir / MANIFEST
    if not p.is_file():
        return None
    with open(p, encoding="utf-8") as fh:
        return Manifest.from_json(json.load(fh))


def save_manifest(data_dir: Path, manifest: Manifest) -> None:
    """Write the manifest atomically."""
    p = data_dir / MANIFEST
    tmp = p.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest.to_json(), fh, indent=1)
    os.replace(tmp, p)


def truth_leaks(data_dir: Path) -> list[dict[str, Any]]:
    """The ``leaks`` list of ``truth.json`` (empty if absent)."""
    p = data_dir / "truth.json"
    if not p.is_file():
        return []
    with open(p, encoding="utf-8") as fh:
        leaks = json.load(fh).get("leaks", [])
    return list(leaks)
