"""A collected incident gives the same answer as the same incident's plain logs.

The sample's engine logs are written as a log pipeline keeps them (``forensics.sample.wrap``):
containerd on Kubernetes (kubelet layout, rotations, ``containers/`` symlinks, 16 KiB ``P``
chunks), Docker, journald, syslog and the shippers' exports. Today's false all-clear came from
such files being 99.9 % ``unrecognised``: every wrapper must give the plain answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import forensics
from forensics.case import Case
from forensics.sample import generate
from forensics.sample.wrap import WRITERS, wrap_tree

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
ENGINE_TABLES = ["engine_batches", "engine_requests", "engine_rejections", "engine_events", "engine_http",
                 "router_requests"]


def _evidence_free(rows: list[tuple[Any, ...]]) -> list[str]:
    """Rows with file paths reduced to their line numbers (paths differ between the two layouts)."""
    return sorted(re.sub(r"[\w./\-]+?:(\d+)", r"<file>:\1", str(r)) for r in rows)


@pytest.fixture(scope="module")
def cri_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's engine logs as containerd wrote them on a Kubernetes node."""
    root = tmp_path_factory.mktemp("cri") / "node"
    wrap_tree(SAMPLE / "engine", root, "cri", tz="Asia/Singapore")
    return root


@pytest.fixture(scope="module")
def cri_case(cri_tree: Path) -> Iterator[Case]:
    case = forensics.open_case(cri_tree.parent / "case.duckdb")
    case.ingest_gateway(SAMPLE / "gateway")
    case.ingest_engine([cri_tree], tz="Asia/Singapore")
    yield case
    case.close()


def test_containerd_wrapped_incident_is_read_not_unrecognised(cri_case: Case) -> None:
    """Regression: CRI-wrapped lines were 99.9 % unrecognised and the report said "not exposed"."""
    kinds = dict(cri_case.sql("SELECT kind, count(*) FROM engine_other_lines GROUP BY 1").fetchall())
    assert kinds.get("unrecognised", 0) == 0
    assert cri_case.sql("SELECT DISTINCT wrapper FROM evidence_files WHERE kind = 'engine'").fetchall() == [("cri",)]


def test_cri_wrapped_sample_gives_the_same_answer(cri_case: Case, sample_case: Case) -> None:
    # the pod is the one column that must differ: the kubelet layout names the pods, the plain
    # sample's directories do not (its pod is the node's name)
    def rows(fn: Any, case: Case) -> list[str]:
        rel = fn(case)
        return _evidence_free(rel.project(", ".join(f'"{c}"' for c in rel.columns if c != "pod")).fetchall())

    for fn in (forensics.affected_requests, forensics.pool_audit, forensics.affected_tenants):
        assert rows(fn, cri_case) == rows(fn, sample_case), fn.__name__


def test_cri_wrapped_sample_nodes_come_from_the_pods(cri_case: Case) -> None:
    got = cri_case.sql("SELECT DISTINCT node, json_extract_string(options, '$.pod') FROM evidence_files "
                       "WHERE kind = 'engine' ORDER BY 1").fetchall()
    assert got == [("decode-0", "decode-0-7c6d9f8b4-x2k9p"), ("decode-1", "decode-1-7c6d9f8b4-x2k9p"),
                   ("prefill-0", "prefill-0"), ("prefill-1", "prefill-1"), ("prefill-2", "prefill-2"),
                   ("router", "router-5d8f7b6c9-q4wzt")]


def test_cri_wrapped_every_physical_line_is_accounted(cri_case: Case) -> None:
    bad = cri_case.sql("""SELECT path FROM evidence_files WHERE kind = 'engine'
                          AND lines_read <> rows_loaded + rows_rejected + lines_joined + lines_framing""").fetchall()
    assert bad == []


def test_auto_zone_from_the_collector_matches_the_explicit_zone(cri_tree: Path, cri_case: Case) -> None:
    case = forensics.open_case(":memory:")
    s = case.ingest_engine([cri_tree], tz="auto")
    assert {f.skipped for f in s.files} == {None}
    assert dict(case.sql("SELECT node, any_value(tz) FROM evidence_files WHERE kind = 'engine' GROUP BY 1").fetchall()) \
        == {"decode-0": "auto:+08:00", "decode-1": "auto:+08:00", "prefill-0": "auto:+08:00",
            "prefill-1": "auto:+08:00", "prefill-2": "auto:+08:00", "router": "auto:none"}
    for q in ("SELECT node, ts, line_no, input_tokens FROM engine_rejections",
              "SELECT node, start_seq, ts_start, admission_limit FROM start_periods",
              "SELECT node, kind, rid, ts, line_no FROM engine_requests"):
        assert sorted(case.sql(q).fetchall()) == sorted(cri_case.sql(q).fetchall()), q
    case.close()


def test_wrong_engine_zone_is_named_per_file(cri_tree: Path) -> None:
    pods = sorted((cri_tree / "var" / "log" / "pods").iterdir())
    s = forensics.open_case(":memory:").ingest_engine([pods[0]], tz="UTC")
    warned = [w for f in s.files for w in f.warnings if "--engine-tz UTC assumes +00:00" in w]
    assert warned and all("+08:00" in w for w in warned) and len(warned) == len(s.files)


# -- every wrapper, on a small incident ------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Case]:
    root = tmp_path_factory.mktemp("small")
    generate(root / "plain", requests=300)
    case = forensics.open_case(":memory:")
    case.ingest_engine([root / "plain" / "engine"], tz="Asia/Singapore")
    return root, case


#: Wrappers that write pretty-printed JSON documents: a record spans several physical lines, so
#: line numbers are the document's, not the plain file's.
DOCUMENTS = {"es-hits", "cloudwatch", "gcp-logging"}


def _engine_rows(case: Case, *, line_numbers: bool = True) -> dict[str, list[str]]:
    out = {}
    # byte_offset points at the line in the file as stored (the wrapped line), pod is the wrapper's
    # own information: both differ by design from the plain file's
    drop = {"file_id", "ts", "ts_inferred", "byte_offset", "pod"} | (
        set() if line_numbers else {"line_no", "attached_to_line"})
    for t in ENGINE_TABLES:
        cols = [r[0] for r in case.sql(f"DESCRIBE {t}").fetchall()]
        # a line without a time of its own takes the collector's time when there is one: the time
        # of such rows differs on purpose (it is better); everything else must be equal
        keep = [c for c in cols if c not in drop]
        ts = ("CASE WHEN ts_inferred OR ts IS NULL THEN NULL ELSE ts END" if "ts_inferred" in cols else "ts")
        rows = case.sql(f"SELECT {', '.join(keep)}, {ts} FROM {t}").fetchall()
        out[t] = sorted(map(str, rows))
    out["engine_starts"] = sorted(map(str, case.sql(
        "SELECT node, start_seq, role, context_len, max_total_num_tokens, admission_limit"
        + (", line_no" if line_numbers else "") + " FROM start_periods WHERE start_logged").fetchall()))
    return out


@pytest.mark.parametrize("wrapper", [w for w in WRITERS if w != "cri"])
def test_every_wrapper_gives_the_plain_rows(small: tuple[Path, Case], tmp_path: Path, wrapper: str) -> None:
    root, plain_case = small
    plain = _engine_rows(plain_case, line_numbers=wrapper not in DOCUMENTS)
    wrap_tree(root / "plain" / "engine", tmp_path / wrapper, wrapper, tz="Asia/Singapore")
    node_map = tmp_path / "nodes.toml"
    # journald / syslog name the host: map the sample's hosts (gpu-<node>) back to its node names
    node_map.write_text('[nodes]\n"^gpu-([^/]+)" = "\\\\1"\n')
    case = forensics.open_case(":memory:")
    s = case.ingest_engine([tmp_path / wrapper], tz="Asia/Singapore", node_map=node_map)
    assert all(f.reconciles for f in s.files), [(f.path, f.warnings) for f in s.files if not f.reconciles]
    got = _engine_rows(case, line_numbers=wrapper not in DOCUMENTS)
    for t, rows in plain.items():
        assert got[t] == rows, f"{wrapper}: {t}"
