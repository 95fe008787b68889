"""The ``penguin`` command line (SPEC §16): typer app, terminal rendering, follow, live runner.

Owns: the console entry point.  Does not: hold library behaviour (that is ``replay``).
"""

from __future__ import annotations

from ._cli import app, main

__all__ = ["app", "main"]
