"""Kubernetes layouts, rotation order, pods grouped into logical nodes, the node map."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from forensics.errors import MappingError
from forensics.sources.collect.layout import (
    NodeRule,
    default_node,
    kubernetes_place,
    resolve_sources,
    rotation_key,
)

UID = "5f1c2d3e-aaaa-bbbb-cccc-1234567890ab"
CID = "0f" * 32


@pytest.mark.parametrize(
    ("pod", "node"),
    [
        ("glm53-prefill-0", "glm53-prefill-0"),                   # StatefulSet: the ordinal is the node
        ("glm53-prefill-12", "glm53-prefill-12"),
        ("glm53-decode-6f7b9c8d4-x2k9p", "glm53-decode"),         # Deployment: hash and suffix dropped
        ("glm53-prefill-0-7d9f8", "glm53-prefill-0"),             # the restart example
        ("glm53-prefill-0-k2x1q", "glm53-prefill-0"),
        ("sgl-router-5d8f7b6c9-q4wzt", "sgl-router"),
        ("node-exporter-xkqzt", "node-exporter"),                 # DaemonSet / ReplicaSet pod
        ("decode-node1", "decode-node1"),                         # vowels: a word, not a generated suffix
        ("sglang-model", "sglang-model"),
        ("prefill-12345", "prefill-12345"),                       # all digits: an ordinal-like name, kept
        ("gpu-node-7/sglang.service", "gpu-node-7/sglang.service"),
    ],
)
def test_default_node_rule(pod: str, node: str) -> None:
    assert default_node(pod) == node


def test_node_map_regex_wins_then_default(tmp_path: Path) -> None:
    f = tmp_path / "nodes.toml"
    f.write_text('[nodes]\n"^glm53-prefill-(\\\\d+)" = "prefill-\\\\1"\n"decode" = "decode-pool"\n')
    rule = NodeRule.load(f)
    assert [rule.node_for(p) for p in ("glm53-prefill-3-7d9f8", "glm53-decode-6f7b9c8d4-x2k9p", "router-q4wzt")] == [
        "prefill-3", "decode-pool", "router"]


@pytest.mark.parametrize(
    ("text", "error"),
    [("nodes = 1\n", r"no \[nodes\] table"), ("[nodes]\n'(' = 'x'\n", "invalid regular expression"),
     ("[nodes\n", "not valid TOML"), ("[nodes]\n'a' = ''\n", "needs a node name")],
)
def test_bad_node_map_is_one_clear_error(tmp_path: Path, text: str, error: str) -> None:
    f = tmp_path / "nodes.toml"
    f.write_text(text)
    with pytest.raises(MappingError, match=error):
        NodeRule.load(f)


def _kubelet(root: Path, ns: str, pod: str, container: str, names: list[str]) -> Path:
    d = root / "var" / "log" / "pods" / f"{ns}_{pod}_{UID}" / container
    d.mkdir(parents=True)
    for n in names:
        (d / n).write_bytes(gzip.compress(b"x\n") if n.endswith(".gz") else b"x\n")
    return d


def test_kubelet_layout_pods_nodes_and_rotation_order(tmp_path: Path) -> None:
    _kubelet(tmp_path, "llm", "glm53-prefill-0", "sglang",
             ["0.log", "0.log.20260902-101500", "0.log.20260901-090000.gz", "1.log"])
    _kubelet(tmp_path, "llm", "glm53-decode-6f7b9c8d4-x2k9p", "sglang", ["0.log"])
    _kubelet(tmp_path, "llm", "glm53-decode-6f7b9c8d4-b7wqz", "sglang", ["0.log"])  # new pod after a rollout
    got = [(s.node, s.pod, s.container, s.path.name) for s in resolve_sources([tmp_path])]
    assert got == [
        ("glm53-decode", "glm53-decode-6f7b9c8d4-b7wqz", "sglang", "0.log"),
        ("glm53-decode", "glm53-decode-6f7b9c8d4-x2k9p", "sglang", "0.log"),
        ("glm53-prefill-0", "glm53-prefill-0", "sglang", "0.log.20260901-090000.gz"),
        ("glm53-prefill-0", "glm53-prefill-0", "sglang", "0.log.20260902-101500"),
        ("glm53-prefill-0", "glm53-prefill-0", "sglang", "0.log"),
        ("glm53-prefill-0", "glm53-prefill-0", "sglang", "1.log"),
    ]


def test_containers_symlinks_are_followed_once(tmp_path: Path) -> None:
    d = _kubelet(tmp_path, "llm", "glm53-prefill-0", "sglang", ["0.log"])
    links = tmp_path / "var" / "log" / "containers"
    links.mkdir()
    (links / f"glm53-prefill-0_llm_sglang-{CID}.log").symlink_to(d / "0.log")
    srcs = resolve_sources([tmp_path])
    assert [(s.pod, s.path.name) for s in srcs] == [("glm53-prefill-0", "0.log")]
    # only the links given: read through the link, the pod from its name
    only = resolve_sources([links])
    assert [(s.node, s.pod, s.container) for s in only] == [("glm53-prefill-0", "glm53-prefill-0", "sglang")]


def test_dangling_container_link_is_reported(tmp_path: Path) -> None:
    links = tmp_path / "containers"
    links.mkdir()
    (links / f"p-0_llm_sglang-{CID}.log").symlink_to("/var/log/pods/missing/sglang/0.log")
    (links / "real.log").write_text("x\n")
    warnings: list[str] = []
    srcs = resolve_sources([links], warnings=warnings)
    assert [s.path.name for s in srcs] == ["real.log"]
    assert len(warnings) == 1 and "is not there" in warnings[0]


def test_node_equals_path_overrides_the_pod_rule(tmp_path: Path) -> None:
    _kubelet(tmp_path, "llm", "glm53-decode-6f7b9c8d4-x2k9p", "sglang", ["0.log"])
    (s,) = resolve_sources([f"decode-A={tmp_path}"])
    assert (s.node, s.pod, s.fixed_node) == ("decode-A", "glm53-decode-6f7b9c8d4-x2k9p", True)


@pytest.mark.parametrize(
    ("names", "order"),
    [
        (["s.log", "s.log.1.gz", "s.log.2.gz"], ["s.log.2.gz", "s.log.1.gz", "s.log"]),
        (["s.log", "s.log-20260902.gz", "s.log-20260901.gz"], ["s.log-20260901.gz", "s.log-20260902.gz", "s.log"]),
        (["1.log", "0.log", "0.log.20260901-000000.gz"], ["0.log.20260901-000000.gz", "0.log", "1.log"]),
    ],
)
def test_rotation_order_oldest_first(names: list[str], order: list[str]) -> None:
    assert sorted(names, key=lambda n: rotation_key(Path(n))) == order


def test_kubernetes_place_of_a_pod_log() -> None:
    k = kubernetes_place(Path(f"/evidence/node7/var/log/pods/llm_glm53-prefill-0_{UID}/sglang/3.log.gz"))
    assert k is not None and (k.pod, k.namespace, k.container) == ("glm53-prefill-0", "llm", "sglang")
    assert kubernetes_place(Path("/logs/prefill-0/sglang.log")) is None


FIX = Path(__file__).resolve().parent / "fixtures" / "collect"


def test_mixed_directory_each_file_its_wrapper_through_the_cli(tmp_path: Path) -> None:
    """One directory of CRI (gzip), Docker, journald and Loki (zstd) files, all named `x.log`,
    through `forensics ingest` with `--engine-tz auto` and `--node-map`: every file detected on its
    own from its content, pods to nodes by the map."""
    import gzip
    import subprocess
    import sys

    import zstandard

    import forensics

    ev = tmp_path / "evidence"
    for sub, name, pack in [("a", "cri-containerd.log", gzip.compress), ("b", "docker-json.log", bytes),
                            ("c", "journald.json", bytes), ("d", "loki.jsonl", zstandard.ZstdCompressor().compress)]:
        (ev / sub).mkdir(parents=True)
        (ev / sub / "x.log").write_bytes(pack((FIX / name).read_bytes()))
    (tmp_path / "nodes.toml").write_text('[nodes]\n"^glm53-prefill-(\\\\d+)" = "prefill-\\\\1"\n')
    res = subprocess.run([sys.executable, "-m", "forensics", "ingest", str(tmp_path / "c.duckdb"), "--engine", str(ev),
                          "--engine-tz", "auto", "--node-map", str(tmp_path / "nodes.toml"), "--quiet"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    with forensics.open_case(tmp_path / "c.duckdb", read_only=True) as case:
        got = case.sql("SELECT regexp_extract(path, '/([a-d])/x.log$', 1), wrapper, tz FROM evidence_files "
                       "ORDER BY 1").fetchall()
        nodes = case.sql("SELECT DISTINCT node FROM engine_rejections ORDER BY 1").fetchall()
    assert got == [("a", "cri", "auto:+08:00"), ("b", "docker-json", "auto:+08:00"),
                   ("c", "journald-json", "auto:+08:00"), ("d", "loki-jsonl", "auto:+08:00")]
    # the CRI file names no pod: its directory is the node; Loki's lines name theirs: the map's node
    assert nodes == [("a",), ("prefill-1",)]


def test_bad_node_map_is_a_one_line_cli_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "nodes.toml").write_text("[nodes]\n'(' = 'x'\n")
    res = subprocess.run([sys.executable, "-m", "forensics", "ingest", str(tmp_path / "c.duckdb"), "--engine",
                          str(FIX / "cri-o.log"), "--node-map", str(tmp_path / "nodes.toml")],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "invalid regular expression" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_restarted_pod_is_its_own_start_series(tmp_path: Path) -> None:
    """#11 §2: a restart with a new configuration is a new pod; each pod is its own start series,
    both grouped into one logical node by the default rule (the issue's 7d9f8 / k2x1q example)."""
    import datetime as dt

    import forensics

    def start(at: dt.datetime, pool: int) -> bytes:
        lines = [(0, "server_args=ServerArgs(model_path='/models/glm', tp_size=4, disaggregation_mode='prefill')"),
                 (10, f"[TP0] max_total_num_tokens={pool}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                      "max_running_requests=256, context_len=1048576"),
                 (20, "The server is fired up and ready to roll!")]
        out = []
        for s, text in lines:
            t = at + dt.timedelta(seconds=s)
            local = (t + dt.timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")
            tp = " TP0" if text.startswith("[TP0] ") else ""
            out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}.5Z stderr F [{local}{tp}] {text.removeprefix('[TP0] ')}\n")
        return "".join(out).encode()

    for pod, at, pool in [("glm53-prefill-0-7d9f8", dt.datetime(2026, 8, 27, 1), 681280),
                          ("glm53-prefill-0-k2x1q", dt.datetime(2026, 8, 28, 1), 1048576)]:
        d = _kubelet(tmp_path / "ev", "llm", pod, "sglang", [])
        (d / "0.log").write_bytes(start(at, pool))
    with forensics.open_case(tmp_path / "c.duckdb") as case:
        case.ingest_engine([tmp_path / "ev"], tz="Asia/Singapore")
        got = case.sql("SELECT node, pod, start_seq, max_total_num_tokens FROM engine_starts ORDER BY start_seq").fetchall()
    assert got == [("glm53-prefill-0", "glm53-prefill-0-7d9f8", 1, 681280),
                   ("glm53-prefill-0", "glm53-prefill-0-k2x1q", 2, 1048576)]
