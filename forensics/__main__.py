"""The ``forensics`` console script and ``python -m forensics``: the CLI behind an interrupt guard.

Example:
    >>> from forensics.__main__ import run   # what the console script calls
"""

from __future__ import annotations

import sys

_BEFORE_WORK = "interrupted: before any work began; nothing was read or written\n"


def skip_iri_grammars() -> None:
    """Keep jsonschema from building the ``rfc3987_syntax`` IRI grammars in the CLI's process.

    altair imports jsonschema, whose format module imports ``rfc3987_syntax`` when it is installed
    (jupyterlab's ``jsonschema[format-nongpl]`` brings it): that builds ~35 Lark parsers at import,
    1.2 CPU-s and 1.5 M mmap/munmap calls (6 s of system time measured here) in every command that
    draws a chart (python-jsonschema/jsonschema#1428). Nothing in this process checks the ``iri``
    format (altair validates specs without a format checker), so the checker is left out: only
    here, in the toolkit's own process, never when the library is imported into someone else's.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None: "not importable"


def run() -> None:
    """Import the CLI and run it; a Ctrl-C while its libraries load is one line and exit 130.

    The console script imports this module, not ``forensics.cli``: importing the CLI (click, the
    loaders, DuckDB's extensions; ~75 ms warm, seconds cold) happens here inside the guard, so no
    moment of the start-up prints a traceback. Nothing was opened or read yet: nothing to resume.

    Example:
        >>> run   # doctest: +ELLIPSIS
        <function run at ...>
    """
    skip_iri_grammars()
    try:
        from forensics.cli import main
    except KeyboardInterrupt:
        sys.stderr.write(_BEFORE_WORK)
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
