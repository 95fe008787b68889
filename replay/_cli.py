"""Deprecated entry point ``replay._cli:main`` (kept for one release, API.md "Additions").

Owns: forwarding to ``penguin.cli.main``.  Does not: anything else; the CLI lives in ``penguin``.
"""

from __future__ import annotations

import warnings


def main() -> None:
    """Run the ``penguin`` CLI from its old import path, with a deprecation warning."""
    warnings.warn(
        "replay._cli:main moved to penguin.cli:main; the old path goes away in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    # The one upward import, allowed by name in the import-linter contract for this release.
    from penguin.cli import main as cli_main

    cli_main()
