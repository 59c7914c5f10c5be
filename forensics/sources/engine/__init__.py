"""Load SGLang engine and router (sgl-router / smg) logs of any release into the case database.

The package is the pipeline, one stage per module:

* files, wrappers, pods and nodes: the collection stage (:mod:`forensics.sources.collect`);
* :mod:`.read` — line repairs (UTF-8, ANSI codes), and a raw line read again from its offset;
* :mod:`.catalogue` (+ ``kinds.toml``) — every line kind, declared as data, with sample lines;
* :mod:`.prefix`, :mod:`.classify` — the compiled scanner: prefix and kind of every line;
* :mod:`.extract_batch`, :mod:`.extract_request`, :mod:`.extract_http` — compiled extractors of
  the bulk kinds; :mod:`.sql` — the rare kinds read by DuckDB over just their lines;
* :mod:`.scan` — one block in, typed Arrow tables out; :mod:`.timeinfer` — times in UTC;
  :mod:`.zones` — the engine clock checked against the collector's;
* :mod:`.router` — the sgl-router / smg line grammar for other loaders;
* :mod:`.redact` — what must never be stored; :mod:`.loader` — evidence, inserts, counts;
* :mod:`.starts` — ``engine_starts``, one row per node start.

Example:
    >>> from forensics.sample import sample_case
    >>> sample_case().sql("SELECT kind, family, sum(n_lines) FROM engine_line_kinds "
    ...                   "GROUP BY ALL ORDER BY 3 DESC LIMIT 2").fetchall()
    [('http', 'engine', 26826), ('batch', 'engine', 22153)]
"""

from forensics.sources.collect.layout import EngineSource, node_of_file, resolve_sources
from forensics.sources.engine.loader import ingest_engine
from forensics.sources.engine.read import read_line_at
from forensics.sources.engine.router import parse_router_lines
from forensics.sources.engine.scan import canonical_ranks, probe
from forensics.sources.engine.starts import rebuild_starts

__all__ = ["EngineSource", "canonical_ranks", "ingest_engine", "node_of_file", "parse_router_lines", "probe",
           "read_line_at", "rebuild_starts", "resolve_sources"]
