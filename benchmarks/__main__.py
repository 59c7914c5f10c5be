"""``python -m benchmarks``: run the benchmark suite (see ``docs/benchmarks.md``)."""

from __future__ import annotations

import sys

from benchmarks.harness import main

if __name__ == "__main__":
    sys.exit(main())
