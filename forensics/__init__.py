"""forensics: which requests, and which customers, did an LLM-serving failure expose?

The pipeline, one module or package per stage:

* ``forensics.sources``  - read gateway and engine logs (``case.ingest_gateway/ingest_engine``)
* ``forensics.case``     - the DuckDB case database with provenance for every row
* ``forensics.analysis`` - the SQL of ``queries/`` as Python functions returning relations
* ``forensics.outputs``  - charts, the impact report and notification lists

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
"""

from __future__ import annotations

__version__ = "0.1.0"

from forensics.analysis import (
    affected_requests,
    affected_tenants,
    exposure_windows,
    hidden_errors,
    leak_sources,
    parameters_used,
    pool_audit,
    post_fix_check,
    request_chain,
    token_mismatch,
)
from forensics.case import Case, open_case
from forensics.errors import ForensicsError
from forensics.outputs.notifications import notifications
from forensics.outputs.report import impact_report

__all__ = [
    "Case",
    "ForensicsError",
    "__version__",
    "affected_requests",
    "affected_tenants",
    "exposure_windows",
    "hidden_errors",
    "impact_report",
    "leak_sources",
    "notifications",
    "open_case",
    "parameters_used",
    "pool_audit",
    "post_fix_check",
    "request_chain",
    "token_mismatch",
]
