"""Benchmark suite of the forensics toolkit (issue #6).

Run ``python -m benchmarks`` (``make bench``): it generates incidents of 100 k and 1 M requests
with :func:`forensics.sample.generate` (cached in ``benchmarks/.data/<scale>/``), then measures,
each step in a fresh subprocess, the toolkit's gateway and engine ingest, every analysis query,
a bare DuckDB load of the same files and a plain pandas implementation of the same analysis
(:mod:`benchmarks.pandas_reference`), and writes ``benchmarks/RESULTS.md``.

Modules:

* :mod:`benchmarks.harness`          - command line, data sets, scheduling, statistics
* :mod:`benchmarks.steps`            - the measured steps (run as ``python -m benchmarks.steps``)
* :mod:`benchmarks.report`           - the Markdown report
* :mod:`benchmarks.pandas_reference` - the notebook-style pandas analysis it is compared with

See ``docs/benchmarks.md`` for how to run it and how to read the report.
"""

from __future__ import annotations

__all__: list[str] = []
