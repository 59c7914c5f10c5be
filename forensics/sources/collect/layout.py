"""Which files to read, in which order, and which pod and logical node each belongs to.

* ``[NODE=]PATH`` arguments (files, directories, globs). ``NODE=`` names the node of every file
  under ``PATH`` (it wins over everything below).
* **Kubernetes node layouts**, recognised anywhere in a path (a responder copies ``/var/log`` off a
  node): ``pods/<namespace>_<pod>_<uid>/<container>/<N>.log`` with kubelet's rotation
  (``<N>.log.<YYYYMMDD-HHMMSS>`` plain, older ones ``.gz``) and the
  ``containers/<pod>_<namespace>_<container>-<id>.log`` symlinks, followed once: a file reached
  twice (the link and its target) is read once.
* A **pod is a process**: each pod is its own start series; pods are grouped into logical nodes
  by :class:`NodeRule` (the default drops a Deployment's ReplicaSet hash and random suffix and
  keeps a StatefulSet's ordinal; a ``--node-map`` TOML file of ``regex = node`` pairs overrides).
* Other files: a directory with subdirectories gives one node per subdirectory; a lone file is
  the node of its name without rotation, compression and ``.log`` suffixes.

Files of one node are read oldest first: numbered rotations (``sglang.log.2.gz`` before
``.1.gz`` before ``sglang.log``), dated ones by date, kubelet's by restart count then rotation
time, the live file last.

Example:
    >>> default_node("glm53-decode-6f7b9c8d4-x2k9p"), default_node("glm53-prefill-0"), default_node("router-k2x1q")
    ('glm53-decode', 'glm53-prefill-0', 'router')
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import InputError, MappingError, ParameterError
from forensics.sources.files import Unreadable, walk_dir

_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")
#: ``--export-metrics-to-file`` files (request-metrics JSONL), by name: the one rule read by name
#: (the file's *kind*, never its wrapper): ``sglang-request-metrics-YYYYMMDD_HH.log``
METRICS_RE = re.compile(r"sglang-request-metrics-(?P<d>\d{8})_(?P<h>\d{2})")
#: kubelet: /var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log[.<YYYYMMDD-HHMMSS>][.gz]
_POD_DIR = re.compile(r"^(?P<ns>[a-z0-9][a-z0-9\-]*)_(?P<pod>[a-z0-9][a-z0-9.\-]*)_(?P<uid>[0-9a-f\-]{8,})$")
_KUBELET_FILE = re.compile(r"^(?P<n>\d+)\.log(?:\.(?P<ts>\d{8}-\d{6}))?(?:\.(?:gz|zst|zstd))?$")
#: kubelet: /var/log/containers/<pod>_<namespace>_<container>-<container id>.log
_CONTAINER_LINK = re.compile(
    r"^(?P<pod>[a-z0-9][a-z0-9.\-]*)_(?P<ns>[a-z0-9][a-z0-9\-]*)_(?P<c>[a-z0-9][a-z0-9\-]*)-(?P<id>[0-9a-f]{64})\.log$")
#: generic rotation: numbered (`x.log.3.gz`) or dated (`x.log-20260901[.gz]`, `x.log.2026-09-01`)
_NUMBERED = re.compile(r"^(?P<base>.*?)\.(?P<n>\d{1,4})(?:\.(?:gz|zst|zstd))?$")
_DATED = re.compile(r"^(?P<base>.*?)[.\-_](?P<d>\d{4}-?\d\d-?\d\d(?:[-_T]?\d{2,6})?)(?:\.(?:gz|zst|zstd))?$")

#: Kubernetes' random suffix alphabet (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0/1/3.
_K8S_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_RAND5 = re.compile(r"^(?P<base>.+)-(?P<r>[b-df-hj-np-tv-z0-9]{5})$")
_HASH = re.compile(r"^(?P<base>.+)-(?P<h>[b-df-hj-np-tv-z0-9]{6,10})$")


def default_node(pod: str) -> str:
    """The logical node a pod belongs to by default: the pod name without its generated suffixes.

    * Deployment pods ``<deployment>-<pod-template-hash>-<5 random>`` -> ``<deployment>``;
    * ReplicaSet / DaemonSet / Job pods ``<name>-<5 random>`` -> ``<name>``;
    * StatefulSet pods ``<name>-<ordinal>`` keep the ordinal (it *is* the node identity);
    * anything else (a host, ``host/unit``) unchanged.

    A suffix is taken for generated only if it is made of consonants and digits, as Kubernetes'
    generator makes them (``-model`` or ``-node1`` stay).

    Example:
        >>> default_node("glm53-prefill-0-7d9f8"), default_node("decode-node1"), default_node("gpu-3/sglang.service")
        ('glm53-prefill-0', 'decode-node1', 'gpu-3/sglang.service')
    """
    if "/" in pod:
        return pod
    m = _RAND5.match(pod)
    if not m or m.group("r").isdigit():
        return pod
    base = m.group("base")
    h = _HASH.match(base)
    if h and not h.group("h").isdigit() and any(c.isdigit() for c in h.group("h")):
        return h.group("base")
    return base


@dataclass
class NodeRule:
    """Pods (or process labels) to logical nodes: ``--node-map`` rules first, then :func:`default_node`.

    Each rule is a regular expression searched in the pod name; the first that matches gives the
    node (``\\1`` etc. refer to its groups). A ``NODE=PATH`` argument overrides both (``fixed``).

    Example:
        >>> rule = NodeRule.from_pairs({r"^glm53-prefill-(\\d+)": r"prefill-\\1"})
        >>> rule.node_for("glm53-prefill-1-k2x1q"), rule.node_for("glm53-decode-6f7b9c8d4-x2k9p")
        ('prefill-1', 'glm53-decode')
    """

    rules: tuple[tuple[re.Pattern[str], str], ...] = ()
    source: str | None = None
    _cache: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_pairs(cls, pairs: dict[str, str], source: str | None = None) -> NodeRule:
        """Rules from ``{regex: node}`` in order."""
        rules = []
        for rx, node in pairs.items():
            try:
                pat = re.compile(rx)
            except re.error as exc:
                raise MappingError(f"invalid regular expression {rx!r} in the node map ({exc})",
                                   where=source, hint="fix the pattern (Python re syntax)") from exc
            if not isinstance(node, str) or not node.strip():
                raise MappingError(f"node map entry {rx!r} needs a node name", where=source,
                                   hint='write "regex" = "node"')
            rules.append((pat, node))
        return cls(tuple(rules), source)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> NodeRule:
        """Read a ``--node-map`` TOML file (``[nodes]`` table of ``"regex" = "node"``); None: defaults only.

        Example:
            >>> NodeRule.load(None).rules
            ()
        """
        if path is None:
            return cls()
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ParameterError(f"{p}: node map not found", hint="pass --node-map FILE (TOML)") from exc
        except tomllib.TOMLDecodeError as exc:
            raise MappingError(f"node map is not valid TOML ({exc})", where=str(p),
                               hint='write a [nodes] table of "regex" = "node" lines') from exc
        nodes = data.get("nodes")
        if not isinstance(nodes, dict) or not nodes:
            raise MappingError("node map has no [nodes] table", where=str(p),
                               hint='write a [nodes] table of "regex" = "node" lines')
        return cls.from_pairs({str(k): v for k, v in nodes.items()}, source=str(p))

    def mapped(self, name: str) -> str | None:
        """The node a ``--node-map`` rule gives ``name``, or None when no rule matches."""
        for pat, repl in self.rules:
            m = pat.search(name)
            if m:
                return m.expand(repl)
        return None

    def node_for(self, pod: str) -> str:
        """The logical node of one pod / process label."""
        hit = self._cache.get(pod)
        if hit is not None:
            return hit
        node = self.mapped(pod)
        if node is None:
            node = default_node(pod)
        self._cache[pod] = node
        return node

    def nodes_of(self, pods: pa.Array) -> pa.Array:
        """The node of every entry of a (dictionary) pod array; nulls stay null (the file's node)."""
        enc = pods if isinstance(pods.type, pa.DictionaryType) else pc.dictionary_encode(pods)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        values = [None if v is None else self.node_for(v) for v in enc.dictionary.to_pylist()]
        return pa.DictionaryArray.from_arrays(enc.indices, pa.array(values, type=pa.string()))


@dataclass
class EngineSource:
    """One file to read, with the pod and logical node it belongs to.

    ``pod`` is the process the file holds (a Kubernetes pod, else the node itself); lines whose
    wrapper names their own pod (shipper exports) override it per line.

    Example:
        >>> EngineSource(node="prefill-0", path=Path("sglang.log")).kind
        'log'
    """

    node: str
    path: Path
    kind: str = "log"  # 'log' | 'metrics'
    order: tuple[Any, ...] = field(default_factory=tuple)
    pod: str | None = None
    container: str | None = None
    namespace: str | None = None
    #: the node was given by the user (``NODE=PATH``): per-line pods do not move lines elsewhere
    fixed_node: bool = False


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
    name = re.sub(r"[.\-_]\d{4}-?\d\d-?\d\d(?:[-_T]?\d{2,6})?$", "", name)
    name = re.sub(r"\.(log|txt|out|err|jsonl|json|ndjson)$", "", name)
    name = re.sub(r"-\d{8}_\d{2}$", "", name)
    return name or path.name


def rotation_key(path: Path) -> tuple[Any, ...]:
    """Sort key putting a file's rotations oldest first and the live file last.

    Example:
        >>> names = ["0.log", "0.log.20260902-101500", "0.log.20260901-090000.gz", "1.log"]
        >>> sorted(names, key=lambda n: rotation_key(Path(n)))
        ['0.log.20260901-090000.gz', '0.log.20260902-101500', '0.log', '1.log']
        >>> sorted(["s.log", "s.log.1.gz", "s.log.2.gz"], key=lambda n: rotation_key(Path(n)))
        ['s.log.2.gz', 's.log.1.gz', 's.log']
    """
    name = path.name
    k = _KUBELET_FILE.match(name)
    if k:
        # restart count first (a container restart is a later process), then rotation time
        return (str(path.parent), "", int(k.group("n")), 0 if k.group("ts") else 1, k.group("ts") or "", name)
    m = _NUMBERED.match(name)
    if m and not _DATED.match(name):
        return (str(path.parent), m.group("base"), 0, 0, f"{99_999_999 - int(m.group('n')):08d}", name)
    d = _DATED.match(name)
    if d:
        return (str(path.parent), d.group("base"), 0, 0, "~" + d.group("d").replace("-", ""), name)
    base = name
    for suf in _COMPRESSED_SUFFIXES:
        if base.endswith(suf):
            base = base[: -len(suf)]
    return (str(path.parent), base, 0, 1, "", name)


def _files_in(directory: Path, skip_unreadable: bool, unread: list[Unreadable]) -> tuple[list[Path], list[Path]]:
    """Files under a directory (hidden ones skipped, directory links followed once), and dangling
    symlinks found there; an unreadable entry is an error naming it, or listed in ``unread``."""
    dangling: list[Path] = []
    files = walk_dir(directory, skip_unreadable=skip_unreadable, unread=unread, dangling=dangling)
    return files, sorted(dangling)


@dataclass(frozen=True)
class _K8s:
    pod: str
    namespace: str | None
    container: str | None


def kubernetes_place(path: Path) -> _K8s | None:
    """The pod (namespace, container) a kubelet-layout path names, else None.

    Example:
        >>> kubernetes_place(Path("/var/log/pods/llm_glm53-prefill-0_5f1c2d3e-aaaa-bbbb-cccc-1234567890ab/sglang/0.log"))
        _K8s(pod='glm53-prefill-0', namespace='llm', container='sglang')
    """
    parts = path.parts
    if len(parts) >= 3 and _KUBELET_FILE.match(parts[-1]):
        m = _POD_DIR.match(parts[-3])
        if m:
            return _K8s(m.group("pod"), m.group("ns"), parts[-2])
    c = _CONTAINER_LINK.match(path.name)
    if c:
        return _K8s(c.group("pod"), c.group("ns"), c.group("c"))
    return None


def resolve_sources(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str] | EngineSource],
    *,
    node_map: str | os.PathLike[str] | NodeRule | None = None,
    warnings: list[str] | None = None,
    skip_unreadable: bool = False,
    unread: list[Unreadable] | None = None,
) -> list[EngineSource]:
    """Turn ``[NODE=]PATH`` arguments into files with their pod and node, in reading order.

    A directory whose subdirectories hold files gives one node per subdirectory (named after it;
    files directly inside it are nodes by their stem); a file alone is the node of its stem; a
    Kubernetes layout anywhere in a path gives the pod, grouped into nodes by the node rule.
    Dangling symlinks (a ``containers/`` link whose target was not copied) are reported in
    ``warnings``. Symlinked directories are followed (loops cut); an unreadable file or directory
    is an InputError naming it, or with ``skip_unreadable`` is appended to ``unread``.
    An :class:`EngineSource` item is already resolved and kept as it is (a Spark
    task reading the files another process resolved, with their pods).

    Example:
        >>> resolve_sources([])
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: no engine paths given (pass --engine [NODE=]PATH)
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    given = list(paths)
    ready = [p for p in given if isinstance(p, EngineSource)]
    items = [os.fspath(p) for p in given if not isinstance(p, EngineSource)]
    if not items and not ready:
        raise InputError("no engine paths given", hint="pass --engine [NODE=]PATH")
    rule = node_map if isinstance(node_map, NodeRule) else NodeRule.load(node_map)
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
            out.append(_source(p, None, node, rule))
        elif p.is_dir():
            files, dangling = _files_in(p, skip_unreadable, unread if unread is not None else [])
            if warnings is not None:
                warnings.extend(f"{d}: symlink whose target {os.readlink(d)} is not there: not read"
                                for d in dangling)
            if not files and not (skip_unreadable and unread):
                raise InputError(f"directory {raw} contains no files", hint="check the path")
            for f in files:
                rel = f.relative_to(p)
                out.append(_source(f, rel, node, rule))
        elif p.is_symlink():
            raise InputError(f"{raw}: symlink whose target {os.readlink(p)} is not there",
                             hint="copy the target file too (kubelet links point into /var/log/pods)")
        else:
            raise InputError(f"{raw}: no such file or directory", hint="check the path")
    seen: set[Path] = set()
    unique: list[EngineSource] = []
    # real files before symlinks, so a /var/log/containers link to a file also given is dropped
    for s in [*ready, *sorted(out, key=lambda s: s.path.is_symlink())]:
        r = s.path.resolve()
        if r in seen:
            continue
        seen.add(r)
        if s.order:  # resolved before: kind and order as given
            unique.append(s)
            continue
        s.kind = "metrics" if METRICS_RE.search(s.path.name) else "log"
        s.order = (s.node, s.kind != "log", s.pod or "", *rotation_key(s.path.resolve() if s.path.is_symlink() else s.path))
        unique.append(s)
    unique.sort(key=lambda s: s.order)
    return unique


def _source(f: Path, rel: Path | None, node: str | None, rule: NodeRule) -> EngineSource:
    k8s = kubernetes_place(f)
    if k8s is None and f.is_symlink():
        k8s = kubernetes_place(f.resolve())
    if k8s is not None:
        n = node if node is not None else rule.node_for(k8s.pod)
        return EngineSource(n, f, pod=k8s.pod, container=k8s.container, namespace=k8s.namespace,
                            fixed_node=node is not None)
    if node is not None:
        return EngineSource(node, f, fixed_node=True)
    n = rel.parts[0] if rel is not None and len(rel.parts) > 1 else node_of_file(f)
    # a name from the path is not a pod name: only --node-map rules rename it
    return EngineSource(rule.mapped(n) or n, f)
