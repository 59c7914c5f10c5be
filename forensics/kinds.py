"""The fixed vocabularies of the toolkit, as ``Literal`` types: one definition each.

Every parameter or field that takes one of a fixed set of strings is typed with one of these, so a
type checker (and a reader) sees the allowed values. The values are the strings the case database
stores and the query files write; ``tests/test_kinds.py`` holds each type to the code or SQL that
produces its values. Open sets are not here: gateway layers (a mapping names its own), gateway
formats (presets and mapping files), line kinds (the catalogue's data), time zones.

Example:
    >>> from forensics.kinds import CONFIDENCES, member
    >>> CONFIDENCES
    ('confirmed', 'suspected')
    >>> member("suspected", CONFIDENCES, "confidence")
    'suspected'
    >>> member("maybe", CONFIDENCES, "confidence")
    Traceback (most recent call last):
    ...
    ValueError: confidence 'maybe' is not one of confirmed, suspected
"""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

__all__ = [
    "ANSWER_VERDICTS", "BACKENDS", "CHART_FORMATS", "CONFIDENCES", "FILE_KINDS", "GAP_PROBLEMS",
    "LINE_FAMILIES", "MATCH_METHODS", "NOTICE_TYPES", "POST_FIX_RESULTS", "REJECTION_KINDS",
    "REQUEST_RECORD_KINDS", "ROLES", "ROLE_SOURCES", "START_VERDICTS", "TABLE_FORMATS",
    "WINDOW_SCOPES", "AnswerVerdict", "Backend", "ChartFormat", "Confidence", "FileKind",
    "GapProblem", "LineFamily", "MatchMethod", "NoticeType", "PostFixResult", "RejectionKind",
    "RequestRecordKind", "Role", "RoleSource", "StartVerdict", "TableFormat", "WindowScope", "member",
]

# -- the case and its faces -------------------------------------------------------------------------

#: what an evidence file was read as (``evidence_files.kind``, the loaders' registry)
FileKind = Literal["gateway", "engine"]
#: the engine a case is opened on: ``duckdb`` (the case database file) or ``spark`` (a Parquet case
#: directory queried by Spark SQL: ``pip install 'forensics[spark]'``)
Backend = Literal["duckdb", "spark"]
#: how a table is written (``--format``); ``table`` is the terminal's
TableFormat = Literal["table", "csv", "json", "jsonl", "parquet"]
#: how a chart is written (``save_chart``; default: the file's suffix)
ChartFormat = Literal["html", "svg", "png", "json"]

# -- the engine tables ---------------------------------------------------------------------------------

#: an engine start's role (``engine_starts.role``): ``unified`` serves prefill and decode alike
Role = Literal["prefill", "decode", "unified"]
#: where the role was read (``engine_starts.role_source``)
RoleSource = Literal["server_args", "batch_lines", "default"]
#: ``engine_requests.kind``
RequestRecordKind = Literal["received", "finished", "metrics", "time_stats"]
#: ``engine_rejections.kind``
RejectionKind = Literal["input_length", "auto_truncate", "pd_capacity", "context_length"]
#: the family of a line kind of the catalogue (``engine_line_kinds.family``)
LineFamily = Literal["engine", "router", "foreign", "noise", "unknown"]

# -- the answers ---------------------------------------------------------------------------------------

#: a start period's verdict (``start_periods.verdict``, ``pool_audit``): unknown is never "ok"
StartVerdict = Literal["exposed", "ok", "unknown"]
#: an exposure window's scope (``exposure_windows.scope``)
WindowScope = Literal["node", "fleet"]
#: how a gateway record was matched to its engine chain (``chain_matches.match_method``)
MatchMethod = Literal["header_id", "rid", "router", "time_tokens", "time"]
#: an affected response's confidence: engine evidence, or the gateway's alone
Confidence = Literal["confirmed", "suspected"]
#: a notification's type (``notifications.notice_type``)
NoticeType = Literal["received-other-data", "data-possibly-exposed", "both"]
#: a post-fix check's result (``post_fix_check.result``)
PostFixResult = Literal["pass", "fail", "warn", "info", "unknown"]
#: what an evidence gap is (``evidence_gaps.problem``)
GapProblem = Literal["unfinished", "incomplete", "not_read", "rejected_lines", "grown", "warning"]
#: the answer word of a judgement question of the report ("Exposed?", "Is it over?", ...)
AnswerVerdict = Literal["yes", "no", "unknown"]

FILE_KINDS: tuple[FileKind, ...] = get_args(FileKind)
BACKENDS: tuple[Backend, ...] = get_args(Backend)
TABLE_FORMATS: tuple[TableFormat, ...] = get_args(TableFormat)
CHART_FORMATS: tuple[ChartFormat, ...] = get_args(ChartFormat)
ROLES: tuple[Role, ...] = get_args(Role)
ROLE_SOURCES: tuple[RoleSource, ...] = get_args(RoleSource)
REQUEST_RECORD_KINDS: tuple[RequestRecordKind, ...] = get_args(RequestRecordKind)
REJECTION_KINDS: tuple[RejectionKind, ...] = get_args(RejectionKind)
LINE_FAMILIES: tuple[LineFamily, ...] = get_args(LineFamily)
START_VERDICTS: tuple[StartVerdict, ...] = get_args(StartVerdict)
WINDOW_SCOPES: tuple[WindowScope, ...] = get_args(WindowScope)
MATCH_METHODS: tuple[MatchMethod, ...] = get_args(MatchMethod)
CONFIDENCES: tuple[Confidence, ...] = get_args(Confidence)
NOTICE_TYPES: tuple[NoticeType, ...] = get_args(NoticeType)
POST_FIX_RESULTS: tuple[PostFixResult, ...] = get_args(PostFixResult)
GAP_PROBLEMS: tuple[GapProblem, ...] = get_args(GapProblem)
ANSWER_VERDICTS: tuple[AnswerVerdict, ...] = get_args(AnswerVerdict)

K = TypeVar("K", bound=str)


def member(value: object, values: tuple[K, ...], what: str) -> K:
    """``value`` as one of ``values`` (typed as their ``Literal``), else a ``ValueError`` naming them.

    For values read from a file or a query: a string outside the vocabulary is a bug to report,
    never a value to pass on.

    Example:
        >>> member("csv", TABLE_FORMATS, "output format")
        'csv'
    """
    for v in values:
        if value == v:
            return v
    raise ValueError(f"{what} {value!r} is not one of {', '.join(values)}")
