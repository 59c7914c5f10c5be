"""``python -m forensics.sources.engine FILE...``: rewrite the generated kinds table of each file."""

import sys

from forensics.sources.engine.catalogue import write_docs

for arg in sys.argv[1:]:
    print(f"{arg}: {'rewritten' if write_docs(arg) else 'up to date'}")
