"""Smoke test of the benchmark suite: the whole harness at a tiny scale, one run, no timing asserts."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from benchmarks import harness, report
from benchmarks.layout import truth_leaks
from benchmarks.pandas_reference import analyze

pytestmark = pytest.mark.slow

SCALE = "2000"


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, dict]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "RESULTS.md"
    raw = tmp / "results.json"
    # every step group but 'investigate' (the pipeline repeats the e2e ingest; its own tests
    # cover it), to stay well under a minute on a busy 2-core machine
    groups = [g for g in harness.STEP_GROUPS if g != "investigate"]
    rc = harness.main([
        "--scale", SCALE, "--runs", "1", "--out", str(out), "--json", str(raw),
        "--data-dir", str(tmp / "data"), "--quiet", "--note", "smoke test",
        "--steps", ",".join(groups),
        # one function measured alone is enough for the smoke test ('all' runs every one)
        "--each", "affected_requests",
    ])
    return rc, out, json.loads(raw.read_text(encoding="utf-8"))


def _has_affected() -> bool:
    try:
        mod = importlib.import_module("forensics.analysis")
    except ImportError:
        return False
    return callable(getattr(mod, "affected_requests", None))


def test_report_has_every_section(suite_run: tuple[int, Path, dict]) -> None:
    rc, out, raw = suite_run
    text = out.read_text(encoding="utf-8")
    for section in report.SECTIONS:
        assert section in text, section
    core = ("toolkit_gateway:", "bare_gateway:", "toolkit_engine", "bare_engine", "scan_engine",
            "toolkit_e2e", "pandas_e2e")
    failed = [r for r in raw["results"] if not r.get("ok")]
    assert not [r for r in failed if r["key"].startswith(core)], failed
    # a failing analysis query is the query's problem, but the report must say so
    for r in failed:
        assert f"`{r['key']}`" in text
    assert rc == (1 if failed else 0)
    keys = {r["key"] for r in raw["results"]}
    assert {"toolkit_engine", "bare_engine", "toolkit_e2e", "pandas_e2e"} <= keys
    assert any(k.startswith("toolkit_gateway:") for k in keys)
    assert any(k.startswith("bare_gateway:") for k in keys)
    if _has_affected():
        assert "analysis:affected_requests" in keys and "analysis:all" in keys
        assert not {k for k in keys if k.startswith("analysis:")} - {"analysis:affected_requests", "analysis:all"}
        per_function = next(r for r in raw["results"] if r["key"] == "analysis:all")["extra"]["per_function_s"]
        assert set(per_function) == set(raw["analysis_functions"])  # --each: all still runs every one
    for r in raw["results"]:
        if r.get("ok"):
            assert r["wall_s"] >= 0 and r["peak_rss"] > 0


def test_pandas_reference_matches_truth(suite_run: tuple[int, Path, dict]) -> None:
    _, _, raw = suite_run
    corr = raw["correctness"][SCALE]
    pandas = corr["pandas"]
    assert pandas["n_missed"] == 0 and pandas["n_extra"] == 0, pandas
    assert corr["pandas_tenants"] == corr["truth_tenants"]


def test_pandas_reference_agrees_with_toolkit(suite_run: tuple[int, Path, dict]) -> None:
    assert _has_affected(), "forensics.analysis.affected_requests is missing"
    _, _, raw = suite_run
    corr = raw["correctness"][SCALE]
    assert corr["toolkit"] is not None
    assert corr["toolkit"]["n_missed"] == 0 and corr["toolkit"]["n_extra"] == 0, corr["toolkit"]
    assert corr["agree"] is True


def test_pandas_reference_on_bundled_sample() -> None:
    sample = Path(__file__).resolve().parent.parent / "sample_data"
    assert (sample / "truth.json").is_file(), "sample_data/ is missing: forensics sample --out sample_data"
    result = analyze(sample)
    leaks = truth_leaks(sample)
    got = set(result.affected["request_id"])
    assert report.compare_to_truth(result.affected.to_dict(orient="records"), leaks)["n_missed"] == 0
    assert len(got) == len(leaks)


def test_parse_scale() -> None:
    assert harness.parse_scale("100k") == ("100k", 100_000)
    assert harness.parse_scale("10M") == ("10m", 10_000_000)
    with pytest.raises(Exception, match="bad scale"):
        harness.parse_scale("lots")
