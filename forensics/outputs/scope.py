"""What a command's filters name must be in the case, and what the logs could not show.

* :func:`check_scope`: a ``--node``, ``--request-id`` or ``--tenant`` that no evidence row carries
  is a mistake (a typo, the wrong case): it is refused with a one-line error that says so, instead
  of an empty result that reads as "nothing happened there".
* :func:`coverage_note`: the node starts in scope whose pool or context length the logs do not
  show (verdict ``unknown``), the absence of engine startup lines altogether, and evidence that
  was not read whole (:func:`partial_evidence`: an unfinished ingest, a truncated file). Unknown is never
  "no": commands print it on stderr and record it in their output's parameters.

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
    >>> coverage_note(case)["unknown_node_starts"]
    []
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pandas as pd

from forensics import analysis
from forensics.case import Case, as_case
from forensics.errors import ParameterError


def _exists(c: Case, sql: str, value: str) -> bool:
    rows = c.sql(sql, {"v": value}).fetchall()
    return bool(rows and rows[0][0])


def _known(c: Case, sql: str, limit: int = 12) -> str:
    values = [str(r[0]) for r in c.sql(sql).fetchall()]
    shown = ", ".join(values[:limit]) + (f", ... ({len(values)} in all)" if len(values) > limit else "")
    return shown or "none"


def check_scope(
    case: Case | str | os.PathLike[str],
    *,
    node: str | None = None,
    request_id: str | None = None,
    tenants: Sequence[str] = (),
) -> None:
    """Refuse a node, request id or tenant that appears nowhere in the case's evidence.

    Example:
        >>> import forensics
        >>> check_scope(forensics.open_case(":memory:"), node="prefill-9")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: --node prefill-9 is not in the case (nodes in the case: none)
    """
    c = as_case(case)
    if node is not None and not _exists(
        c,
        "SELECT EXISTS (SELECT 1 FROM evidence_files WHERE node = $v) "
        "OR EXISTS (SELECT 1 FROM engine_starts WHERE node = $v) "
        "OR EXISTS (SELECT 1 FROM engine_requests WHERE node = $v)",
        node,
    ):
        nodes = _known(c, "SELECT node FROM (SELECT node FROM evidence_files UNION SELECT node FROM engine_starts) "
                          "WHERE node IS NOT NULL ORDER BY node")
        raise ParameterError(f"--node {node} is not in the case (nodes in the case: {nodes})")
    if request_id is not None and not _exists(
        c,
        "SELECT EXISTS (SELECT 1 FROM gateway_requests WHERE request_id = $v OR header_request_id = $v) "
        "OR EXISTS (SELECT 1 FROM engine_requests WHERE rid = $v OR header_request_id = $v) "
        "OR EXISTS (SELECT 1 FROM router_requests WHERE request_id = $v)",
        request_id,
    ):
        raise ParameterError(
            f"--request-id {request_id} is not in the case (no gateway, router or engine record carries it)",
            hint="ids are matched exactly: gateway request id, x-request-id or engine rid",
        )
    for tenant in tenants:
        if not _exists(c, "SELECT EXISTS (SELECT 1 FROM gateway_requests WHERE tenant_id = $v)", tenant):
            raise ParameterError(f"--tenant {tenant} is not in the case (no gateway record carries it)",
                                 hint="tenant ids are matched exactly, as the gateway logged them")


def _missing(value: Any) -> bool:
    return value is None or bool(pd.isna(value))


def unknown_starts(audit: pd.DataFrame) -> list[str]:
    """The node starts of a pool audit that cannot be judged, as ``"node #seq (no pool)"``.

    A start is unknown when its verdict is neither ``exposed`` nor ``ok``, and also when the verdict
    says ``ok`` for a start that may prefill (role prefill, unified or unknown) but whose pool or
    context length the logs do not show: "ok" cannot rest on a number that was never read.

    Example:
        >>> unknown_starts(pd.DataFrame({"node": ["p9"], "start_seq": [1], "role": ["prefill"],
        ...     "verdict": ["ok"], "max_total_num_tokens": [None], "context_len": [1048576]}))
        ['p9 #1 (no pool)']
    """
    out = []
    for r in audit.itertuples(index=False):
        missing = [n for n, v in (("pool", r.max_total_num_tokens), ("context length", r.context_len))
                   if _missing(v)]
        may_prefill = _missing(r.role) or r.role in ("prefill", "unified")
        if r.verdict in ("exposed", "ok") and not (r.verdict == "ok" and missing and may_prefill):
            continue
        out.append(f"{r.node} #{r.start_seq}" + (f" (no {' / '.join(missing)})" if missing else ""))
    return out


def partial_evidence(gaps: pd.DataFrame) -> str | None:
    """The sentence saying why the evidence is partial (None when every file was read whole).

    ``gaps`` is :func:`forensics.evidence_gaps`' frame; its ``partial`` rows are an unfinished
    ingest, files not read whole and paths not read.

    Example:
        >>> partial_evidence(pd.DataFrame({"problem": ["incomplete", "rejected_lines"],
        ...                                "partial": [True, False]}))
        "PARTIAL EVIDENCE: 1 file not read whole (forensics gaps): every answer rests on the evidence read; counts are lower bounds and no 'no' can be concluded"
    """
    rows = gaps[gaps["partial"].astype(bool)] if len(gaps) else gaps
    if rows.empty:
        return None
    words = {"unfinished": ("file of an unfinished ingest (run it again)", "files of an unfinished ingest (run it again)"),
             "incomplete": ("file not read whole", "files not read whole"),
             "not_read": ("path not read", "paths not read")}
    counts = rows.groupby("problem", sort=False).size()
    parts = []
    for problem, (one, many) in words.items():
        n = int(counts.get(problem, 0))
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    others = [str(p) for p in counts.index if p not in words]
    parts.extend(f"{int(counts[p])} x {p}" for p in others)
    return (f"PARTIAL EVIDENCE: {', '.join(parts)} (forensics gaps): every answer rests on the evidence "
            "read; counts are lower bounds and no 'no' can be concluded")


def coverage_note(case: Case | str | os.PathLike[str], *, node: str | None = None) -> dict[str, Any]:
    """The node starts in scope the logs cannot judge, and the warning to print (None if none).

    Returns ``{"unknown_node_starts": ["prefill-3 #1 (no pool)", ...], "engine_starts": N,
    "evidence_partial": bool, "warning": str | None}``; ``node`` limits the scope to one node. The
    warning starts with "PARTIAL EVIDENCE" when a file was not read whole or an ingest is unfinished
    (:func:`partial_evidence`).

    Example:
        >>> import forensics
        >>> coverage_note(forensics.open_case(":memory:"))["warning"][:36]
        'no engine startup lines in the case:'
    """
    c = as_case(case)
    partial = partial_evidence(analysis.evidence_gaps(c).df())
    n_starts = int(c.sql("SELECT count(*) FROM engine_starts").fetchall()[0][0])
    # the unknown starts in scope: queries/impact_summary.sql (start periods the logs do not judge,
    # nodes with engine lines but no startup lines included)
    row = analysis.impact_summary(c, node=node).df().set_index("question").loc["exposed"]
    labels = row["unknown_starts"]
    starts = str(labels).split(", ") if isinstance(labels, str) and labels else []
    warning: str | None = None
    if n_starts == 0 and not starts:
        warning = ("no engine startup lines in the case: no node's pool or context length is known, so the exposure "
                   "cannot be confirmed from the engines (affected rows rest on the given limit and window)")
    elif starts:
        warning = (f"{len(starts)} node start(s) in scope without pool / context in the logs, verdict unknown: "
                   f"{', '.join(starts[:10])}{' ...' if len(starts) > 10 else ''}; requests they served cannot "
                   "be cleared (see forensics audit)")
    if partial:
        warning = partial + (f"; also {warning}" if warning else "")
    return {"unknown_node_starts": starts, "engine_starts": n_starts, "evidence_partial": partial is not None,
            "warning": warning}
