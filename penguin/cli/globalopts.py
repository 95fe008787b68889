"""The global options: ``--home``, ``--project``, ``--agent``, ``--init``.

Owns: ``Globals`` (the data root for reading or for recording, created on ``--init`` or a yes on
a terminal), finding them on a typer context, accepting them after the command
(``hoist_globals``) and the workspace check of a command that runs tasks.  Does not: define the
options (the app's callback does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .errors import CliError
from .terminal.console import err_console
from .terminal.safe import safe

if TYPE_CHECKING:
    import typer

    from eventstore import DataRoot

__all__ = ["Globals", "globals_of", "hoist_globals", "workspace_dir"]

_GLOBAL_VALUES: Final = ("--home", "--project", "--agent")

_GLOBAL_FLAGS: Final = ("--init",)


@dataclass(slots=True)
class Globals:
    """``--home/--project/--agent/--init``; ``home`` None means ``$PENGUIN_HOME`` or the
    default."""

    home: Path | None = None
    project: str | None = None
    agent: str | None = None
    init: bool = False

    def root(self) -> DataRoot:
        """The data root for reading: it must not be a file (an absent one holds nothing)."""
        from eventstore import DataRoot

        root = DataRoot(self.home)
        if root.home.exists() and not root.home.is_dir():
            raise CliError(
                f"data root {safe(str(root.home))} is a file, not a directory "
                "(--home DIR or $PENGUIN_HOME names the directory holding the sessions)"
            )
        return root

    def existing_root(self) -> DataRoot:
        """The data root for a command that reads it: it must exist — a mistyped ``--home``
        is an error, not an empty listing (as for ``run``)."""
        root = self.root()
        if not root.home.exists():
            raise CliError(
                f"no data root at {safe(str(root.home), keep_newlines=False)} "
                "(--home DIR or $PENGUIN_HOME names the directory holding the sessions; "
                "`penguin demo` or `penguin run --init` creates one)"
            )
        return root

    def writable_root(self) -> DataRoot:
        """The data root for a command that records: it must be a writable directory.  An
        absent one is created with ``--init``, or after a yes on a terminal."""
        root = self.root()
        home = root.home
        shown = safe(str(home), keep_newlines=False)
        if not home.exists():
            if not self.init and not _confirm_create(shown):
                raise CliError(
                    f"no data root at {shown}: pass --init to create it "
                    "(or --home DIR to use another)"
                )
            try:
                home.mkdir(parents=True, mode=0o700)
            except OSError as exc:
                raise CliError(f"cannot create the data root {shown}: {exc.strerror}") from None
        elif not os.access(home, os.W_OK | os.X_OK):
            raise CliError(f"data root {shown} is not writable")
        return root


def globals_of(ctx: typer.Context) -> Globals:
    """The global options the app's callback put on the context (the defaults without one)."""
    found = ctx.find_object(Globals)
    return found if found is not None else Globals()


def _confirm_create(shown: str) -> bool:
    """Ask on a terminal; never without one (a script must say ``--init``)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    err_console().print(f"Create a new data root at {shown}? [y/N] ", end="")
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in ("y", "yes")


def hoist_globals(
    args: list[str], own: Callable[[str], Collection[str]] = lambda _command: ()
) -> list[str]:
    """``args`` with the global options found after the command moved before it, so that
    ``penguin run --home DIR -m …`` means ``penguin --home DIR run -m …``.  Nothing after
    ``--`` moves, nor an option the command defines itself (``own(command)``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "--":
            return args
        i += 2 if args[i] in _GLOBAL_VALUES else 1
    if i >= len(args):
        return args
    mine = own(args[i])
    values = tuple(o for o in _GLOBAL_VALUES if o not in mine)
    flags = tuple(o for o in _GLOBAL_FLAGS if o not in mine)
    moved: list[str] = []
    kept: list[str] = []
    j = i + 1
    while j < len(args):
        arg = args[j]
        if arg == "--":
            kept += args[j:]
            break
        if arg in values and j + 1 < len(args):
            moved += args[j : j + 2]
            j += 2
            continue
        if arg.split("=", 1)[0] in values or arg in flags:
            moved.append(arg)
        else:
            kept.append(arg)
        j += 1
    return [*args[:i], *moved, args[i], *kept]


def workspace_dir(path: Path, *, hint: str = "") -> Path:
    """``path`` after the engine's workspace check (R-SESSION-1); its failure as a ``CliError``."""
    from engine import check_workspace

    try:
        check_workspace(path)
    except OSError as exc:
        raise CliError(safe(str(exc)) + hint) from exc
    return path
