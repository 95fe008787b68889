"""The CLI's error type and its exit codes.

Owns: ``CliError`` (a one-line failure with its exit code) and turning every expected failure
into a one-line message on stderr and an exit code (0 ok, 1 the checked thing is bad, 2 usage or
input error, 130 interrupted).  Does not: decide what failed (the commands do).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from eventstore import SessionLocked, TraceError

from .terminal.console import err_console, quiet_stdout, warnings_reported
from .terminal.safe import safe

__all__ = ["CliError", "errors_to_exit_codes"]


class CliError(Exception):
    """A failure the CLI reports in one line on stderr and turns into an exit code."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@contextmanager
def errors_to_exit_codes(*, as_json: bool = False) -> Iterator[None]:
    """Turn expected failures into a one-line message on stderr and exit code 2.

    ``KeyboardInterrupt`` becomes exit 130.  ``PENGUIN_DEBUG=1`` re-raises, for a traceback.
    """
    import typer  # local: keeps this module importable without the CLI stack in tests

    debug = os.environ.get("PENGUIN_DEBUG") == "1"
    try:
        with warnings_reported():
            yield
        sys.stdout.flush()  # a closed pipe shows here at the latest, where it is handled
    except typer.Exit:
        raise
    except BrokenPipeError:
        # ``| head`` closed stdout: that is the reader's choice, not an error (exit 0).
        quiet_stdout()
        raise typer.Exit(0) from None
    except CliError as exc:
        _fail(exc.message)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except SessionLocked as exc:
        if debug:
            raise
        holder = f"process {exc.holder_pid}" if exc.holder_pid is not None else "another process"
        _fail(
            f"session {exc.session_id} is in use: locked by {holder} ({exc.path}); "
            "wait for it to finish or stop that process"
        )
        raise typer.Exit(2) from None
    except (OSError, ValueError, LookupError, TraceError, TypeError) as exc:
        if debug:
            raise
        _fail(str(exc) or type(exc).__name__)
        raise typer.Exit(2) from None
    except Exception as exc:
        if _sandbox_refused(exc):  # SPEC R-BOX-2: the session does not start
            _fail(str(exc))
            raise typer.Exit(2) from None
        if debug:
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (PENGUIN_DEBUG=1 shows a traceback)")
        raise typer.Exit(2) from None


def _fail(message: str) -> None:
    err_console().print("penguin: " + safe(message), style="red", soft_wrap=True)


def _sandbox_refused(exc: Exception) -> bool:
    """Whether ``exc`` is the engine's ``SandboxUnavailable``, without importing the engine
    into commands that never load it (start-up time, issue 18)."""
    engine = sys.modules.get("engine")
    return engine is not None and isinstance(exc, engine.SandboxUnavailable)
