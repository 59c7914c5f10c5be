"""A file's time-zone findings: the engine clock checked against the collector's UTC times.

Where a collection wrapper gave each line a UTC time (CRI, journald, shipper exports), the
scanner keeps pairs (engine local time, collector UTC time). At the end of the file:

* ``--engine-tz ZONE``: ``timezones.offset_warning`` warns when the engine clock disagrees with
  the zone by more than a minute (file, offset found, offset assumed);
* ``--engine-tz auto``: the offsets each block applied are recorded (``auto:+08:00``,
  ``auto:+02:00/+01:00`` across a DST change, ``auto:none`` for a file without engine local
  times such as a router log, ``auto:unknown`` when nothing could be compared);
* lines in a DST gap or in an unresolved repeated hour (their time unknown) are counted.

Example:
    >>> zone_findings("x.log", "UTC", [], False)
    ([], 'UTC')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from forensics.sources.timezones import (
    AMBIGUOUS,
    BY_COLLECTOR,
    BY_ORDER,
    GAP,
    format_offset,
    offset_warning,
)

if TYPE_CHECKING:
    from forensics.sources.engine.scan import Scanner


def zone_findings(name: str, tz: str, scanners: Sequence[Scanner], collector_inexact: bool) -> tuple[list[str], str]:
    """Warnings about the file's engine clock, and the zone to record in ``evidence_files.tz``."""
    out: list[str] = []
    pairs = [p for sc in scanners for p in sc.tz_pairs] if not collector_inexact else []
    if pairs:
        loc = np.concatenate([p[0] for p in pairs])
        col = np.concatenate([p[1] for p in pairs])
    else:
        loc = col = np.zeros(0, dtype=np.int64)
    recorded = tz
    flags: dict[int, int] = {}
    for sc in scanners:
        for f, k in sc.to_utc.flags.items():
            flags[f] = flags.get(f, 0) + k
    if tz == "auto":
        local_lines = sum(sc.local_lines for sc in scanners)
        found = [e for sc in scanners for e in sc.to_utc.auto if e.offset_s is not None]
        if not local_lines:
            recorded = "auto:none"  # no zone-less local time in this file (router logs are UTC)
        elif not found:
            out.append(f"{name}: --engine-tz auto found no collector time beside the engine's times; "
                       "its local times were read as UTC: their zone is unknown (pass --engine-tz ZONE)")
            recorded = "auto:unknown"
        else:
            seen: dict[int, int] = {}
            for e in found:
                for o, c in e.seen:
                    seen[o] = seen.get(o, 0) + c
            main = sorted(seen.items(), key=lambda kv: -kv[1])
            labels = [format_offset(o) for o, c in main if c >= max(1, 0.01 * sum(seen.values()))]
            recorded = "auto:" + "/".join(labels)
    elif loc.size:
        w = offset_warning(name, tz, loc, col)
        if w:
            out.append(w)
    gap, amb = flags.get(GAP, 0), flags.get(AMBIGUOUS, 0)
    if gap:
        out.append(f"{gap} line(s) carry local times that do not exist in {tz} (spring DST gap): "
                   "their time is unknown (NULL)")
    if amb:
        out.append(f"{amb} line(s) fall in the repeated autumn hour of {tz} and neither a collector "
                   "time nor the line order places them: their time is unknown (NULL)")
    resolved = flags.get(BY_COLLECTOR, 0) + flags.get(BY_ORDER, 0)
    if resolved:
        out.append(f"{resolved} line(s) in the repeated autumn hour of {tz} were placed by the "
                   "collector's time or the line order")
    return out, recorded
