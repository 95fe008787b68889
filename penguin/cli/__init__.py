"""The ``penguin`` command line (SPEC §16).

Owns: the console entry point.  Does not: hold library behaviour (that is ``replay``).

Where things are:

- ``_app`` — the typer app, the global options and the registry of commands (each imported only
  when it runs or help lists it);
- ``commands/`` — one module per command: its options and its wiring, nothing else;
- ``views/`` — records and projections turned into text (inspect, the live stream, the
  transcript, stats, labels, one trace point);
- ``tasks/`` — running a task from the terminal: the model and approval choice, goal mode, the
  live driver;
- ``terminal/`` — consoles that never interpret untrusted text, escaping, library logs;
- ``targets`` — the one resolver of a session argument (id, prefix or short id, path, latest);
  ``tracefiles`` — trace files named on the command line; ``listing`` — the sessions of a root;
  ``globalopts``, ``errors``, ``config``, ``options``, ``follow``, ``chat``, ``diagnose``.
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
