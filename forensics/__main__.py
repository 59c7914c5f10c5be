"""``python -m forensics`` runs the CLI."""

import sys

try:
    from forensics.cli import main
except KeyboardInterrupt:
    # Ctrl-C while the libraries load: nothing was opened or read yet, so nothing needs resuming
    sys.stderr.write("interrupted: before any work began; nothing was read or written\n")
    sys.exit(130)

main()
