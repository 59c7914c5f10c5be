"""Customer notification lists a customer team can send, and per-tenant notification packets.

The analysis is SQL (``queries/notifications.sql`` -> :func:`forensics.notifications`, and
``queries/notification_requests.sql`` for the request ids behind each notice). This module joins
that list to a customer directory export and writes one folder per tenant.

* :func:`read_directory`: a CSV export of the customer directory (tenant id -> company, contact
  e-mail, account owner); column names are matched case-insensitively against common spellings.
* :func:`with_directory`: the list joined to it. **Every tenant of the list stays**: one the
  directory does not know gets ``in_directory = false`` and empty contact columns, never dropped.
* :func:`write_packets`: ``DIR/<tenant>/summary.md`` (a short plain-language summary) and
  ``requests.csv`` (that tenant's own request ids, times, model); no other tenant's id or request
  id is ever written into a tenant's folder.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> import forensics
    >>> from forensics.sample import sample_case
    >>> out = Path(tempfile.mkdtemp())
    >>> _ = (out / "customers.csv").write_text("tenant_id,company,contact_email,account_owner\\n"
    ...     "5b724e83d2b7aaa355d7687552c91693,Acme,security@acme.example,J. Doe\\n")
    >>> listed = with_directory(forensics.notifications(sample_case()), out / "customers.csv").df()
    >>> len(listed), int(listed.in_directory.sum())       # every tenant kept, one found in the directory
    (38, 1)
    >>> len(write_packets(sample_case(), out / "packets"))
    38
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from forensics import analysis
from forensics.case import Case, as_case
from forensics.errors import InputError, ParameterError
from forensics.kinds import NOTICE_TYPES, NoticeType, member
from forensics.outputs.escape import md_text
from forensics.outputs.export import csv_text, rows_for_output, to_arrow
from forensics.relation import AnyRelation, Relation

#: Directory columns the list gains, and the header spellings accepted for each (lower case,
#: spaces/dashes as underscores).
DIRECTORY_FIELDS: dict[str, tuple[str, ...]] = {
    "tenant_id": ("tenant_id", "tenant", "tenantid", "customer_id", "account_id", "org_id",
                  "organization_id", "organisation_id", "team_id", "id"),
    "company": ("company", "company_name", "customer", "customer_name", "organization", "organisation",
                "org_name", "account_name", "name"),
    "contact_email": ("contact_email", "contact_e_mail", "email", "e_mail", "security_contact",
                      "contact", "primary_contact_email"),
    "account_owner": ("account_owner", "owner", "account_manager", "csm", "customer_success_manager"),
}

PACKET_COLUMNS = ["request_id", "header_request_id", "notice_type", "ts", "model", "confidence"]

NOTICE_TEXT = {
    "received-other-data": (
        "Some responses your organisation received from the API during the incident were generated "
        "over data left in memory by other customers' requests. Their content may include fragments "
        "of another customer's data and should be treated as untrusted; please delete stored copies "
        "and do not forward them."
    ),
    "data-possibly-exposed": (
        "Some of your organisation's requests were processed on a serving node shortly before a "
        "faulty response was generated on the same node. Data from these requests may have appeared "
        "in a response delivered to another customer."
    ),
}


def _norm(name: str) -> str:
    return re.sub(r"[\s\-.]+", "_", name.strip().lower())


def read_directory(path: str | os.PathLike[str]) -> duckdb.DuckDBPyRelation:
    """A customer directory CSV as a relation ``tenant_id, company, contact_email, account_owner``.

    Every value is read as text (tenant ids keep leading zeros); surrounding spaces are removed.
    A tenant listed several times keeps every distinct contact, joined with ``; ``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "customers.csv"
        >>> _ = path.write_text("tenant_id,company,contact_email,account_owner\\n007,Acme,sec@acme.example,J. Doe\\n")
        >>> read_directory(path).columns
        ['tenant_id', 'company', 'contact_email', 'account_owner', 'directory_rows']
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"customer directory {p} not found", hint="export it as CSV with a tenant id column")
    con = duckdb.connect()
    try:
        raw = con.sql(
            "SELECT * FROM read_csv($p, all_varchar = true, header = true, auto_detect = true)", params={"p": str(p)}
        ).to_arrow_table()
    except duckdb.Error as exc:
        raise InputError(f"cannot read the customer directory {p} as CSV: {exc}".splitlines()[0],
                         hint="export it as CSV with a header row") from exc
    by_norm = {_norm(c): c for c in raw.column_names}
    picked: dict[str, str | None] = {}
    for field, spellings in DIRECTORY_FIELDS.items():
        picked[field] = next((by_norm[s] for s in spellings if s in by_norm), None)
    if picked["tenant_id"] is None:
        raise InputError(
            f"customer directory {p} has no tenant id column (columns: {', '.join(raw.column_names)})",
            hint=f"name it one of: {', '.join(DIRECTORY_FIELDS['tenant_id'])}",
        )
    values: dict[str, list[Any]] = {}
    for field, col in picked.items():
        column = raw.column(col).to_pylist() if col else [None] * raw.num_rows
        values[field] = [v.strip() if isinstance(v, str) and v.strip() else None for v in column]
    merged: dict[str, dict[str, list[str]]] = {}
    counts: dict[str, int] = {}
    for i, tenant in enumerate(values["tenant_id"]):
        if tenant is None:
            continue
        entry = merged.setdefault(tenant, {f: [] for f in DIRECTORY_FIELDS if f != "tenant_id"})
        counts[tenant] = counts.get(tenant, 0) + 1
        for f in entry:
            v = values[f][i]
            if v is not None and v not in entry[f]:
                entry[f].append(v)
    tenants = sorted(merged)
    table = pa.table({
        "tenant_id": pa.array(tenants, pa.string()),
        **{f: pa.array(["; ".join(merged[t][f]) or None for t in tenants], pa.string())
           for f in DIRECTORY_FIELDS if f != "tenant_id"},
        "directory_rows": pa.array([counts[t] for t in tenants], pa.int64()),
    })
    return duckdb.from_arrow(table)


def with_directory(
    rel: Relation | duckdb.DuckDBPyRelation, directory: str | os.PathLike[str] | Relation | duckdb.DuckDBPyRelation
) -> Relation:
    """The notification list with the directory's company, contact and owner; no tenant dropped.

    ``in_directory`` is false for a tenant the directory does not list (its contact columns are
    NULL): such a tenant is kept and must be resolved by hand. Row order is the list's.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> import forensics
        >>> from forensics.sample import sample_case
        >>> path = Path(tempfile.mkdtemp()) / "customers.csv"
        >>> _ = path.write_text("tenant_id,company,contact_email,account_owner\\n"
        ...     "5b724e83d2b7aaa355d7687552c91693,Acme,security@acme.example,J. Doe\\n")
        >>> df = with_directory(forensics.notifications(sample_case()), path).df()
        >>> df.loc[df.in_directory, ["tenant_id", "company"]].values.tolist()
        [['5b724e83d2b7aaa355d7687552c91693', 'Acme']]
    """
    d = directory if isinstance(directory, Relation | duckdb.DuckDBPyRelation) else read_directory(directory)
    listing = to_arrow(rel)
    extra = to_arrow(d)
    index = {t: i for i, t in enumerate(extra.column("tenant_id").to_pylist())}
    tenants = listing.column("tenant_id").to_pylist()
    hits = [index.get(t) if t is not None else None for t in tenants]
    cols: dict[str, pa.Array] = {"tenant_id": listing.column("tenant_id"), "notice_type": listing.column("notice_type")}
    cols["in_directory"] = pa.array([h is not None for h in hits], pa.bool_())
    for f in ("company", "contact_email", "account_owner"):
        src = extra.column(f).to_pylist()
        cols[f] = pa.array([src[h] if h is not None else None for h in hits], pa.string())
    for name in listing.column_names:
        if name not in cols:
            cols[name] = listing.column(name)
    return Relation(duckdb.from_arrow(pa.table(cols)))


def for_tenants(rel: AnyRelation, tenants: list[str], *columns: str) -> AnyRelation:
    """Only the rows of these tenants: any of ``columns`` (default ``tenant_id``) equal to one of them.

    The values are bound as constants (expression API), never formatted into SQL.

    Example:
        >>> import forensics
        >>> from forensics.sample import sample_case
        >>> sources = forensics.leak_sources(sample_case())
        >>> mine = for_tenants(sources, ["5b724e83d2b7aaa355d7687552c91693"], "tenant_id", "source_tenant_id")
        >>> len(mine.df()) < len(sources.df())
        True
    """
    if not tenants:
        return rel
    cond: Any = None
    for col in columns or ("tenant_id",):
        if col not in rel.columns:
            continue
        for t in tenants:
            term = duckdb.ColumnExpression(col) == duckdb.ConstantExpression(t)
            cond = term if cond is None else cond | term
    if cond is None:
        raise ParameterError(f"this result has no tenant column ({', '.join(columns or ('tenant_id',))})")
    return rel.filter(cond)


# -- packets ----------------------------------------------------------------------------------


def packet_dirname(tenant: str | None) -> str:
    """A folder name for a tenant that is safe on every file system and unique.

    Characters outside ``[A-Za-z0-9._-]`` become ``_`` and a short hash of the id is appended
    whenever the name had to change, so ``../x`` or ``a/b`` can never leave the packets directory
    or collide with another tenant.

    Example:
        >>> packet_dirname("cbe7ab577e70"), packet_dirname("../etc"), packet_dirname(None)
        ('cbe7ab577e70', 'etc-f7f9121f', 'tenant-unknown')
    """
    if tenant is None:
        return "tenant-unknown"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", tenant).strip("._")[:80]
    if safe == tenant and safe not in ("", "tenant-unknown"):
        return safe
    return f"{safe or 'tenant'}-{hashlib.sha256(tenant.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


@dataclass
class Packet:
    """One tenant's folder: where it is and what it holds."""

    tenant_id: str | None
    path: Path
    notice_type: NoticeType
    n_received: int
    n_exposed: int


def _summary_md(tenant: str | None, notice: str, rows: list[dict[str, Any]], incident: str,
                contact: dict[str, Any] | None, window: tuple[str, str] | None = None) -> str:
    received = [r for r in rows if r["notice_type"] == "received-other-data"]
    exposed = [r for r in rows if r["notice_type"] == "data-possibly-exposed"]
    who = md_text(tenant) if tenant is not None else "(tenant could not be read from the logs)"
    lines = [f"# Incident notification: tenant {who}\n"]
    if contact and contact.get("company"):
        lines.append(f"For: {md_text(contact['company'])}"
                     + (f" ({md_text(contact['contact_email'])})" if contact.get("contact_email") else "") + "\n")
    lines.append(md_text(incident) + (f" The affected period ran from {window[0]} to {window[1]}." if window else "")
                 + "\n")
    lines.append("## What this means for you\n")
    for kind, subset in (("received-other-data", received), ("data-possibly-exposed", exposed)):
        if not subset:
            continue
        times = sorted(_when(r["ts"]) for r in subset if r["ts"] is not None)
        models = sorted({str(r["model"]) for r in subset if r["model"]})
        lines.append(f"- {NOTICE_TEXT[kind]}")
        span = "" if not times else f", on {times[0]}" if times[0] == times[-1] else (
            f", between {times[0]} and {times[-1]}")
        lines.append(f"  - Requests concerned: **{len(subset)}**{span}")
        if models:
            lines.append(f"  - Model: {md_text(', '.join(models))}")
        if kind == "received-other-data":
            n_conf = sum(1 for r in subset if r.get("confidence") == "confirmed")
            lines.append(f"  - Confirmed by server-side evidence: {n_conf}; suspected from gateway records "
                         f"only: {len(subset) - n_conf}")
    lines.append("")
    lines.append("The request ids, times and models are listed in `requests.csv` in this folder. "
                 "The ids are the ones your API responses carried (`request_id`; `header_request_id` "
                 "is the `x-request-id` header where one was sent). This notice contains no content of "
                 "any request or response.\n")
    return "\n".join(lines)


DEFAULT_INCIDENT = (
    "During the incident, a configuration error on part of our model-serving fleet caused some "
    "requests that exceeded the serving nodes' capacity to be answered from memory that still held "
    "data of earlier requests, instead of being rejected with an error."
)


def _when(value: Any) -> str:
    """'2026-09-03T13:13:27.543588Z' -> '2026-09-03 13:13 UTC' (what a reader needs of a time)."""
    text = str(value)
    return f"{text[:10]} {text[11:16]} UTC" if len(text) >= 16 and text[10] == "T" else text


def write_packets(
    case: Case | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    directory: str | os.PathLike[str] | Relation | duckdb.DuckDBPyRelation | None = None,
    tenants: list[str] | None = None,
    incident: str = DEFAULT_INCIDENT,
    limit_tokens: int | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    node: str | None = None,
    window_s: int = analysis.DEFAULT_WINDOW_S,
) -> list[Packet]:
    """One folder per tenant to notify: ``summary.md`` and ``requests.csv`` (its own ids only).

    Example:
        >>> import tempfile
        >>> from forensics.sample import sample_case
        >>> packets = write_packets(sample_case(), tempfile.mkdtemp())
        >>> [p.path.name for p in packets][:2], sorted(f.name for f in packets[0].path.iterdir())
        (['5b724e83d2b7aaa355d7687552c91693', '313ee2fa4358cca397ff0de03dd41acb'], ['requests.csv', 'summary.md'])
    """
    c = as_case(case)
    params: dict[str, Any] = {"limit_tokens": limit_tokens, "start": start, "end": end, "node": node,
                              "window_s": window_s}
    listing = analysis.notifications(c, **params)
    detail = analysis.notification_requests(c, **params)
    if tenants:
        listing = for_tenants(listing, tenants)
        detail = for_tenants(detail, tenants)
    contacts: dict[str | None, dict[str, Any]] = {}
    if directory is not None:
        names, rows = rows_for_output(with_directory(listing, directory))
        contacts = {r[0]: dict(zip(names, r, strict=True)) for r in rows}
    window: tuple[str, str] | None = None
    fleet = analysis.exposure_windows(c, limit_tokens=limit_tokens, start=start, end=end).filter(
        duckdb.ColumnExpression("scope") == duckdb.ConstantExpression("fleet"))
    wnames, wrows = rows_for_output(fleet)
    if wrows:
        w = dict(zip(wnames, wrows[0], strict=True))
        if w["window_start"] is not None:
            window = (_when(w["window_start"]), _when(w["window_end"]) if w["window_end"] else "the end of the logs")
    lnames, lrows = rows_for_output(listing)
    dnames, drows = rows_for_output(detail)
    by_tenant: dict[str | None, list[dict[str, Any]]] = {}
    for r in drows:
        rec = dict(zip(dnames, r, strict=True))
        by_tenant.setdefault(rec["tenant_id"], []).append(rec)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    packets = []
    for r in lrows:
        rec = dict(zip(lnames, r, strict=True))
        tenant = rec["tenant_id"]
        mine = by_tenant.get(tenant, [])
        folder = root / packet_dirname(tenant)
        folder.mkdir(exist_ok=True)
        (folder / "summary.md").write_text(
            _summary_md(tenant, rec["notice_type"], mine, incident, contacts.get(tenant), window), encoding="utf-8")
        (folder / "requests.csv").write_text(
            csv_text(PACKET_COLUMNS, [[row[c] for c in PACKET_COLUMNS] for row in mine]), encoding="utf-8")
        packets.append(Packet(tenant, folder, member(rec["notice_type"], NOTICE_TYPES, "notice_type"),
                              sum(1 for x in mine if x["notice_type"] == "received-other-data"),
                              sum(1 for x in mine if x["notice_type"] == "data-possibly-exposed")))
    return packets
