"""Consoles for the ``penguin`` commands.

Owns: stdout and stderr consoles that never interpret untrusted text (no markup, emoji or
highlighting; ``NO_COLOR`` honoured; a pipe is not wrapped), one JSON document on stdout,
warning lines on stderr, and a closed stdout (``| head``) that ends quietly.  Does not: escape
text (``safe``) or decide what is printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from .safe import safe, safe_json

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "console",
    "err_console",
    "out_console",
    "quiet_stdout",
    "warn",
    "warnings_reported",
    "write_json",
]

_PIPE_WIDTH: Final = 1000


def _no_color() -> bool:
    # https://no-color.org: any non-empty value disables colour.
    return bool(os.environ.get("NO_COLOR"))


def out_console() -> Console:
    """stdout, with markup, emoji codes and highlighting off: text is printed as given.

    Piped output is not wrapped at 80 columns (tables keep one row per line for grep/awk).
    """
    from rich.console import Console

    class _PipeAware(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 here; a reader that stopped reading (``| head``) is no error:
            # the command's error handling turns this into a quiet exit 0.
            raise BrokenPipeError

    console = _PipeAware(
        highlight=False, markup=False, emoji=False, no_color=_no_color(), soft_wrap=False
    )
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = _PIPE_WIDTH
    return console


def console(*, stderr: bool = False) -> Console:
    return err_console() if stderr else out_console()


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False, emoji=False, no_color=_no_color())


def write_json(value: Any) -> None:
    """One JSON document on stdout, never through rich."""
    sys.stdout.write(safe_json(value) + "\n")
    sys.stdout.flush()


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit cannot fail on a closed pipe."""
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), sys.stdout.fileno())


def warn(message: str) -> None:
    """One warning line on stderr (terminal-safe)."""
    err_console().print("penguin: warning: " + safe(message), style="yellow", soft_wrap=True)


@contextmanager
def warnings_reported() -> Iterator[None]:
    """Print what the library warned about (e.g. a symlink out of the data root that a
    listing skipped) as warning lines on stderr, each once."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            yield
        finally:
            seen: set[str] = set()
            for w in caught:
                text = str(w.message)
                if not issubclass(w.category, UserWarning):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                elif text not in seen:
                    seen.add(text)
                    warn(text)
