"""Load gateway request logs of any front door into ``gateway_requests``, with provenance.

One pipeline serves every preset and every TOML mapping, one module per concern:

* :mod:`.spec`, :mod:`.presets`, :mod:`.mapping` - what a format says (presets, users' mappings);
* :mod:`.sniffing` - each file's container (NDJSON, CSV, JSON array / document, Parquet, text) and,
  with ``format="auto"``, the preset whose signature its sample records carry;
* :mod:`.sql` - the one ``INSERT ... SELECT`` over DuckDB's readers that loads a file;
* :mod:`.fastpath` - NDJSON through ``read_json``, its lines counted and hashed beside it;
* :mod:`.load`, :mod:`.numbering`, :mod:`.csvlines` - the line and record readers, physical line
  numbers, CSV records spanning lines;
* :mod:`.duplicates`, :mod:`.salvage` - delivery-retry copies, truncated compressed files;
* :mod:`.ingest` - the entry point: plan every file, load them in batches, record the evidence.

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
    >>> from forensics.sample import sample_dir
    >>> summary = case.ingest_gateway(sample_dir() / "gateway" / "litellm", format="auto", quiet=True)
    >>> [f.reconciles for f in summary.files]
    [True]
"""

from __future__ import annotations

from forensics.sources.gateway.copies import salvage_to_file
from forensics.sources.gateway.ingest import (
    KNOWN_OPTIONS,
    LOAD_RESERVE_BYTES,
    ingest_gateway,
)
from forensics.sources.gateway.presets import PRESETS, apply_options, resolve_spec
from forensics.sources.gateway.scan import scan_file
from forensics.sources.gateway.sniffing import FilePlan, Sniff, detect, sniff
from forensics.sources.gateway.sql import build_insert_sql, ts_sql

__all__ = [
    "KNOWN_OPTIONS",
    "LOAD_RESERVE_BYTES",
    "PRESETS",
    "FilePlan",
    "Sniff",
    "apply_options",
    "build_insert_sql",
    "detect",
    "ingest_gateway",
    "resolve_spec",
    "salvage_to_file",
    "scan_file",
    "sniff",
    "ts_sql",
]
