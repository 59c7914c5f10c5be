"""Sources stage: read gateway and engine logs into the case database, with provenance.

* :mod:`forensics.sources.files`   - path expansion, hashing, compression, evidence registration
* :mod:`forensics.sources.gateway` - gateway presets and TOML mappings -> ``gateway_requests``
  (a package: sniffing, presets, SQL building, fast path, numbering, duplicates, salvage)
* :mod:`forensics.sources.engine`  - SGLang engine and router logs -> ``engine_*`` tables
"""
