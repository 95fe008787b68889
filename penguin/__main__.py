"""``python -m penguin`` runs the command line."""

from __future__ import annotations

from penguin.cli import main

main()
