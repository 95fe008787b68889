"""The ``penguin`` command line (SPEC §16): typer app, terminal rendering, follow, live runner.

Owns: the console entry point.  Does not: hold library behaviour (that is ``replay``).
"""

from __future__ import annotations

import gc

# Start-up (issue 18): the objects the CLI's modules create live until exit, so collecting while
# they load is wasted work (10-15 ms of a 0.1 s command); the collector is back on after.
_collecting = gc.isenabled()
gc.disable()
try:
    from ._app import app, main
finally:
    if _collecting:
        gc.enable()

__all__ = ["app", "main"]
