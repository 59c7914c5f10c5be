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

from forensics.case import Case, open_case  # noqa: E402
from forensics.errors import ForensicsError  # noqa: E402

__all__ = ["Case", "ForensicsError", "__version__", "open_case"]
