"""Sources stage: read gateway and engine logs into the case database, with provenance.

* :mod:`forensics.sources.files`   - path expansion, hashing, compression, evidence registration
* :mod:`forensics.sources.gateway` - gateway presets and TOML mappings -> ``gateway_requests``
  (a package: sniffing, presets, SQL building, fast path, numbering, duplicates, salvage)
* :mod:`forensics.sources.engine`  - SGLang engine and router logs (a package, one module per stage) -> ``engine_*`` tables
"""

from forensics.case import register_loader
from forensics.sources.engine import ingest_engine
from forensics.sources.gateway import ingest_gateway

# The case reaches the loaders through this registry (it never imports them).
register_loader("gateway", ingest_gateway)
register_loader("engine", ingest_engine)

__all__ = ["ingest_engine", "ingest_gateway"]
