"""Regression: the false all-clear. Startup lines missing must never read as "not exposed" or "over".

The bundled sample with the prefill nodes' startup lines removed (a log shipper that dropped them,
a rotation that lost the first minutes): the scheduler rejection lines are still there, but no
pool or context length is. The toolkit once answered "Exposed? no" and "Is it over? yes" on such
logs; every face must now answer ``unknown`` and name the nodes it could not judge.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

import forensics
from forensics.cli import main
from forensics.outputs.report import report_data
from forensics.sample import sample_dir

#: what SGLang logs while starting (server_args, pool and context, weights, the server coming up)
STARTUP = re.compile(
    r"server_args=|max_total_num_tokens=|context_len=|KV Cache is allocated|Load weight|Init torch|"
    r"Memory pool|chat template|BootstrapServer|Started server process|application startup|"
    r"Application startup|Uvicorn running|fired up|KV pool holds"
)


def _strip_startup(path: Path) -> int:
    """Drop the startup lines of one engine log in place (plain or gzip); the number dropped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape", newline="") as f:
        lines = f.read().splitlines(keepends=True)
    kept = [ln for ln in lines if not STARTUP.search(ln)]
    with opener(path, "wt", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.writelines(kept)
    return len(lines) - len(kept)


@pytest.fixture(scope="module")
def no_startup_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("no_startup")
    data = base / "sample"
    shutil.copytree(sample_dir(), data)
    dropped = sum(_strip_startup(p) for p in sorted((data / "engine").glob("prefill-*/sglang.log*")))
    assert dropped > 100
    path = base / "case.duckdb"
    with forensics.open_case(path) as case:
        case.ingest_gateway(data / "gateway")
        case.ingest_engine(data / "engine", tz="Asia/Singapore")
    return path


def test_no_startup_lines_exposed_unknown_and_over_unknown_in_the_report(no_startup_case: Path) -> None:
    data = report_data(no_startup_case)
    answers = {a.key: a for a in data.answers}
    assert answers["exposed"].verdict == "unknown"
    assert answers["exposed"].text.startswith("unknown (3 node start(s) without pool / context in the logs: ")
    assert "prefill-0 (no startup lines)" in answers["exposed"].text
    assert answers["over"].verdict == "unknown"
    assert data.numbers["n_unknown_starts"] == 3


def test_no_startup_lines_impact_summary_names_the_unjudged_nodes(no_startup_case: Path) -> None:
    rows = forensics.impact_summary(no_startup_case).df().set_index("question")
    assert rows.loc["exposed", "answer"] == "unknown"
    assert rows.loc["over", "answer"] == "unknown"
    assert rows.loc["exposed", "unknown_starts"] == (
        "prefill-0 (no startup lines), prefill-1 (no startup lines), prefill-2 (no startup lines)")


def test_no_startup_lines_rejections_still_feed_the_audit(no_startup_case: Path) -> None:
    """The 33 scheduler rejection lines (limit 681,274) are counted in the unknown periods."""
    audit = forensics.pool_audit(no_startup_case).df()
    prefill = audit[audit.node.str.startswith("prefill")]
    assert set(prefill.verdict) == {"unknown"} and set(prefill.start_seq) == {0}
    assert int(prefill.n_scheduler_rejections.sum()) == 33
    assert set(audit[audit.node.str.startswith("decode")].verdict) == {"ok"}


def test_no_startup_lines_coverage_shows_the_nodes(no_startup_case: Path) -> None:
    cov = forensics.coverage(no_startup_case).df()
    prefill = cov[cov.node.str.startswith("prefill")]
    assert set(prefill.node_verdict) == {"unknown"}
    assert int(prefill.n_starts.sum()) == 0 and (prefill.lines_recognised > 0).all()


@pytest.mark.parametrize("command", ["affected", "tenants", "notifications"])
def test_no_startup_lines_commands_warn_and_record_it(
    no_startup_case: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.csv"
    args = [command, str(no_startup_case), "--format", "csv", "-o", str(out)]
    # nothing is exposed by the logs' own evidence: the window must be given
    args += ["--limit-tokens", "681274", "--start", "2026-09-03T00:00:00", "--end", "2026-09-10T00:00:00"]
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code in (0, None)
    err = capsys.readouterr().err
    assert "3 node start(s) in scope without pool / context in the logs" in err
    params = json.loads((tmp_path / "o.csv.params.json").read_text())
    assert "prefill-1 (no startup lines)" in params["coverage"]["unknown_node_starts"]
