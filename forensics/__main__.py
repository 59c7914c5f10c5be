"""The ``forensics`` console script and ``python -m forensics``: the CLI behind an interrupt guard.

Example:
    >>> from forensics.__main__ import run   # what the console script calls
"""

from __future__ import annotations

import sys

_BEFORE_WORK = "interrupted: before any work began; nothing was read or written\n"


def run() -> None:
    """Import the CLI and run it; a Ctrl-C while its libraries load is one line and exit 130.

    The console script imports this module, not ``forensics.cli``: importing the CLI (click, the
    loaders, DuckDB's extensions; ~75 ms warm, seconds cold) happens here inside the guard, so no
    moment of the start-up prints a traceback. Nothing was opened or read yet: nothing to resume.

    Example:
        >>> run   # doctest: +ELLIPSIS
        <function run at ...>
    """
    try:
        from forensics.cli import main
    except KeyboardInterrupt:
        sys.stderr.write(_BEFORE_WORK)
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
