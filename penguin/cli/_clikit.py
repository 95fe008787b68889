"""Plumbing shared by the ``penguin`` commands.

Owns: the global options (``Globals``), the CLI's error type and its exit codes, consoles that
never interpret untrusted text, JSON output on stdout, telling a trace file from anything else,
and resolving a ``SESSION_ID|PATH`` argument to trace files.  Does not: print command results
(the command modules do) or read records beyond the first lines of a file.
"""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

# Cheap names only (eventstore loads a name's module on first use): `--help` needs no codec.
from eventstore import SessionLocked, TraceError, parse_trace_name

from ._safe import safe, safe_json

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from eventstore import DataRoot


__all__ = [
    "CliError",
    "Globals",
    "Target",
    "console",
    "err_console",
    "errors_to_exit_codes",
    "find_trace_files",
    "globals_of",
    "hoist_globals",
    "quiet_stdout",
    "match_session_id",
    "out_console",
    "resolve_target",
    "sniff_trace",
    "trace_name",
    "warn",
    "warnings_reported",
    "workspace_dir",
    "write_json",
]

_SNIFF_BYTES: Final = 64 * 1024
_SNIFF_LINES: Final = 64
_PIPE_WIDTH: Final = 1000


class CliError(Exception):
    """A failure the CLI reports in one line on stderr and turns into an exit code."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


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
        if debug:
            raise
        _fail(f"internal error: {type(exc).__name__}: {exc} (PENGUIN_DEBUG=1 shows a traceback)")
        raise typer.Exit(2) from None


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit cannot fail on a closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


_GLOBAL_VALUES: Final = ("--home", "--project", "--agent")
_GLOBAL_FLAGS: Final = ("--init",)


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


def _fail(message: str) -> None:
    err_console().print("penguin: " + safe(message), style="red", soft_wrap=True)


def workspace_dir(path: Path, *, hint: str = "") -> Path:
    """``path`` after the engine's workspace check (R-SESSION-1); its failure as a ``CliError``."""
    from engine import check_workspace

    try:
        check_workspace(path)
    except OSError as exc:
        raise CliError(safe(str(exc)) + hint) from exc
    return path


# --------------------------------------------------------------------------- trace files


trace_name = parse_trace_name  # the one spelling lives in eventstore (R-ROOT-4)


def sniff_trace(path: Path) -> None:
    """Raise ``CliError`` (exit 2) unless ``path`` looks like a trace file.

    A trace is UTF-8 text without NUL bytes in which one of the first complete non-blank lines
    decodes as an OmniMessage record.  An empty file is a (crash-residue) trace; a file whose
    first line is longer than the sniffed prefix passes when it starts like a JSON object.
    """
    from eventstore import decode

    shown = safe(str(path), keep_newlines=False)
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
            more = bool(f.read(1))
    except IsADirectoryError:
        raise CliError(f"{shown}: is a directory") from None
    except PermissionError:
        raise CliError(f"{shown}: permission denied") from None
    if not head:
        return
    if b"\x00" in head:
        raise CliError(f"{shown}: binary file, not a trace")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=not more)
    except UnicodeDecodeError:
        raise CliError(f"{shown}: not UTF-8 text, not a trace") from None
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    *lines, tail = head.split(b"\n")  # ``tail``: unterminated (torn, or cut by the limit)
    complete = [line for line in lines if line.strip()][:_SNIFF_LINES]
    for line in complete:
        try:
            decode(line.strip())
        except Exception:
            continue
        return
    if not complete and tail.lstrip().startswith(b"{"):
        return  # a torn first record, or one longer than the sniffed prefix
    raise CliError(f"{shown}: not a trace (no line is an OmniMessage record)")


def find_trace_files(directory: Path) -> list[Path]:
    """Every ``*.jsonl`` file under ``directory``, sorted.  Symlinked directories are not
    entered, and a symlinked file that resolves outside ``directory`` is left out with a
    warning on stderr (R-ROOT-9: nothing outside is read through a link)."""
    base = directory.resolve()
    found: list[Path] = []
    for parent, _dirs, names in os.walk(directory, followlinks=False):
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            path = Path(parent) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(base):
                    warn(f"skipped {path}: a symlink to {target}, outside {directory}")
                    continue
            if path.is_file():
                found.append(path)
    return sorted(found)


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


@dataclass(slots=True)
class Target:
    """What a ``SESSION_ID|PATH`` argument named.

    ``session_id`` is set for a session found in the data root (``files`` are then all its
    files) and for a directory or file whose names carry one session id.
    """

    files: list[Path]
    session_id: str | None = None
    project: str | None = None
    agent: str | None = None
    label: str = ""


def _exists(root: DataRoot, session_id: str, g: Globals) -> bool:
    try:
        root.trace_files(session_id, project=g.project, agent=g.agent)
    except (FileNotFoundError, LookupError):
        return False
    return True


def _looks_like_id(text: str) -> bool:
    from eventstore import validate_id

    try:
        validate_id(text, what="session id")
    except ValueError:
        return False
    return True


def resolve_target(arg: str, g: Globals) -> Target:
    """A session id in the data root, a trace file, or a directory holding one session's files.

    Exit-2 failures: a missing path, an unknown session, a directory without trace files or
    with several sessions, a file that is not a trace.
    """
    path = Path(arg)
    shown = safe(arg, keep_newlines=False)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CliError(f"{shown}: no trace files (*.jsonl) in this directory")
        ids = sorted({(trace_name(p) or (p.stem, 0))[0] for p in files})
        if len(ids) > 1:
            listed = ", ".join(safe(i, keep_newlines=False) for i in ids[:5])
            more = ", …" if len(ids) > 5 else ""
            raise CliError(
                f"{shown}: holds {len(ids)} sessions ({listed}{more}); name one session or file"
            )
        for p in files:
            sniff_trace(p)
        files.sort(key=lambda p: (trace_name(p) or ("", 0))[1])
        return Target(files=files, session_id=ids[0], label=str(path))
    if path.exists():
        sniff_trace(path)
        name = trace_name(path)
        return Target(files=[path], session_id=name[0] if name else None, label=str(path))
    if _looks_like_id(arg):
        root = g.root()
        if not _exists(root, arg, g):
            arg = match_session_id(root, arg, g) or arg
        try:
            files = root.trace_files(arg, project=g.project, agent=g.agent)
            location = root.locate(arg, project=g.project, agent=g.agent)
        except FileNotFoundError:
            raise CliError(
                f"unknown session: {shown} (no such session under {safe(str(root.home))}, "
                "and no such file)"
            ) from None
        return Target(
            files=files,
            session_id=arg,
            project=location.project,
            agent=location.agent,
            label=arg,
        )
    raise CliError(f"{shown}: no such file or directory")


def match_session_id(root: DataRoot, arg: str, g: Globals) -> str | None:
    """The one session of the root whose id starts with ``arg``, or whose short id (the last 8
    characters, as listings show it) is ``arg``; None when there is none; ``CliError`` when
    several match.  One walk of the root."""
    ids = sorted({i.session_id for i in root.sessions(project=g.project, agent=g.agent)})
    found = [sid for sid in ids if sid.startswith(arg)] or [sid for sid in ids if sid[-8:] == arg]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(
            f"session id {safe(arg)} is ambiguous: it matches {len(found)} sessions ({shown})"
        )
    return found[0] if found else None


def latest_session_id(g: Globals) -> str:
    """The most recently active top-level session of the project/agent (issue 15 item 7)."""
    from ._listing import resolve_session_id  # the listing builds on this module

    return resolve_session_id(g, None)


def group_sessions(files: Iterable[Path]) -> dict[tuple[Path, str] | Path, list[Path]]:
    """Files grouped into sessions as the validator groups them: by the id in the name within
    one ``traces`` directory (the parent of the date directories)."""
    groups: dict[tuple[Path, str] | Path, list[Path]] = {}
    for q in files:
        info = trace_name(q)
        key: tuple[Path, str] | Path = (q.resolve().parent.parent, info[0]) if info else q
        groups.setdefault(key, []).append(q)
    return groups


def total_bytes(files: Sequence[Path]) -> int:
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            continue
    return size
