"""Customer notification lists: golden CSV on the sample, recipients and sources equal the truth,
the customer directory join keeps every tenant, packets hold only their tenant's ids, and a
gateway-only case gets a list from the command line."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from casebuilder import Fleet, Gateway, Request, build, recipients
from conftest import LIMIT_BAD, GoldenCheck, Synth, fleet, t

import forensics
from forensics.case import Case
from forensics.errors import InputError
from forensics.outputs.escape import csv_uncell
from forensics.outputs.export import write_output
from forensics.outputs.notifications import (
    packet_dirname,
    read_directory,
    with_directory,
    write_packets,
)
from forensics.sqlfiles import load_query

GOLDEN = Path(__file__).parent / "golden" / "notifications.csv"

COLUMNS = ["tenant_id", "notice_type", "n_responses_received", "n_confirmed", "n_suspected",
           "n_requests_possibly_exposed", "first_ts", "last_ts", "received_request_ids", "exposed_request_ids"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


# -- the suspected path, on synthetic cases ---------------------------------------------------------


def _suspected_only() -> Any:
    return build(Fleet(), Gateway("g", 10, 700_000, layer="proxy", tenant="S"))


def test_suspected_only_tenant_is_notified_as_recipient() -> None:
    df = forensics.notifications(_suspected_only()).df()
    assert df[["tenant_id", "notice_type", "n_responses_received", "n_confirmed", "n_suspected"]].to_dict(
        "records") == [{"tenant_id": "S", "notice_type": "received-other-data", "n_responses_received": 1,
                        "n_confirmed": 0, "n_suspected": 1}]


def test_recipient_counts_add_confirmed_and_suspected() -> None:
    case = build(Fleet(), Request("x", 10, 700_000, rejected=True, tenant="A"),
                 Gateway("g", 11, 700_000, layer="proxy", tenant="A"))
    assert recipients(case) == {"A": (1, 1)}
    row = forensics.notifications(case).df().iloc[0]
    assert (row.n_responses_received, row.n_confirmed, row.n_suspected) == (2, 1, 1)


def test_a_same_tenant_source_is_not_a_source_notification() -> None:
    case = build(Fleet(), Request("s", 10, 3_000, sec=-60, tenant="A"), Request("t", 10, 3_000, sec=-50, tenant="B"),
                 Request("x", 10, 700_000, rejected=True, tenant="A"))
    df = forensics.notifications(case).df().set_index("tenant_id")
    assert df.notice_type.to_dict() == {"A": "received-other-data", "B": "data-possibly-exposed"}
    assert df.loc["B", "exposed_request_ids"] == "ray-t"


@pytest.mark.golden
def test_notifications_csv_matches_golden(sample_case: Case, tmp_path: Path, golden: GoldenCheck) -> None:
    out = tmp_path / "n.csv"
    write_output(forensics.notifications(sample_case), "csv", out)
    golden("notifications.csv", out.read_text(encoding="utf-8"))


def test_notifications_is_a_relation_with_its_columns(sample_case: Case) -> None:
    rel = forensics.notifications(sample_case)
    assert rel.columns == COLUMNS
    assert load_query("notifications").inputs == ("affected_tenants", "leak_sources")


def test_recipients_are_exactly_the_truths_affected_tenants(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.notifications(sample_case).df()
    recipients = df[df["notice_type"].isin(["received-other-data", "both"])]
    got = {r.tenant_id: (r.n_responses_received, r.n_confirmed, r.n_suspected) for r in recipients.itertuples()}
    expected = {t: (c["confirmed"] + c["suspected"], c["confirmed"], c["suspected"])
                for t, c in sample_truth["affected_tenants"].items()}
    assert got == expected
    # a suspected-only recipient is notified as one
    assert any(c["confirmed"] == 0 for c in sample_truth["affected_tenants"].values())


def test_sources_are_exactly_the_truths_cross_tenant_sources(sample_case: Case, sample_truth: dict[str, Any]) -> None:
    expected: dict[str, set[str]] = {}
    for leak in sample_truth["leaks"]:
        for s in leak["possible_sources"]:
            if not s["same_tenant"]:
                expected.setdefault(s["tenant_id"], set()).add(s["request_id"])
    df = forensics.notifications(sample_case).df()
    sources = df[df["notice_type"].isin(["data-possibly-exposed", "both"])]
    got = {t: set(ids.split()) for t, ids in zip(sources["tenant_id"], sources["exposed_request_ids"], strict=True)}
    assert got == expected
    assert (sources["n_requests_possibly_exposed"] == sources["exposed_request_ids"].str.split().str.len()).all()


def test_recipients_come_first_then_sources(sample_case: Case) -> None:
    kinds = forensics.notifications(sample_case).df()["notice_type"].tolist()
    first_source_only = kinds.index("data-possibly-exposed")
    assert all(k in ("received-other-data", "both") for k in kinds[:first_source_only])
    assert all(k == "data-possibly-exposed" for k in kinds[first_source_only:])


def test_notifications_cli(sample_case_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "n.csv"
    res = run("notifications", str(sample_case_path), "--format", "csv", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert GOLDEN.is_file(), "tests/golden/notifications.csv is missing: run make golden"
    assert out.read_text(encoding="utf-8") == GOLDEN.read_text(encoding="utf-8")
    assert '"coverage"' in (tmp_path / "n.csv.params.json").read_text()


# -- the customer directory --------------------------------------------------------------------


def _directory(path: Path, rows: list[list[str]], header: list[str]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "header",
    [
        ["tenant_id", "company", "contact_email", "account_owner"],
        ["Tenant ID", "Company Name", "Contact E-mail", "Account Owner"],
        ["customer_id", "name", "email", "owner"],
    ],
    ids=["canonical", "spaced", "aliases"],
)
def test_directory_join_keeps_every_tenant_and_flags_unknown_ones(sample_case: Case, tmp_path: Path,
                                                                  header: list[str]) -> None:
    listing = forensics.notifications(sample_case).df()
    known = listing["tenant_id"].tolist()[:3]
    rows = [[f" {t} ", f"Company {i}", f"sec{i}@example.com", "Alex"] for i, t in enumerate(known)]
    rows.append(["not-affected", "Bystander Ltd", "x@example.com", "Sam"])
    rel = with_directory(forensics.notifications(sample_case), _directory(tmp_path / "d.csv", rows, header))
    df = rel.df()
    assert df["tenant_id"].tolist() == listing["tenant_id"].tolist()  # nobody dropped, order kept
    assert df["in_directory"].tolist() == [t in known for t in listing["tenant_id"]]
    assert df.loc[df["in_directory"], "company"].tolist() == ["Company 0", "Company 1", "Company 2"]
    assert df.loc[~df["in_directory"], "contact_email"].isna().all()
    assert "not-affected" not in set(df["tenant_id"])


def test_directory_duplicate_rows_keep_every_contact(tmp_path: Path) -> None:
    d = _directory(tmp_path / "d.csv", [["t1", "A", "a@x", "o1"], ["t1", "A", "b@x", "o2"]],
                   ["tenant_id", "company", "contact_email", "account_owner"])
    rows = read_directory(d).fetchall()
    assert rows == [("t1", "A", "a@x; b@x", "o1; o2", 2)]


def test_directory_without_tenant_column_is_refused(tmp_path: Path) -> None:
    d = _directory(tmp_path / "d.csv", [["A", "a@x"]], ["company", "email"])
    with pytest.raises(InputError, match="no tenant id column"):
        read_directory(d)


# -- packets -----------------------------------------------------------------------------------


def test_packets_hold_only_their_own_tenants_ids(sample_case: Case, tmp_path: Path) -> None:
    packets = write_packets(sample_case, tmp_path / "p")
    listing = forensics.notifications(sample_case).df()
    assert len(packets) == len(listing)
    tenant_of = dict(sample_case.sql(
        "SELECT request_id, tenant_id FROM gateway_requests_unique WHERE request_id IS NOT NULL").fetchall())
    all_tenants = set(listing["tenant_id"])
    for p in packets:
        folder = p.path
        assert folder.parent == tmp_path / "p" and folder.name == packet_dirname(p.tenant_id)
        with open(folder / "requests.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, folder
        for r in rows:
            assert tenant_of[csv_uncell(r["request_id"])] == p.tenant_id
        summary = (folder / "summary.md").read_text()
        text = summary + (folder / "requests.csv").read_text()
        for other in all_tenants - {p.tenant_id}:
            assert other not in text, (p.tenant_id, other)
        own = listing[listing["tenant_id"] == p.tenant_id].iloc[0]
        assert {r["request_id"] for r in rows if r["notice_type"] == "received-other-data"} == set(
            own["received_request_ids"].split())
        assert {r["request_id"] for r in rows if r["notice_type"] == "data-possibly-exposed"} == set(
            own["exposed_request_ids"].split())
        assert "# Incident notification" in summary


def test_packet_dirname_cannot_escape_or_collide() -> None:
    names = {packet_dirname(t) for t in ("a/b", "a_b", "../a_b", "..", "", None, "tenant-unknown")}
    assert len(names) == 7
    assert all("/" not in n and n not in (".", "..") for n in names)


# -- gateway-only case -------------------------------------------------------------------------


def _gateway_only(tmp_path: Path) -> Path:
    s = Synth()
    s.gw("g1", t(10), tenant="acme", prompt_tokens=700_000, model="glm-5.3")
    s.gw("g2", t(11), tenant="beta", prompt_tokens=100, model="glm-5.3")
    path = tmp_path / "gw.duckdb"
    s.case.con.execute(f"ATTACH '{path}' AS out")
    s.case.con.execute("COPY FROM DATABASE memory TO out")
    s.case.con.execute("DETACH out")
    return path


def test_gateway_only_case_gets_a_list_and_packets_from_the_cli(tmp_path: Path) -> None:
    case = _gateway_only(tmp_path)
    res = run("notifications", str(case), "-o", str(tmp_path / "n.csv"))
    assert res.returncode == 2 and "--limit-tokens" in res.stderr
    res = run("notifications", str(case), "-o", str(tmp_path / "n.csv"), "--packets", str(tmp_path / "p"),
              "--limit-tokens", str(LIMIT_BAD), "--start", "2026-09-01T00:00:00Z", "--end", "2026-09-02T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert "no engine startup lines" in res.stderr  # unknown is said, loudly
    with open(tmp_path / "n.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["tenant_id"], r["notice_type"], r["n_suspected"]) for r in rows] == [
        ("acme", "received-other-data", "1")]
    assert (tmp_path / "p" / "acme" / "requests.csv").read_text().splitlines()[1].startswith("g1,,received-other-data,2026-09-01T10:00:00Z,glm-5.3,suspected")


def test_suspected_only_tenant_is_notified(synth: Synth) -> None:
    """Regression (#12): a tenant with suspected rows only must still get a notice."""
    fleet(synth)
    synth.pd_request("x1", t(20), tokens=700_000, engine=False, tenant="sus", gateway_tokens=700_000)
    df = forensics.notifications(synth.case).df()
    row = df[df["tenant_id"] == "sus"].iloc[0]
    assert (row["notice_type"], row["n_suspected"], row["n_confirmed"]) == ("received-other-data", 1, 0)
