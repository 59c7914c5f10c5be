"""Customer notification lists: one row per tenant to notify, and why."""

from __future__ import annotations

import os

import pandas as pd

from forensics import analysis
from forensics.case import Case, as_case

COLUMNS = [
    "tenant_id",
    "notify_as",
    "n_responses_received",
    "n_confirmed",
    "n_suspected",
    "n_requests_possibly_exposed",
    "first_ts",
    "last_ts",
    "received_request_ids",
    "exposed_request_ids",
]


def notifications(case: Case | str | os.PathLike[str], *, window_s: int = 600) -> pd.DataFrame:
    """The notification list: recipients of others' data and tenants whose data may have leaked.

    ``notify_as`` is ``recipient`` (received responses built on another tenant's KV pages),
    ``source`` (a request of theirs finished on the same decode node shortly before an affected
    response: their data may be in it), or ``recipient+source``. Same-tenant pairs are not a
    cross-tenant exposure and do not make a tenant a source. Sorted by tenant_id.

    Example:
        >>> notifications("case.duckdb").to_csv("notifications.csv", index=False)   # doctest: +SKIP
    """
    c = as_case(case)
    rec = analysis.affected_tenants(c).df()
    src = analysis.leak_sources(c, window_s=window_s).df()
    if len(src):
        src = src[~src["same_tenant"].astype(bool) & src["source_tenant_id"].notna()]
    rows: dict[str, dict[str, object]] = {}
    for r in rec.itertuples(index=False):
        raw = r.request_ids
        ids: str = raw if isinstance(raw, str) else " ".join(str(x) for x in (raw if raw is not None else []))
        rows[str(r.tenant_id)] = {
            "tenant_id": r.tenant_id, "n_responses_received": int(r.n_requests),
            "n_confirmed": int(r.n_confirmed), "n_suspected": int(r.n_suspected),
            "first_ts": pd.Timestamp(r.first_ts), "last_ts": pd.Timestamp(r.last_ts),
            "received_request_ids": " ".join(sorted(ids.split())),
            "n_requests_possibly_exposed": 0, "exposed_request_ids": "",
        }
    for tenant, grp in src.groupby("source_tenant_id"):
        src_ids = sorted(set(grp["source_request_id"].astype(str)))
        first, last = pd.Timestamp(grp["source_finished_ts"].min()), pd.Timestamp(grp["source_finished_ts"].max())
        row = rows.setdefault(str(tenant), {
            "tenant_id": tenant, "n_responses_received": 0, "n_confirmed": 0, "n_suspected": 0,
            "first_ts": first, "last_ts": last, "received_request_ids": "",
        })
        row["n_requests_possibly_exposed"] = len(src_ids)
        row["exposed_request_ids"] = " ".join(src_ids)
        row["first_ts"] = min(pd.Timestamp(row["first_ts"]), first)  # type: ignore[arg-type]
        row["last_ts"] = max(pd.Timestamp(row["last_ts"]), last)  # type: ignore[arg-type]
    for row in rows.values():
        roles = [n for n, k in (("recipient", "n_responses_received"), ("source", "n_requests_possibly_exposed"))
                 if int(row[k]) > 0]  # type: ignore[call-overload]
        row["notify_as"] = "+".join(roles)
    df = pd.DataFrame(list(rows.values()), columns=COLUMNS)
    return df.sort_values("tenant_id", kind="stable").reset_index(drop=True)
