"""The questions of the incident as Python functions: one per ``queries/<name>.sql``, same name.

Every function takes a case (a :class:`~forensics.case.Case` or a path, opened read-only) and
exactly the keyword parameters its query file declares, and returns a
:class:`~forensics.relation.Relation`: a DuckDB relation (``.df()``, ``.fetchall()``, ``.order()``,
...) whose ``.arrow()`` is a materialised ``pyarrow.Table``. Each docstring lists the parameters
and output columns its query file declares. :func:`parameters_used` records what produced a result:
the parameters given and the values derived from the logs (admission limits, windows).

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
    >>> forensics.request_chain(case).fetchall()
    []
"""

from __future__ import annotations

import datetime as dt
import inspect
import os
import re
from collections.abc import Callable
from typing import Any

from forensics import __version__
from forensics.case import Case, as_case
from forensics.errors import CaseError, ParameterError
from forensics.relation import Relation
from forensics.sqlfiles import load_query

CaseLike = Case | str | os.PathLike[str]

#: Default look-back for leak sources: KV pages freed this long before a placeholder request's
#: decode started may still have been resident (the sample's and the write-up's 10 minutes).
DEFAULT_WINDOW_S = 600

#: A tenant sending this many over-limit prompts within one hour is listed as possible probing.
DEFAULT_PROBE_THRESHOLD = 5

__all__ = [
    "DEFAULT_PROBE_THRESHOLD",
    "DEFAULT_WINDOW_S",
    "affected_requests",
    "affected_tenants",
    "ambiguous_matches",
    "coverage",
    "evidence_gaps",
    "exposure_windows",
    "hidden_errors",
    "impact_summary",
    "leak_sources",
    "notification_requests",
    "notifications",
    "parameters_used",
    "pool_audit",
    "post_fix_check",
    "probing_tenants",
    "request_chain",
    "timeline",
    "token_mismatch",
]


def _run(
    case: CaseLike, name: str, *, check: Callable[[Case], None] | None = None, **params: Any
) -> Relation:
    """Run ``queries/<name>.sql`` on the case (a path is opened read-only, and closed again when
    the query cannot run), after ``check`` and with the derived tables up to date."""
    c = as_case(case)
    try:
        c.ensure_facts()  # before the check: start_periods reads a derived table
        if check is not None:
            check(c)
        # the result keeps the case: one opened here by path stays open while the result is used
        return Relation(c.run_query(name, params), c)
    except BaseException:
        if c is not case:
            c.close()
        raise


def _count(c: Case, sql: str) -> int:
    rows = c.sql(sql).fetchall()
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _check_limit(limit_tokens: int | None) -> None:
    if limit_tokens is not None and limit_tokens <= 0:
        raise ParameterError(f"--limit-tokens must be a positive token count, got {limit_tokens}")


def _check_range(start: dt.datetime | None, end: dt.datetime | None) -> None:
    if start is not None and end is not None and end <= start:
        raise ParameterError(f"--end {end.isoformat()} is not after --start {start.isoformat()}")


def _need_window(
    c: Case, limit_tokens: int | None, start: dt.datetime | None, end: dt.datetime | None, what: str
) -> None:
    """Refuse to guess: without engine starts there is no derived limit or window."""
    _check_limit(limit_tokens)
    _check_range(start, end)
    if _count(c, "SELECT count(*) FROM engine_starts") > 0:
        return
    missing = [
        opt
        for opt, value in (("--limit-tokens", limit_tokens), ("--start", start), ("--end", end))
        if value is None
    ]
    if missing:
        raise CaseError(
            f"{what}: the case has no engine startup lines, so the admission limit and the exposure "
            f"window cannot be derived",
            hint=f"pass {' '.join(missing)} (e.g. --limit-tokens 681274 --start 2026-08-27T00:00:00Z "
            f"--end 2026-09-09T14:52:00Z), or ingest the engine logs",
        )


def _need_starts(c: Case, what: str) -> None:
    # a node with engine lines but no startup lines has a start period of its own (verdict unknown)
    if _count(c, "SELECT count(*) FROM start_periods") == 0:
        raise CaseError(
            f"{what}: the case has no engine startup lines (engine_starts is empty)",
            hint="ingest the SGLang engine logs of every prefill and decode node "
            "(forensics ingest CASE.duckdb --engine DIR --engine-tz TZ)",
        )


def _run_sources(
    case: CaseLike, name: str, what: str, limit_tokens: int | None, start: dt.datetime | None,
    end: dt.datetime | None, node: str | None, window_s: int,
) -> Relation:
    """Run a query on the affected set and its leak sources (the window checks, then the look-back)."""
    if window_s is None or window_s <= 0:
        raise ParameterError(f"--window-s must be a positive number of seconds, got {window_s}")
    return _run(case, name, check=lambda c: _need_window(c, limit_tokens, start, end, what),
                limit_tokens=limit_tokens, start=start, end=end, node=node, window_s=window_s)


# -- the queries ------------------------------------------------------------------------------


def evidence_gaps(case: CaseLike) -> Relation:
    """What the case's evidence lacks or flags: one row per file and problem (``partial`` first).

    ``partial`` rows (an unfinished ingest, a file not read whole) mean every answer rests on
    partial evidence: outputs then never say a clean "no".

    Example:
        >>> import forensics
        >>> forensics.evidence_gaps(forensics.open_case(":memory:")).fetchall()
        []
    """
    return _run(case, "evidence_gaps")


def pool_audit(case: CaseLike, *, node: str | None = None) -> Relation:
    """Every node start with its KV pool, context length, admission limit, period and verdict.

    Example:
        >>> from forensics.sample import sample_case
        >>> audit = pool_audit(sample_case(), node="prefill-1").df()
        >>> audit[["start_seq", "verdict", "admission_limit"]].values.tolist()
        [[1, 'ok', 524282], [2, 'exposed', 681274], [3, 'exposed', 777786], [4, 'ok', 1048570]]
    """
    return _run(case, "pool_audit", check=lambda c: _need_starts(c, "pool audit"), node=node)


def exposure_windows(
    case: CaseLike,
    *,
    node: str | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    limit_tokens: int | None = None,
) -> Relation:
    """Per node the periods it ran exposed, and the fleet window (derived, or given).

    Example:
        >>> from forensics.sample import sample_case
        >>> w = exposure_windows(sample_case()).df()
        >>> w[w.scope == "fleet"][["window_start", "window_end", "admission_limit"]].astype(str).values.tolist()
        [['2026-09-03 02:55:00', '2026-09-09 14:47:30', '681274']]
    """
    return _run(case, "exposure_windows",
                check=lambda c: _need_window(c, limit_tokens, start, end, "exposure windows"),
                node=node, start=start, end=end, limit_tokens=limit_tokens)


def request_chain(
    case: CaseLike,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
    request_id: str | None = None,
) -> Relation:
    """Each request's chain: gateway record, prefill leg, decode leg, how they matched, evidence.

    Rows come in no particular order (a full export: sort what you keep, e.g. ``.order("ts")``).

    Example:
        >>> from forensics.sample import sample_case
        >>> chain = request_chain(sample_case(), request_id="3f994a9be25fbb13").df()
        >>> chain[["prefill_node", "prefill_tokens", "decode_tokens", "match_method"]].values.tolist()
        [['prefill-1', 1, 736944, 'header_id']]
    """
    _check_range(start, end)
    return _run(case, "request_chain", start=start, end=end, node=node, request_id=request_id)


def ambiguous_matches(
    case: CaseLike,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """Gateway records with several equally good engine chains, and chains several records claim.

    One row per (record, candidate chain): ``ambiguity`` (``several_chains`` / ``several_records``),
    ``chosen`` (the rule's pick), ``taken_by`` (the record the chain went to), ``dt_s``, ``reason``
    and the evidence. The requests that rest on such a pick are flagged ``ambiguous_match`` in
    :func:`affected_requests`. ``start`` / ``end``: the records' time; ``node``: the chains'.

    Example:
        >>> from forensics.sample import sample_case
        >>> len(ambiguous_matches(sample_case()).df())   # the sample's engine lines carry the ids
        0
    """
    _check_range(start, end)
    return _run(case, "ambiguous_matches", start=start, end=end, node=node)


def affected_requests(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """The 2xx responses that should have been 400: confirmed by engine evidence, or suspected.

    Example:
        >>> from forensics.sample import sample_case
        >>> affected_requests(sample_case()).df().groupby("confidence").size().to_dict()
        {'confirmed': 32, 'suspected': 3}
    """
    return _run(case, "affected_requests",
                check=lambda c: _need_window(c, limit_tokens, start, end, "affected requests"),
                limit_tokens=limit_tokens, start=start, end=end, node=node)


def affected_tenants(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """Per tenant: affected responses received (confirmed / suspected), first and last time, ids.

    Example:
        >>> from forensics.sample import sample_case
        >>> affected_tenants(sample_case()).df()[["n_requests", "n_confirmed", "n_suspected"]].sum().to_dict()
        {'n_requests': 35, 'n_confirmed': 32, 'n_suspected': 3}
    """
    return _run(case, "affected_tenants",
                check=lambda c: _need_window(c, limit_tokens, start, end, "affected tenants"),
                limit_tokens=limit_tokens, start=start, end=end, node=node)


def leak_sources(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
    window_s: int = DEFAULT_WINDOW_S,
) -> Relation:
    """Whose data may have been exposed: requests finished on the same decode node shortly before.

    Example:
        >>> from forensics.sample import sample_case
        >>> len(leak_sources(sample_case(), window_s=300).df()), len(leak_sources(sample_case()).df())
        (81, 139)
    """
    return _run_sources(case, "leak_sources", "leak sources", limit_tokens, start, end, node, window_s)


def notifications(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
    window_s: int = DEFAULT_WINDOW_S,
) -> Relation:
    """The notification list: per tenant, the notice it needs and the request ids behind it.

    ``notice_type`` is ``received-other-data`` (recipients of affected responses),
    ``data-possibly-exposed`` (possible sources) or ``both``; recipients come first. Joined to a
    customer directory, and written as per-tenant packets, by :mod:`forensics.outputs.notifications`.

    Example:
        >>> from forensics.sample import sample_case
        >>> len(notifications(sample_case()).df())     # tenants to notify in the sample incident
        38
    """
    return _run_sources(case, "notifications", "notifications", limit_tokens, start, end, node, window_s)


def notification_requests(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
    window_s: int = DEFAULT_WINDOW_S,
) -> Relation:
    """The requests behind each notice: per tenant, its own request ids, notice type, time, model.

    Example:
        >>> from forensics.sample import sample_case
        >>> notification_requests(sample_case()).df().columns.tolist()[:3]
        ['tenant_id', 'notice_type', 'request_id']
    """
    return _run_sources(case, "notification_requests", "notification requests", limit_tokens, start, end,
                        node, window_s)


def timeline(
    case: CaseLike,
    *,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """The incident as events: each log record of the affected requests' evidence, and node starts.

    Example:
        >>> from forensics.sample import sample_case
        >>> len(timeline(sample_case()).df())
        237
    """
    return _run(case, "timeline", check=lambda c: _need_window(c, limit_tokens, start, end, "timeline"),
                limit_tokens=limit_tokens, start=start, end=end, node=node)


def token_mismatch(
    case: CaseLike,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """Requests whose token counts disagree: gateway vs engine, prefill vs decode.

    Example:
        >>> from forensics.sample import sample_case
        >>> token_mismatch(sample_case()).df().mismatch.value_counts().to_dict()
        {'placeholder': 33}
    """
    _check_range(start, end)
    return _run(case, "token_mismatch", start=start, end=end, node=node)


def post_fix_check(case: CaseLike, *, node: str | None = None) -> Relation:
    """Is it over? Node configs now, placeholder 2xx after each fix, integrity lines.

    Example:
        >>> from forensics.sample import sample_case
        >>> post_fix_check(sample_case()).df().groupby("check").result.first().to_dict()["node_config"]
        'pass'
    """
    return _run(case, "post_fix_check", check=lambda c: _need_starts(c, "post-fix check"), node=node)


def impact_summary(case: CaseLike, *, node: str | None = None) -> Relation:
    """The headline answers: was a node exposed, is it over? (yes / no / unknown, with what they rest on).

    One row per question (``exposed``, ``over``): ``answer``, ``n`` (the starts or checks it
    rests on), ``n_nodes``, ``n_unknown`` and ``unknown_starts`` (the node starts the logs do not
    judge), ``detail`` (the answer as one sentence). A start whose pool or context length is not in
    the logs turns "no" and "yes, it is over" into ``unknown``. ``node``: one node's starts and checks.

    Example:
        >>> from forensics.sample import sample_case
        >>> impact_summary(sample_case()).df()[["question", "answer", "n"]].values.tolist()
        [['exposed', 'yes', 3], ['over', 'yes', 13]]
    """
    return _run(case, "impact_summary", node=node)


def coverage(case: CaseLike, *, node: str | None = None) -> Relation:
    """What the engine logs show, per node and file: lines by kind, share recognised, startup facts, span, wrapper, zone.

    See queries/coverage.sql for what each column counts.

    Example:
        >>> from forensics.sample import sample_case
        >>> cov = coverage(sample_case()).df()
        >>> sorted(set(cov.node_verdict.dropna()))
        ['exposed', 'ok']
    """
    return _run(case, "coverage", node=node)


def probing_tenants(
    case: CaseLike,
    *,
    threshold: int = DEFAULT_PROBE_THRESHOLD,
    limit_tokens: int | None = None,
) -> Relation:
    """Tenants that sent ``threshold`` or more over-limit prompts within one hour (possible probing).

    Over-limit is judged per request, against the admission limit of the node start in force when
    its prefill leg ran (``limit_tokens`` overrides it for every request); a request the logs do
    not give a limit for is not counted.

    Example:
        >>> from forensics.sample import sample_case
        >>> probing_tenants(sample_case()).fetchall()               # nobody probed in the sample incident
        []
        >>> len(probing_tenants(sample_case(), threshold=1).fetchall()) > 0
        True
    """
    if threshold is None or threshold < 1:
        raise ParameterError(f"--threshold must be a positive number of prompts, got {threshold}")
    _check_limit(limit_tokens)
    return _run(case, "probing_tenants", threshold=threshold, limit_tokens=limit_tokens)


def hidden_errors(
    case: CaseLike,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
) -> Relation:
    """Errors hidden behind a 2xx: in-band (SSE/body) errors and transfer failures.

    Example:
        >>> from forensics.sample import sample_case
        >>> hidden_errors(sample_case()).df()[["status", "kinds"]].values.tolist()
        [[200, 'transfer_failure;engine_abort']]
    """
    _check_range(start, end)
    return _run(case, "hidden_errors", start=start, end=end, node=node)


# -- docstrings from the query files ---------------------------------------------------------------


def _wrapped(names: tuple[str, ...], indent: str, width: int = 96) -> list[str]:
    lines: list[str] = []
    for name in names:
        word = f"``{name}``"
        if lines and len(lines[-1]) + len(word) + 2 <= width:
            lines[-1] += f", {word}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(indent + word)
    return lines


def query_doc(name: str) -> str:
    """The parameters and output columns of ``queries/<name>.sql``, as a docstring section.

    Generated from the query file's header (``-- param`` and ``-- columns:`` lines, those of its
    inputs too): each analysis function's docstring carries it, so ``help()`` and the docs list
    the same names the SQL declares.

    Example:
        >>> print(query_doc("post_fix_check"))   # doctest: +NORMALIZE_WHITESPACE
        Parameters (queries/post_fix_check.sql):
            node: only this node's rows (None: all; fleet-wide rows are always shown)
        Columns (the CSV contract, in order):
            ``check``, ``node``, ``result``, ``n``, ``first_ts``, ``last_ts``, ``detail``
    """
    q = load_query(name)
    out = [f"Parameters (queries/{name}.sql):" if q.all_params() else f"Parameters: none (queries/{name}.sql)."]
    for p in q.all_params():
        text = re.sub(r"\$(\w+)", r"\1", p.description).replace("(NULL:", "(None:").replace("NULL", "None")
        out.append(f"    {p.name}: {text}")
    out.append("Columns (the CSV contract, in order):")
    out += _wrapped(q.columns, "    ")
    if q.more_columns:
        out.append("Then, in the relation, JSON and Parquet (not in the CSV):")
        out += _wrapped(q.more_columns, "    ")
    if q.order:
        out.append(f"Rows in no particular order; the command line sorts by {q.order}.")
    return "\n".join(out)


def _document(func: Callable[..., Any]) -> None:
    """Insert :func:`query_doc` before the docstring's example."""
    doc = inspect.cleandoc(func.__doc__ or "")
    head, sep, example = doc.partition("\nExample:")
    func.__doc__ = f"{head.rstrip()}\n\n{query_doc(func.__name__)}\n{sep}{example}"


# -- provenance of a result -------------------------------------------------------------------

def _iso(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    return value


def parameters_used(case: CaseLike, func_name: str, **kwargs: Any) -> dict[str, Any]:
    """Record what produced a result: the parameters given and the values derived from the logs.

    Example:
        >>> from forensics.sample import sample_case
        >>> p = parameters_used(sample_case(), "affected_requests", limit_tokens=681274)
        >>> p["given"]["limit_tokens"], p["derived"]["fleet_window"]["admission_limit"]
        (681274, 681274)
    """
    c = as_case(case)
    q = load_query(func_name)
    given = {name: _iso(kwargs.get(name)) for name in q.all_param_names()}
    # the windows as exposure_windows defines them (one definition: the CSVs and this agree)
    rel = _run(c, "exposure_windows", node=None, start=None, end=None, limit_tokens=None)
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    limits: dict[str, list[int]] = {}
    windows: list[dict[str, Any]] = []
    fleet_window: dict[str, Any] = {"start": None, "end": None, "open": None, "admission_limit": None}
    for w in rows:
        entry = {
            "start": _iso(w["window_start"]),
            "end": _iso(w["window_end"]),
            "open": w["window_open"],
            "admission_limit": w["admission_limit"],
        }
        if w["scope"] == "fleet":
            fleet_window = entry
            continue
        limits.setdefault(w["node"], [])
        if w["admission_limit"] not in limits[w["node"]]:
            limits[w["node"]].append(int(w["admission_limit"]))
        windows.append({"node": w["node"], "role": w["role"], **entry, "context_len": w["context_len"],
                        "max_total_num_tokens": w["max_total_num_tokens"], "n_starts": w["n_starts"]})
    n_starts = c.sql("SELECT count(*) FROM engine_starts").fetchall()[0][0]
    fleet_limit = fleet_window["admission_limit"]
    derived = {
        "admission_limits": limits,
        "exposure_windows": windows,
        "fleet_window": fleet_window,
        "engine_starts": int(n_starts),
    }
    effective = {
        "admission_limit": given.get("limit_tokens") or fleet_limit,
        "window_start": given.get("start") or fleet_window["start"],
        "window_end": given.get("end") or fleet_window["end"],
    }
    return {
        "query": func_name,
        "query_file": f"queries/{func_name}.sql",
        "given": given,
        "derived": derived,
        "effective": effective,
        "case": c.path,
        "toolkit_version": __version__,
    }


for _name in __all__:
    if _name not in ("DEFAULT_PROBE_THRESHOLD", "DEFAULT_WINDOW_S", "parameters_used"):
        _document(globals()[_name])
