"""forensics: which requests, and which customers, did an LLM-serving failure expose?

The pipeline, one module or package per stage:

* ``forensics.sources``  - read gateway and engine logs (``case.ingest_gateway/ingest_engine``)
* ``forensics.case``     - the DuckDB case database with provenance for every row
* ``forensics.analysis`` - the SQL of ``queries/`` as Python functions returning relations
* ``forensics.outputs``  - charts (also ``forensics.charts``), the impact report and notification lists

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
"""

from __future__ import annotations

__version__ = "0.1.0"

import os as _os
import sys as _sys

from forensics.arenas import cap_arenas as _cap_arenas

# first, before numpy, DuckDB or Arrow start threads: glibc's arenas are capped only for those
# created after it (forensics.arenas: the loaders' peak RSS 1.2-1.3 GiB -> ~0.8 GiB)
_cap_arenas()

try:
    from forensics.analysis import (
        affected_requests,
        affected_tenants,
        ambiguous_matches,
        coverage,
        evidence_gaps,
        exposure_windows,
        hidden_errors,
        impact_summary,
        leak_sources,
        notification_requests,
        notifications,
        parameters_used,
        pool_audit,
        post_fix_check,
        probing_tenants,
        request_chain,
        timeline,
        token_mismatch,
    )
    from forensics.case import Case, open_case
    from forensics.errors import ForensicsError
    from forensics.outputs.report import impact_report
    from forensics.sources import (  # also registers the loaders with the case
        ingest_engine,
        ingest_gateway,
    )
except KeyboardInterrupt:
    # Ctrl-C while the libraries load, when this import is the command line's (the console script
    # and ``python -m forensics`` import the package first): nothing was opened or read yet, so one
    # line and exit 130, not a traceback. Imported by a program or a notebook, the interrupt is theirs.
    _argv = getattr(_sys, "argv", None) or [""]
    if _os.path.splitext(_os.path.basename(_argv[0]))[0] in ("forensics", "-m"):
        _sys.stderr.write("interrupted: before any work began; nothing was read or written\n")
        raise SystemExit(130) from None
    raise

__all__ = [
    "Case",
    "ForensicsError",
    "__version__",
    "affected_requests",
    "affected_tenants",
    "ambiguous_matches",
    "coverage",
    "evidence_gaps",
    "exposure_windows",
    "hidden_errors",
    "impact_report",
    "impact_summary",
    "ingest_engine",
    "ingest_gateway",
    "leak_sources",
    "notification_requests",
    "notifications",
    "open_case",
    "parameters_used",
    "pool_audit",
    "post_fix_check",
    "probing_tenants",
    "request_chain",
    "timeline",
    "token_mismatch",
]


def __getattr__(name: str) -> object:
    # forensics.charts without importing altair for every command line call
    if name == "charts":
        from forensics.outputs import charts

        return charts
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
