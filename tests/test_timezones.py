"""The one zone validator, DST-aware local-to-UTC conversion, and the engine-clock check."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

import forensics
from forensics.errors import ParameterError
from forensics.sources import timezones as tzs
from forensics.sources.timezones import AMBIGUOUS, BY_COLLECTOR, BY_ORDER, GAP, NO_TIME, OK

H = 3600 * 1_000_000


def us(*a: int) -> int:
    return int(dt.datetime(*a, tzinfo=dt.UTC).timestamp()) * 1_000_000


@pytest.mark.parametrize(
    ("given", "canon"),
    [
        ("UTC", "UTC"), ("utc", "UTC"), ("Z", "UTC"), ("Etc/UTC", "UTC"),
        ("Asia/Singapore", "Asia/Singapore"), ("asia/singapore", "Asia/Singapore"),
        ("Europe/Berlin", "Europe/Berlin"), ("America/New_York", "America/New_York"),
        ("+08:00", "UTC+08:00"), ("-0530", "UTC-05:30"), ("UTC+8", "UTC+08:00"), ("GMT-3", "UTC-03:00"),
        ("CET", "CET"),  # a zone name in the tz database, not just an abbreviation
    ],
)
def test_check_tz_accepts_and_canonicalises(given: str, canon: str) -> None:
    assert tzs.check_tz(given) == canon


@pytest.mark.parametrize("bad", ["Mars/Olympus", "SGT", "PST", "", "  ", "Asia/Singapore'; DROP", "+25:00"])
def test_check_tz_refuses_with_one_line(bad: str) -> None:
    with pytest.raises(ParameterError, match="time zone"):
        tzs.check_tz(bad)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "SGT"])
def test_both_loaders_refuse_the_same_zones(tz: str, tmp_path: Path) -> None:
    """Regression: the gateway and the engine loader used to disagree on what a zone is."""
    case = forensics.open_case(":memory:")
    (tmp_path / "e.log").write_text("[2026-09-02 04:51:17] x\n")
    (tmp_path / "g.ndjson").write_text('{"start_time": "2026-09-02T04:51:17Z", "response_code": "200"}\n')
    with pytest.raises(ParameterError, match="unknown time zone"):
        case.ingest_engine([tmp_path / "e.log"], tz=tz)
    with pytest.raises(ParameterError, match="unknown time zone"):
        case.ingest_gateway(tmp_path / "g.ndjson", format="envoy", tz=tz)


# local wall-clock values (as if UTC), in file order -> expected UTC, flag
BERLIN_AUTUMN = [  # 2026-10-25: 03:00 CEST -> 02:00 CET at 01:00 UTC; 02:00-03:00 local happens twice
    ([us(2026, 10, 25, 1, 50), us(2026, 10, 25, 2, 20), us(2026, 10, 25, 2, 50), us(2026, 10, 25, 2, 5),
      us(2026, 10, 25, 2, 40), us(2026, 10, 25, 3, 10)],
     [us(2026, 10, 24, 23, 50), us(2026, 10, 25, 0, 20), us(2026, 10, 25, 0, 50), us(2026, 10, 25, 1, 5),
      us(2026, 10, 25, 1, 40), us(2026, 10, 25, 2, 10)],
     [OK, BY_ORDER, BY_ORDER, BY_ORDER, BY_ORDER, OK]),
    # one pass only, nothing shows which: unknown, never guessed
    ([us(2026, 10, 25, 2, 20), us(2026, 10, 25, 2, 30)], [NO_TIME, NO_TIME], [AMBIGUOUS, AMBIGUOUS]),
]


@pytest.mark.parametrize(("local", "utc", "flags"), BERLIN_AUTUMN)
def test_repeated_autumn_hour_by_line_order_or_unknown(local: list[int], utc: list[int], flags: list[int]) -> None:
    r = tzs.to_utc(np.array(local), "Europe/Berlin")
    assert (r.utc_us.tolist(), r.flags.tolist()) == (utc, flags)


def test_repeated_autumn_hour_by_collector_time() -> None:
    # both lines say 02:30 local; the collector says which pass each was
    local = np.array([us(2026, 10, 25, 2, 30), us(2026, 10, 25, 2, 30)])
    col = np.array([us(2026, 10, 25, 1, 30) + 5000, us(2026, 10, 25, 0, 30) + 5000])
    r = tzs.to_utc(local, "Europe/Berlin", collector_us=col)
    assert r.utc_us.tolist() == [us(2026, 10, 25, 1, 30), us(2026, 10, 25, 0, 30)]
    assert r.flags.tolist() == [BY_COLLECTOR, BY_COLLECTOR]


@pytest.mark.parametrize(
    ("tz", "local", "utc", "flag"),
    [
        ("Europe/Berlin", us(2026, 3, 29, 2, 30), NO_TIME, GAP),  # spring gap: 02:00-03:00 never existed
        ("Europe/Berlin", us(2026, 3, 29, 1, 59), us(2026, 3, 29, 0, 59), OK),
        ("Europe/Berlin", us(2026, 3, 29, 3, 0), us(2026, 3, 29, 1, 0), OK),
        ("America/New_York", us(2026, 3, 8, 2, 30), NO_TIME, GAP),
        ("America/New_York", us(2026, 9, 2, 0, 51), us(2026, 9, 2, 4, 51), OK),  # EDT
        ("Asia/Singapore", us(2026, 9, 2, 12, 51), us(2026, 9, 2, 4, 51), OK),
        ("Australia/Lord_Howe", us(2026, 4, 5, 1, 45), NO_TIME, AMBIGUOUS),  # a 30-minute DST step
        ("UTC+05:30", us(2026, 9, 2, 10, 21), us(2026, 9, 2, 4, 51), OK),
    ],
)
def test_to_utc_in_any_zone(tz: str, local: int, utc: int, flag: int) -> None:
    r = tzs.to_utc(np.array([local]), tz)
    assert (int(r.utc_us[0]), int(r.flags[0])) == (utc, flag)


def test_missing_times_stay_missing() -> None:
    r = tzs.to_utc(np.array([NO_TIME, us(2026, 7, 1)]), "Europe/Berlin")
    assert r.utc_us.tolist() == [NO_TIME, us(2026, 6, 30, 22)]


@pytest.mark.parametrize(
    ("tz", "offset_h", "warns"),
    [("UTC", 8, True), ("Asia/Singapore", 8, False), ("Europe/Berlin", 8, True), ("UTC", 0, False),
     ("America/New_York", -4, False)],
)
def test_offset_warning_names_file_found_and_assumed(tz: str, offset_h: int, warns: bool) -> None:
    col = np.array([us(2026, 9, 2, 4, 51) + k * 1_000_000 for k in range(50)])
    loc = col + offset_h * H - 300_000  # the engine prints whole seconds; the collector reads a bit later
    w = tzs.offset_warning("p0.log", tz, loc, col)
    assert (w is not None) is warns
    if w:
        assert "p0.log" in w and tzs.format_offset(offset_h * 3600) in w and f"--engine-tz {tz}" in w


def test_auto_offsets_follow_a_dst_change_inside_the_file() -> None:
    # Berlin summer time (+02:00) until 01:00 UTC, then +01:00; a lagging stdout line does not move it
    col = np.array([us(2026, 10, 25, 0, 0) + k * 10 * 1_000_000 for k in range(720)])  # 00:00-02:00 UTC
    off = np.where(col < us(2026, 10, 25, 1, 0), 2 * H, H)
    loc = col + off
    loc[100] -= 20 * 60 * 1_000_000  # one line's collector time 20 minutes late
    offs, est = tzs.auto_offsets(loc, col, chunk=100)
    assert est.offset_s in (3600, 7200) and {o for o, _ in est.seen} >= {3600, 7200}
    assert offs.tolist() == [int(o // 1_000_000) for o in off]


def test_auto_offsets_follow_a_dst_change_inside_one_run() -> None:
    # a small file is one run of lines: the change inside it is followed, the lagging line is not
    col = np.array([us(2026, 10, 25, 0, 0) + k * 60 * 1_000_000 for k in range(120)])
    off = np.where(col < us(2026, 10, 25, 1, 0), 2 * H, H)
    loc = col + off
    loc[10] -= 20 * 60 * 1_000_000
    offs, _ = tzs.auto_offsets(loc, col)
    assert offs.tolist() == [int(o // 1_000_000) for o in off]


def test_has_transition() -> None:
    assert tzs.has_transition("Europe/Berlin", us(2026, 10, 20), us(2026, 10, 30))
    assert not tzs.has_transition("Europe/Berlin", us(2026, 7, 1), us(2026, 7, 30))
    assert not tzs.has_transition("UTC+08:00", us(2026, 1, 1), us(2026, 12, 31))


# -- through the loader: a DST change inside the window, in Europe/Berlin (#11 §4) ----------------

def _decode(local: str) -> str:
    return (f"[{local} TP0] Decode batch, #running-req: 1, #token: 100, token usage: 0.00, "
            "gen throughput (token/s): 10.00, #queue-req: 0, ")


def _cri(utc: str, text: str) -> str:
    return f"{utc}Z stderr F {text}"


def _ingest(tmp_path: Path, lines: list[str], tz: str) -> tuple[list[dt.datetime | None], list[str], str | None]:
    f = tmp_path / "p0.log"
    f.write_text("".join(line + "\n" for line in lines))
    with forensics.open_case(tmp_path / "c.duckdb") as case:
        s = case.ingest_engine([f], tz=tz)
        ts = [r[0] for r in case.sql("SELECT ts FROM engine_batches ORDER BY line_no").fetchall()]
        ((recorded,),) = case.sql("SELECT tz FROM evidence_files").fetchall()
    return ts, [w for fs in s.files for w in fs.warnings], recorded


def utc(*a: int) -> dt.datetime:
    return dt.datetime(*a)


DST_INGEST = [
    # label, file lines, --engine-tz, engine_batches.ts (UTC, naive), words of the file's warning
    ("autumn hour placed by the collector",  # both lines say 02:30; CRI's UTC says which pass
     [_cri("2026-10-25T00:30:00.2", _decode("2026-10-25 02:30:00")),
      _cri("2026-10-25T01:30:00.2", _decode("2026-10-25 02:30:00"))],
     "Europe/Berlin", [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)], "placed by the collector's time"),
    ("autumn hour placed by the line order",  # plain: the clock going back shows the second pass
     [_decode("2026-10-25 01:50:00"), _decode("2026-10-25 02:40:00"), _decode("2026-10-25 02:10:00"),
      _decode("2026-10-25 03:10:00")],
     "Europe/Berlin", [utc(2026, 10, 24, 23, 50), utc(2026, 10, 25, 0, 40), utc(2026, 10, 25, 1, 10),
                       utc(2026, 10, 25, 2, 10)], "or the line order"),
    ("autumn hour nothing resolves: unknown, never guessed",
     [_decode("2026-10-25 02:20:00"), _decode("2026-10-25 02:30:00")],
     "Europe/Berlin", [None, None], "neither a collector time nor the line order"),
    ("spring gap: a time that never existed is unknown",
     [_decode("2026-03-29 01:59:00"), _decode("2026-03-29 02:30:00"), _decode("2026-03-29 03:00:00")],
     "Europe/Berlin", [utc(2026, 3, 29, 0, 59), None, utc(2026, 3, 29, 1, 0)], "spring DST gap"),
]


@pytest.mark.parametrize(("label", "lines", "tz", "want", "words"), DST_INGEST, ids=[d[0] for d in DST_INGEST])
def test_dst_inside_the_window_through_the_loader(tmp_path: Path, label: str, lines: list[str], tz: str,
                                                  want: list[dt.datetime | None], words: str) -> None:
    ts, warnings, _ = _ingest(tmp_path, lines, tz)
    assert ts == want
    assert any(words in w for w in warnings), warnings


def test_engine_tz_auto_records_a_dst_change_inside_the_file(tmp_path: Path) -> None:
    # CRI times in UTC beside Berlin local times: +02:00 until 01:00 UTC, then +01:00 (the offsets
    # are listed most frequent first: a line a minute before the change, every 2 minutes after)
    lines = []
    minutes = [*range(0, 60), *range(60, 120, 2)]
    for k in minutes:  # 00:00-02:00 UTC
        at = dt.datetime(2026, 10, 25, 0, 0) + dt.timedelta(minutes=k)
        local = at + dt.timedelta(hours=2 if at.hour < 1 else 1)
        lines.append(_cri(at.strftime("%Y-%m-%dT%H:%M:%S.1"), _decode(local.strftime("%Y-%m-%d %H:%M:%S"))))
    ts, _, recorded = _ingest(tmp_path, lines, "auto")
    assert recorded == "auto:+02:00/+01:00"
    assert ts == [dt.datetime(2026, 10, 25, 0, 0) + dt.timedelta(minutes=k) for k in minutes]
