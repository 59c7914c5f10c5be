"""Command line entry: ``python -m forensics.sample --out DIR [--requests N] [--seed S]``.

Example:
    python -m forensics.sample --out sample_data
"""

from __future__ import annotations

import argparse
import sys

from forensics.sample import DEFAULT_REQUESTS, DEFAULT_SEED, generate


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, generate the sample and print a one-line summary.

    Example:
        >>> main(["--out", __import__("tempfile").mkdtemp(), "--requests", "300"])  # doctest: +ELLIPSIS
        wrote ...
        0
    """
    ap = argparse.ArgumentParser(prog="python -m forensics.sample", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (engine/, gateway/ and truth.json are replaced)")
    ap.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help=f"client requests (default {DEFAULT_REQUESTS})")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    args = ap.parse_args(argv)
    truth = generate(args.out, requests=args.requests, seed=args.seed)
    c = truth["counts"]
    print(
        f"wrote {args.out}: {c['requests_total']} requests, {c['leaks']} leaks, "
        f"{c['affected_tenants']} affected tenants, {len(c['files'])} files"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
