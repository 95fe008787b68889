"""The on-disk layout of a data root (SPEC §4.1, R-ROOT-1..10).

Owns: where things live — ``<home>/<project>/agents/<agent>/{agent_state,traces,scratchpad}``,
trace file names, session ids, finding a session's files, listing sessions, creating private
directories — and the checks that keep every path under the root.  Does not: open trace files
for writing (``_writer``), decide what a record means (the projections), or read more of a trace
than it needs to tell crash residue and empty sessions apart (``_reader``).

Safety (R-ROOT-6, R-ROOT-9): every id or name that becomes a path component is checked with
``validate_id``; every path handed out or walked is resolved and must stay under the resolved
root, so a symlink under the root that points outside it raises ``ValueError`` — also while
searching, rather than being silently skipped, so that the refusal is visible.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, NamedTuple

from ._codec import decode
from ._dirs import make_private_dirs
from ._discovery import OutsideCheck as _OutsideCheck
from ._discovery import OutsideRootWarning
from ._exceptions import ArchiveError
from ._listing import Listed, SessionFiles, latest_stat, list_directory
from ._lock import take_lock
from ._names import parse_trace_name, trace_file_name
from ._private import write_private
from ._reader import MAX_LINE_BYTES, _scan, file_index
from ._residue import ResidueCheck
from ._schema import OmniMessage
from .archive import RECORD_SUFFIX, ArchiveWarning, fetch_missing

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_PROJECT",
    "DataRoot",
    "OutsideRootWarning",
    "SessionInfo",
    "SessionLocation",
    "validate_id",
]

DEFAULT_PROJECT: Final = "default_project"
DEFAULT_AGENT: Final = "default_agent"

_ID: Final = re.compile(r"^[A-Za-z0-9_-]{1,128}\Z")
_SESSION_ID: Final = re.compile(
    r"^session-(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-[0-9a-f]{8}\Z"
)
# The residue check and the session listing read only the first records of a file: one small
# chunk holds a session_meta line (a longer one spans chunks, which the scanner handles).
_PEEK_BYTES: Final = 4 * 1024


def validate_id(value: str, *, what: str = "id") -> str:
    """Return ``value`` when it may be a path component (R-ROOT-6), else raise ``ValueError``
    naming ``what`` and the value."""
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError(
            f"invalid {what}: {value!r} (must match ^[A-Za-z0-9_-]{{1,128}}$: "
            "letters, digits, '_' and '-', no separators, no '..')"
        )
    return value


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session as ``DataRoot.sessions()`` lists it.  ``created`` is the local time encoded
    in the id (R-ROOT-5), or, for an id not of that form, the first file's modification time;
    ``files`` as ``DataRoot.trace_files`` lists them."""

    session_id: str
    project: str
    agent: str
    created: datetime
    files: list[Path] = field(default_factory=list)


class SessionLocation(NamedTuple):
    """Where a session lives: ``date`` is the name of its ``traces/<yyyy-mm-dd>`` directory."""

    project: str
    agent: str
    date: str


class DataRoot:
    """Paths of a data root (R-ROOT-1): ``home`` defaults to ``$PENGUIN_HOME``, else
    ``~/.penguin/data``.  Methods that take only a session id search every
    ``<project>/agents/<agent>/traces`` under the root (R-ROOT-7); ``project=``/``agent=`` narrow
    the search.  Nothing here creates files except ``ensure_dir`` and ``write_private``."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        if home is None:
            env = os.environ.get("PENGUIN_HOME")
            home = env if env else Path("~/.penguin/data")
        self.home: Path = Path(home).expanduser().absolute()

    def __repr__(self) -> str:
        return f"DataRoot({str(self.home)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataRoot) and other.home == self.home

    def __hash__(self) -> int:
        return hash(self.home)

    # ----------------------------------------------------------------------- paths

    def agent_dir(self, project: str = DEFAULT_PROJECT, agent: str = DEFAULT_AGENT) -> Path:
        """``<home>/<project>/agents/<agent>`` (R-ROOT-2)."""
        path = (
            self.home
            / validate_id(project, what="project")
            / "agents"
            / validate_id(agent, what="agent")
        )
        return self._inside(path)

    def traces_dir(self, project: str = DEFAULT_PROJECT, agent: str = DEFAULT_AGENT) -> Path:
        return self._inside(self.agent_dir(project, agent) / "traces")

    def agent_state(self, project: str = DEFAULT_PROJECT, agent: str = DEFAULT_AGENT) -> Path:
        """The ``agent_state`` directory recorded in ``session_meta`` (need not exist)."""
        return self._inside(self.agent_dir(project, agent) / "agent_state")

    def workspaces_dir(self, project: str = DEFAULT_PROJECT, agent: str = DEFAULT_AGENT) -> Path:
        return self._inside(self.agent_dir(project, agent) / "workspaces")

    def scratchpad(
        self, session_id: str, *, project: str | None = None, agent: str | None = None
    ) -> Path:
        """``<agent>/scratchpad/<session_id>``: of the agent that holds the session when it
        exists (searched, narrowed by ``project``/``agent``), else of the given or default
        project and agent.  An id found under two agents raises ``LookupError``."""
        validate_id(session_id, what="session id")
        try:
            loc = self.locate(session_id, project=project, agent=agent)
        except FileNotFoundError:
            proj, ag = project or DEFAULT_PROJECT, agent or DEFAULT_AGENT
        else:
            proj, ag = loc.project, loc.agent
        return self._inside(self.agent_dir(proj, ag) / "scratchpad" / session_id)

    def new_session_id(self, now: datetime | None = None) -> str:
        """``session-YYYY-MM-DD-HH-mm-ss-<8 lowercase hex>`` in local time (R-ROOT-5).  An aware
        ``now`` is converted to local time; a naive one is taken as local time."""
        if now is None:
            now = datetime.now()
        elif now.tzinfo is not None:
            now = now.astimezone().replace(tzinfo=None)
        return f"session-{now:%Y-%m-%d-%H-%M-%S}-{os.urandom(4).hex()}"

    def trace_path(
        self,
        session_id: str,
        index: int,
        *,
        project: str = DEFAULT_PROJECT,
        agent: str = DEFAULT_AGENT,
        date: str,
    ) -> Path:
        """``<traces>/<date>/<session_id>_<NNN>.jsonl``, NNN zero-padded to at least 3 digits
        (R-ROOT-4); ``date`` is the ``yyyy-mm-dd`` directory of the session (R-ROOT-3)."""
        validate_id(session_id, what="session id")
        validate_id(date, what="date directory")
        if isinstance(index, bool) or not isinstance(index, int) or index < 1:
            raise ValueError(f"invalid trace file index: {index!r} (must be an int >= 1)")
        name = trace_file_name(session_id, index)
        return self._inside(self.traces_dir(project, agent) / date / name)

    def lock_path(
        self,
        session_id: str,
        *,
        project: str | None = None,
        agent: str | None = None,
        date: str | None = None,
    ) -> Path:
        """``<traces>/<date>/<session_id>.lock`` (R-TRACE-18).  Without ``date`` the session is
        located (it must exist); with it, the path is built from the given or default project
        and agent without touching the disk."""
        validate_id(session_id, what="session id")
        if date is None:
            project, agent, date = self.locate(session_id, project=project, agent=agent)
        else:
            validate_id(date, what="date directory")
        traces = self.traces_dir(project or DEFAULT_PROJECT, agent or DEFAULT_AGENT)
        return self._inside(traces / date / f"{session_id}.lock")

    # ----------------------------------------------------------------------- search

    def trace_files(
        self, session_id: str, *, project: str | None = None, agent: str | None = None
    ) -> list[Path]:
        """Every trace file of the session, sorted by index (R-ROOT-4, R-READ-5).

        Raises ``FileNotFoundError("Session does not exist: <id>")`` when there is none, and
        ``LookupError`` when the id exists under two agents (R-ROOT-7)."""
        return self._find(session_id, project=project, agent=agent)[1]

    def locate(
        self, session_id: str, *, project: str | None = None, agent: str | None = None
    ) -> SessionLocation:
        """``(project, agent, date)`` of an existing session; ``date`` is the directory of its
        highest-index file (all files share it, R-ROOT-3)."""
        return self._find(session_id, project=project, agent=agent)[0]

    def latest_trace(
        self, session_id: str, *, project: str | None = None, agent: str | None = None
    ) -> Path:
        """The highest-index file that is not crash residue (R-ROOT-10): the highest file is
        skipped when it holds no decodable ``session_meta``, or when its index is > 1 and it
        holds nothing but its rotation head.  ``FileNotFoundError`` when no file is left."""
        return self.session_files(session_id, project=project, agent=agent)[1]

    def session_files(
        self, session_id: str, *, project: str | None = None, agent: str | None = None
    ) -> tuple[list[Path], Path]:
        """``(trace_files(...), latest_trace(...))`` from one search of the root: the files up
        to and including the latest one are what resume folds."""
        files = self.trace_files(session_id, project=project, agent=agent)
        used = files[:-1] if _is_residue(files[-1]) else files
        if not used:
            raise FileNotFoundError(f"Session does not exist: {session_id}")
        return files, used[-1]

    def sessions(
        self, *, project: str | None = None, agent: str | None = None, fetch: bool = True
    ) -> list[SessionInfo]:
        """Every session under the root (or the given project/agent), newest first.  A session
        none of whose files holds a ``session_meta`` is not listed (R-ROOT-10); ``*.lock`` and
        other files that are not ``<id>_<NNN>.jsonl`` are ignored (R-TRACE-18a).  An entry
        whose symlink leads outside the root is left out with an ``OutsideRootWarning``.

        Archived files are fetched back first; with ``fetch=False`` they are listed where they
        were and left away (a host that needs only the ids, or that knows their content already:
        ``eventstore.archive.archived_entry``), and count as holding a ``session_meta``."""
        grouped: dict[tuple[str, str, str], list[tuple[int, str, Path]]] = {}
        archived: Literal["fetch", "list"] = "fetch" if fetch else "list"
        for proj, ag, date, sid, index, path in self._walk(
            project, agent, skip_outside=True, archived=archived
        ):
            grouped.setdefault((proj, ag, sid), []).append((index, date, path))
        infos: list[SessionInfo] = []
        for (proj, ag, sid), entries in grouped.items():
            files = [path for _, _, path in sorted(entries)]
            if not any(
                _peek(f, want="session_meta") or (not fetch and not f.exists()) for f in files
            ):
                continue
            infos.append(SessionInfo(sid, proj, ag, _created(sid, files[0]), files))
        infos.sort(key=lambda s: (s.created, s.session_id), reverse=True)
        return infos

    def listing(
        self, *, project: str | None = None, agent: str | None = None
    ) -> list[SessionFiles]:
        """Every session's trace files under the root (or the given project/agent) and the
        stat of its latest file, in no particular order, opening no trace file: one directory
        listing per ``traces/<date>`` directory and one ``stat`` per session.  What a host
        keeping a projection of the traces compares with what it folded, to find the sessions
        that changed; ``session_info`` then tells whether one is a session (``sessions()``
        lists the same ones).  Rotated files below the latest are closed (R-TRACE-4): they are
        named, not stat-ed.  Archived files are listed where they were, with their record's
        size and mtime.  The symlink rule is ``sessions()``'s."""
        check = _OutsideCheck(self.home.resolve(), skip=True)
        out: dict[tuple[str, str, str], SessionFiles] = {}
        for proj, ag, _date, directory in self._trace_dirs(project, agent, check):
            for sid, files in list_directory(directory, check).items():
                key = (proj, ag, sid)
                if key in out:
                    # Files in two date directories (not the layout, R-ROOT-3, but listed as
                    # ``sessions()`` lists them): merged, sorted by (index, date, path).
                    files = files + [_relisted(p) for p in out[key].files]
                    files.sort(key=lambda f: (f[0], Path(f[1]).parent.name, f[1]))
                elif len(files) > 1:
                    files.sort(key=lambda f: f[:2])
                out[key] = SessionFiles(
                    proj, ag, sid, tuple([f[1] for f in files]), latest_stat(files[-1])
                )
        return list(out.values())

    def session_info(self, listed: SessionFiles, *, fetch: bool = True) -> SessionInfo | None:
        """The ``SessionInfo`` that ``sessions(fetch=fetch)`` lists for a session of
        ``listing()``, or ``None`` when none of its files holds a ``session_meta`` (R-ROOT-10;
        reads only the first lines).  With ``fetch``, archived files are fetched back first
        (one that cannot be is left out, with an ``ArchiveWarning``)."""
        files = [Path(p) for p in listed.files]
        if fetch and not all(f.exists() for f in files):
            try:
                files = self.trace_files(
                    listed.session_id, project=listed.project, agent=listed.agent
                )
            except ArchiveError as exc:
                warnings.warn(f"skipped {listed.session_id}: {exc}", ArchiveWarning, stacklevel=2)
                files = [f for f in files if f.exists()]
            except FileNotFoundError:
                return None
            if not files:
                return None
        if not any(_peek(f, want="session_meta") or (not fetch and not f.exists()) for f in files):
            return None
        return SessionInfo(
            listed.session_id,
            listed.project,
            listed.agent,
            _created(listed.session_id, files[0]),
            files,
        )

    def latest_session(
        self, project: str = DEFAULT_PROJECT, agent: str = DEFAULT_AGENT
    ) -> str | None:
        """R-ROOT-8: the lexically greatest session id of the agent whose trace holds a
        ``session_meta`` and at least one other record; ``None`` when there is none."""
        by_id: dict[str, list[tuple[int, str, Path]]] = {}
        for _, _, date, sid, index, path in self._walk(project, agent, skip_outside=True):
            by_id.setdefault(sid, []).append((index, date, path))
        for sid in sorted(by_id, reverse=True):
            files = [path for _, _, path in sorted(by_id[sid])]
            if any(_peek(f, want="session_meta") for f in files) and any(
                _peek(f, want="other") for f in files
            ):
                return sid
        return None

    # ----------------------------------------------------------------------- creation

    def ensure_dir(self, path: str | os.PathLike[str]) -> Path:
        """Create ``path`` and any missing parents with mode 0700 whatever the umask
        (R-ROOT-9): each level this call creates is ``chmod``-ed after ``mkdir``; levels that
        already exist are left alone.  ``path`` must be under the root."""
        target = self._inside(Path(path) if Path(path).is_absolute() else self.home / path)
        return make_private_dirs(target)

    def write_private(self, path: str | os.PathLike[str], data: bytes) -> Path:
        """Replace the file ``path`` (under the root) with ``data``, mode 0600 whatever the
        umask, parents created 0700 (R-ROOT-9): ``eventstore.write_private`` after checking
        that the directory is under the root.  A reader sees the old content or the new, never
        a part; a symlink at ``path`` is replaced, never followed."""
        target = Path(path) if Path(path).is_absolute() else self.home / path
        self.ensure_dir(target.parent)
        return write_private(target, data)

    # ----------------------------------------------------------------------- removal

    def delete_session(
        self,
        session_id: str,
        *,
        project: str | None = None,
        agent: str | None = None,
        missing_ok: bool = False,
    ) -> list[Path]:
        """Delete a session: its trace files, their summaries sidecar, its archive record, its
        lock file and its scratchpad directory; returns what was removed (archived copies on
        object storage are left there).  Done while holding the session lock,
        so a session a writer has open raises ``SessionLocked`` and nothing is removed, and no
        writer can open it meanwhile.  An unknown session raises ``FileNotFoundError`` (with
        ``missing_ok``, its scratchpad alone is removed).  A symlinked scratchpad is not
        entered (R-ROOT-9)."""
        from ._summaries import sidecar_path

        validate_id(session_id, what="session id")
        pad = self.scratchpad(session_id, project=project, agent=agent)
        directory: Path | None = None
        try:
            loc, files = self._local_files(session_id, project=project, agent=agent)
            directory = self.traces_dir(loc.project, loc.agent) / loc.date
        except FileNotFoundError:
            if not missing_ok:
                raise
            files = []
        removed: list[Path] = []
        lock = directory / f"{session_id}.lock" if directory is not None else None
        fd = take_lock(lock, session_id=session_id, sync=False) if lock is not None else -1
        try:
            extras = [sidecar_path(files[0])] if files else []
            if directory is not None:
                # Archived copies stay where they went; the record of them goes with the session.
                extras.append(directory / f"{session_id}{RECORD_SUFFIX}")
            for path in [*files, *extras]:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                removed.append(path)
            if pad.is_dir() and not pad.is_symlink():
                shutil.rmtree(pad, ignore_errors=True)
                removed.append(pad)
            if lock is not None:
                lock.unlink(missing_ok=True)
                removed.append(lock)
        finally:
            if fd >= 0:
                os.close(fd)
        return removed

    # ----------------------------------------------------------------------- internals

    def _inside(self, path: Path) -> Path:
        """``path`` unchanged, after checking that it resolves to a place under the root."""
        root = self.home.resolve()
        resolved = path.resolve()
        if resolved != root and not resolved.is_relative_to(root):
            raise ValueError(f"path resolves outside the data root {root}: {path} -> {resolved}")
        return path

    def _find(
        self, session_id: str, *, project: str | None, agent: str | None
    ) -> tuple[SessionLocation, list[Path]]:
        validate_id(session_id, what="session id")
        found: dict[tuple[str, str], list[tuple[int, str, Path]]] = {}
        for proj, ag, date, sid, index, path in self._walk(project, agent, session_id):
            if sid == session_id:
                found.setdefault((proj, ag), []).append((index, date, path))
        if not found:
            raise FileNotFoundError(f"Session does not exist: {session_id}")
        if len(found) > 1:
            where = ", ".join(f"{p}/{a}" for p, a in sorted(found))
            raise LookupError(
                f"session {session_id} exists under several agents ({where}); "
                "pass project= and agent= to choose"
            )
        ((proj, ag), entries) = next(iter(found.items()))
        entries.sort()
        return SessionLocation(proj, ag, entries[-1][1]), [path for _, _, path in entries]

    def _walk(
        self,
        project: str | None,
        agent: str | None,
        session_id: str | None = None,
        *,
        skip_outside: bool = False,
        archived: Literal["fetch", "list", "skip"] = "fetch",
    ) -> Iterator[tuple[str, str, str, str, int, Path]]:
        """``(project, agent, date, session_id, index, path)`` for every trace file under
        ``<project>/agents/<agent>/traces/<date>/`` (only of ``session_id`` when given).

        A symlink that resolves outside the root raises ``ValueError``; with ``skip_outside``
        (listings) it is left out with an ``OutsideRootWarning`` instead, so that one bad link
        hides one entry, not the whole listing.  Only symlinks are resolved: a plain entry of a
        directory already checked is inside, which keeps a walk linear and cheap.

        A file that a ``<session_id>.archived.json`` record of the directory names and that is
        missing is fetched back first (``eventstore.archive``), so every reader sees archived
        files as if they had never left; one that cannot be fetched raises ``ArchiveError``
        (with ``skip_outside``, a listing: an ``ArchiveWarning``).  ``archived="list"`` yields
        such files without fetching them, ``"skip"`` leaves them out (the local files only)."""
        check = _OutsideCheck(self.home.resolve(), skip=skip_outside)
        for proj, ag, date, directory in self._trace_dirs(project, agent, check):
            checked = False
            entries = self._files(directory)
            for name, path, link in entries:
                parsed = parse_trace_name(name)
                if parsed is None or session_id not in (None, parsed[0]):
                    continue
                # The directory resolves under the root once; a file in it that is not a
                # symlink is then under the root too (resolving every file of a long session
                # dominated finding it).
                if not checked:
                    if not check(directory):
                        break
                    checked = True
                if link and not check(path):
                    continue
                yield proj, ag, date, parsed[0], parsed[1], path
            if archived != "skip":
                for sid, path in self._archived(
                    directory,
                    entries,
                    session_id,
                    check,
                    skip=skip_outside,
                    fetch=archived == "fetch",
                ):
                    yield proj, ag, date, sid, file_index(path) or 0, path

    def _trace_dirs(
        self, project: str | None, agent: str | None, check: _OutsideCheck
    ) -> Iterator[tuple[str, str, str, Path]]:
        """``(project, agent, date, directory)`` of every ``traces/<date>`` directory (of the
        given project/agent), sorted; symlinked levels follow ``check``."""
        projects = (
            [validate_id(project, what="project")]
            if project is not None
            else self._dirs(self.home, check)
        )
        for proj in projects:
            agents_dir = self.home / proj / "agents"
            agents = (
                [validate_id(agent, what="agent")]
                if agent is not None
                else self._dirs(agents_dir, check)
            )
            for ag in agents:
                traces = agents_dir / ag / "traces"
                for date in self._dirs(traces, check):
                    yield proj, ag, date, traces / date

    def _archived(
        self,
        directory: Path,
        entries: list[tuple[str, Path, bool]],
        session_id: str | None,
        check: _OutsideCheck,
        *,
        skip: bool,
        fetch: bool,
    ) -> Iterator[tuple[str, Path]]:
        """``(session_id, path)`` of the archived files of ``directory`` fetched back now."""
        records = [n for n, _, _ in entries if n.endswith(RECORD_SUFFIX)]
        if not records or not check(directory):
            return
        present = {n for n, _, _ in entries}
        for name in records:
            sid = name.removesuffix(RECORD_SUFFIX)
            if session_id not in (None, sid):
                continue
            try:
                fetched = fetch_missing(directory, sid, present, fetch=fetch)
            except ArchiveError as exc:
                if not skip:
                    raise
                warnings.warn(f"skipped {sid}: {exc}", ArchiveWarning, stacklevel=4)
                continue
            for path in fetched:
                yield sid, path

    def _local_files(
        self, session_id: str, *, project: str | None, agent: str | None
    ) -> tuple[SessionLocation, list[Path]]:
        """``(location, the session's files on local disk)``, sorted by index, fetching
        nothing back; a session all of whose files are archived has ``[]`` (its location from
        its archive record).  ``FileNotFoundError`` for an unknown session."""
        validate_id(session_id, what="session id")
        found: dict[tuple[str, str, str], list[tuple[int, Path]]] = {}
        for proj, ag, date, _sid, index, path in self._walk(
            project, agent, session_id, archived="skip"
        ):
            found.setdefault((proj, ag, date), []).append((index, path))
        if not found:
            for proj, ag, date in self._record_dirs(session_id, project, agent):
                found.setdefault((proj, ag, date), [])
        if not found:
            raise FileNotFoundError(f"Session does not exist: {session_id}")
        if len(found) > 1:
            where = ", ".join(f"{p}/{a}/{d}" for p, a, d in sorted(found))
            raise LookupError(
                f"session {session_id} exists in several places ({where}); "
                "pass project= and agent= to choose"
            )
        ((proj, ag, date), files) = next(iter(found.items()))
        return SessionLocation(proj, ag, date), [p for _, p in sorted(files)]

    def _record_dirs(
        self, session_id: str, project: str | None, agent: str | None
    ) -> Iterator[tuple[str, str, str]]:
        """``(project, agent, date)`` of every directory holding the session's archive record."""
        check = _OutsideCheck(self.home.resolve(), skip=False)
        projects = [project] if project is not None else self._dirs(self.home, check)
        for proj in projects:
            agents_dir = self.home / proj / "agents"
            agents = [agent] if agent is not None else self._dirs(agents_dir, check)
            for ag in agents:
                traces = agents_dir / ag / "traces"
                for date in self._dirs(traces, check):
                    if (traces / date / f"{session_id}{RECORD_SUFFIX}").is_file():
                        yield proj, ag, date

    def _dirs(self, parent: Path, check: _OutsideCheck | None = None) -> list[str]:
        """Names of the subdirectories of ``parent`` that are valid ids, sorted; a symlinked
        one must resolve under the root.  A missing ``parent`` has none."""
        check = check or _OutsideCheck(self.home.resolve(), skip=False)
        if parent.is_symlink() and not check(parent):
            return []
        try:
            entries = list(os.scandir(parent))
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = []
        for entry in entries:
            if not _ID.match(entry.name):
                continue
            if entry.is_symlink() and not check(Path(entry.path)):
                continue
            if entry.is_dir():
                names.append(entry.name)
        return sorted(names)

    def _files(self, parent: Path) -> list[tuple[str, Path, bool]]:
        """``(name, path, is_symlink)`` of the regular files (or links to them) in ``parent``."""
        try:
            entries = list(os.scandir(parent))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted((e.name, Path(e.path), e.is_symlink()) for e in entries if e.is_file())


def _relisted(path: str) -> Listed:
    """A file ``listing()`` met in another directory, to be sorted again (and stat-ed, should
    it be the latest)."""
    entry = next((e for e in os.scandir(Path(path).parent) if e.path == path), None)
    return (file_index(Path(path)) or 0, path, entry)


# --------------------------------------------------------------------------- file peeks


def _is_residue(path: Path) -> bool:
    """R-ROOT-10 crash residue: no decodable ``session_meta``, or (index > 1) nothing but the
    rotation head.  Reads only as far as it takes to decide."""
    check = ResidueCheck(file_index(path) or 1)
    with closing(_records(path)) as records:
        return not any(check.feed(record) for record in records)


def _peek(path: Path, *, want: Literal["session_meta", "other"]) -> bool:
    """Whether the file holds a ``session_meta`` (``want="session_meta"``) or a record of any
    other type (``want="other"``); stops at the first hit."""
    meta = want == "session_meta"
    if meta and _first_is_meta(path):
        return True  # the common case, without starting the scanner
    with closing(_records(path)) as records:
        return any((record.type == "session_meta") == meta for record in records)


def _first_is_meta(path: Path) -> bool:
    """Whether the file's first line is a complete, decodable ``session_meta`` record."""
    try:
        with open(path, "rb") as f:
            head = f.read(_PEEK_BYTES)
    except OSError:
        return False
    line, newline, _rest = head.removeprefix(b"\xef\xbb\xbf").partition(b"\n")
    if not newline:
        return False
    try:
        return decode(line).type == "session_meta"
    except Exception:
        return False


def _records(path: Path) -> Generator[OmniMessage, None, None]:
    try:
        batches = _scan(path, max_line_bytes=MAX_LINE_BYTES, chunk_bytes=_PEEK_BYTES)
        with closing(batches):
            for _first, records, _gaps, _diags in batches:
                yield from records
    except FileNotFoundError:
        return  # removed while we looked: it holds nothing


def _created(session_id: str, first_file: Path) -> datetime:
    m = _SESSION_ID.match(session_id)
    if m is not None:
        try:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups())
            return datetime(y, mo, d, h, mi, sec)
        except ValueError:
            pass  # e.g. month 13: fall back like any foreign id
    try:
        return datetime.fromtimestamp(first_file.stat().st_mtime)
    except OSError:
        return datetime.fromtimestamp(0)
