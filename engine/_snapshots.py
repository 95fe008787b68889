"""Workspace snapshots taken by a running session (SPEC §27, R-SNAP-1).

Owns: ``SnapshotSettings`` (on/off and the caps), scanning a workspace the way git does —
``.gitignore`` files honoured, ``.git`` skipped, symlinks and special files not followed — into
a manifest, hashing only the files whose size or modification time moved since the previous
snapshot, and ``Snapshots``, which a session asks for a snapshot before the first tool of a turn
runs and at the end of a run whose tools ran; each becomes one ``workspace_snapshot`` record,
written after its blobs and manifest (a crash mid-snapshot leaves no record, only files that
``penguin gc`` removes).  Does not: restore anything (``replay.rewind_session``) or decide
retention.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
import pathspec

from eventstore import DataRoot, OmniMessage
from eventstore import builders as b
from eventstore.snapshots import (
    ManifestEntry,
    SnapshotManifest,
    SnapshotStore,
    SnapshotStoreError,
    hash_bytes,
)

__all__ = ["ScanCache", "SnapshotSettings", "Snapshots", "scan_workspace"]

_log = logging.getLogger("engine")

# A file modified this close to the scan may change again within the same mtime tick without
# its size moving ("racy git"): its entry keeps mtime 0, so the next scan hashes it again rather
# than trusting size and mtime.
_RACY_NS: Final = 2_000_000_000


@dataclass(frozen=True)
class SnapshotSettings:
    """R-SNAP-1/3: whether snapshots are taken and their caps (a file over ``max_file_bytes``
    is left out and named in the manifest's ``skipped``; so is every file once a snapshot's new
    bytes reach ``max_snapshot_bytes``)."""

    enabled: bool = True
    max_file_bytes: int = 16 * 2**20
    max_snapshot_bytes: int = 512 * 2**20

    def __post_init__(self) -> None:
        if self.max_file_bytes < 0 or self.max_snapshot_bytes < 0:
            raise ValueError("snapshot caps must be >= 0")


@dataclass
class ScanResult:
    manifest: SnapshotManifest
    written: int  # blobs this scan wrote
    hashed: int  # files read and hashed (the rest were trusted by size and mtime)
    # The manifest directory by directory (``None``: a file left out by a cap), as the store
    # makes its trees: ``SnapshotStore.put_manifest(manifest, groups=)``.
    groups: dict[str, dict[str, ManifestEntry | None]] | None = None


class _Ignore:
    """One ``.gitignore``: git's rules through pathspec, but a file without negations is one
    alternation of its patterns' regexes (a single ``search`` per path: the scan's hot spot)."""

    def __init__(self, lines: list[str]) -> None:
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)
        patterns = [p for p in self.spec.patterns if p.include is not None]
        self.fast: re.Pattern[str] | None = None
        regexes = [getattr(p, "regex", None) for p in patterns]
        if all(p.include for p in patterns) and all(isinstance(r, re.Pattern) for r in regexes):
            joined = "|".join(f"(?:{r.pattern})" for r in regexes if isinstance(r, re.Pattern))
            # pathspec names its groups; one alternation may repeat a name, so drop them.
            self.fast = re.compile(re.sub(r"\(\?P<[^>]+>", "(", joined) or "(?!)")

    def match(self, path: str) -> bool:
        if self.fast is not None:
            return self.fast.search(path) is not None
        return bool(self.spec.match_file(path))


class _Listing:
    """One directory as the last scan listed it: the ``.gitignore`` in force and the names of
    its regular files and subdirectories that no ignore rule drops."""

    __slots__ = ("files", "ignore", "key", "subdirs")

    def __init__(
        self, key: tuple[object, ...], ignore: _Ignore | None, files: list[str], subdirs: list[str]
    ) -> None:
        self.key, self.ignore, self.files, self.subdirs = key, ignore, files, subdirs


class ScanCache:
    """What scans learned about directory listings (git's "untracked cache"): a directory whose
    own modification time and ``.gitignore`` files on its way are unchanged since it was listed
    has the same names, so the next scan ``lstat``s its files without listing it and matching
    ignore rules again.  Entries of a directory changed within the last couple of seconds are
    not trusted (an entry added in the same mtime tick would not move it).  Lives in memory
    only: a new process lists everything once."""

    def __init__(self) -> None:
        self.dirs: dict[str, _Listing] = {}
        self.walked = -1  # files the last walk found (-1: no walk yet)
        self.manifest: SnapshotManifest | None = None  # the last scan's, and its directories
        self.groups: dict[str, dict[str, ManifestEntry | None]] = {}
        self.skip: dict[tuple[Path, Path | None], frozenset[str]] = {}
        self.capped: dict[str, list[str]] = {}  # per directory, its files left out by a cap


def _stamp(st: os.stat_result | None) -> tuple[int, int, int] | None:
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


# One directory as the walk found it: (its path relative to the workspace, "" for the top; the
# prefix of its files' paths; its absolute path; the names of the files to lstat).
_Found = tuple[str, str, str, list[str]]


def _walk(workspace: Path, skip: frozenset[str], cache: ScanCache | None = None) -> list[_Found]:
    """Every file name under ``workspace`` not ignored by a ``.gitignore`` on its way,
    directory by directory, in a stable order; directories in ``skip`` (relative paths) are not
    entered.  The files are not ``lstat``ed here: the scan does that once, beside the comparison
    with the previous snapshot (the hot loop of a turn)."""
    out: list[_Found] = []
    specs: list[tuple[str, _Ignore]] = []
    now = time.time_ns()
    cached = cache.dirs if cache is not None else {}
    seen: dict[str, _Listing] = {}
    lstat = os.lstat
    isdir = stat.S_ISDIR

    def listing(path: str, rel: str, dst: os.stat_result, chain: tuple[object, ...]) -> _Listing:
        old = cached.get(rel)
        if old is not None and old.key[:3] == (dst.st_ino, dst.st_mtime_ns, chain):
            gi = _stamp(_lstat(f"{path}/.gitignore")) if old.key[3] is not None else None
            if gi == old.key[3]:
                return old
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            entries = []
        gi_stat = None
        ignore = None
        if any(e.name == ".gitignore" for e in entries):
            gi_stat = _lstat(f"{path}/.gitignore")
            try:
                text = Path(path, ".gitignore").read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            if text.strip():
                ignore = _Ignore(text.splitlines())
        rules = [*specs, (rel, ignore)] if ignore is not None else specs
        files: list[str] = []
        subdirs: list[str] = []
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if not (is_dir or is_file):
                continue
            child = f"{rel}{name}"
            if is_dir and (name == ".git" or child in skip):
                continue
            if rules and _ignored(rules, child, is_dir):
                continue
            (subdirs if is_dir else files).append(name)
        key = (dst.st_ino, dst.st_mtime_ns, chain, _stamp(gi_stat))
        racy = now - dst.st_mtime_ns <= _RACY_NS or (
            gi_stat is not None and now - gi_stat.st_mtime_ns <= _RACY_NS
        )
        # A listing taken while the directory may still change in the same mtime tick is used
        # once and never trusted again (a key no stat matches).
        return _Listing(key if not racy else (None,), ignore, files, subdirs)

    def visit(path: str, rel: str, dst: os.stat_result, chain: tuple[object, ...]) -> None:
        found = listing(path, rel, dst, chain)
        seen[rel] = found
        pushed = found.ignore is not None
        if pushed:
            assert found.ignore is not None
            specs.append((rel, found.ignore))
            chain = (*chain, found.key[3] if len(found.key) > 3 else None)
        if found.files:
            out.append((rel[:-1], rel, path, found.files))
        for name in found.subdirs:
            try:
                st = lstat(f"{path}/{name}")
            except OSError:
                continue
            if isdir(st.st_mode):
                visit(f"{path}/{name}", f"{rel}{name}/", st, chain)
        if pushed:
            specs.pop()

    root = _lstat(str(workspace))
    if root is not None and isdir(root.st_mode):
        visit(str(workspace), "", root, ())
    if cache is not None:
        cache.dirs = seen  # directories gone since are forgotten
    return out


def _ignored(specs: list[tuple[str, _Ignore]], path: str, is_dir: bool) -> bool:
    for base, spec in specs:
        local = path[len(base) :]
        if spec.match(local + "/" if is_dir else local):
            return True
    return False


def _hash_file(path: Path) -> tuple[str, bytes] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hash_bytes(data), data


def scan_workspace(
    workspace: Path,
    store: SnapshotStore | None,
    settings: SnapshotSettings,
    previous: SnapshotManifest | None = None,
    *,
    exclude: Path | None = None,
    cache: ScanCache | None = None,
) -> ScanResult:
    """Scan ``workspace`` into ``store`` (``None``: hash only, store nothing).  ``cache``, kept
    from one scan to the next, spares listing directories that cannot have changed.  Blocking:
    run it in a worker thread."""
    return _scan(workspace, store, settings, previous, exclude=exclude, cache=cache)


class _NeedsThread(Exception):
    """An inline scan met a file to read and hash: that part is never done on the event loop."""


_ABSENT: Final = object()  # a name the previous scan did not have

# A workspace whose last walk found at most this many files is scanned on the event loop: a few
# hundred lstat calls cost less than a worker thread's round trip, and a turn's records then
# leave in one burst instead of two (measured with bench_server).  Hashing always goes to a thread.
_INLINE_FILES: Final = 256


def _scan(
    workspace: Path,
    store: SnapshotStore | None,
    settings: SnapshotSettings,
    previous: SnapshotManifest | None,
    *,
    exclude: Path | None,
    cache: ScanCache | None,
    inline: bool = False,
) -> ScanResult:
    now = time.time_ns()
    old = previous.files if previous is not None else {}
    written = hashed = new_bytes = walked = 0
    old_get = old.get
    max_file = settings.max_file_bytes
    known = cache.skip.get((workspace, exclude)) if cache is not None else None
    skip = known if known is not None else _skipped(workspace, exclude)
    if cache is not None:  # two realpath()s: once per session
        cache.skip[(workspace, exclude)] = skip
    # The previous scan's directories (what the store's trees were made of), when ``previous``
    # is that scan's manifest.  Then ``files`` starts as a copy of it: a directory whose entries
    # are all the previous objects is left as it is there and passed on as the same group, which
    # the store reuses without comparing it; only changed directories are rewritten.
    before = (
        cache.groups
        if cache is not None and previous is not None and previous is cache.manifest
        else None
    )
    files: dict[str, ManifestEntry] = dict(old) if before is not None else {}
    groups: dict[str, dict[str, ManifestEntry | None]] = {}
    capped: dict[str, list[str]] = {}  # directory -> its files left out by a cap
    was_capped = cache.capped if cache is not None and before is not None else {}
    visited: set[str] = set()
    lstat, isreg = os.lstat, stat.S_ISREG
    for d, prefix, path, names in _walk(workspace, skip, cache):
        visited.add(d)
        walked += len(names)
        prior_group = before.get(d) if before is not None else None
        group: dict[str, ManifestEntry | None] = {}
        same = prior_group is not None
        for name in names:
            try:
                st = lstat(f"{path}/{name}")
            except OSError:
                continue
            mode = st.st_mode
            if not isreg(mode):
                continue
            prior = prior_group.get(name) if prior_group is not None else old_get(prefix + name)
            mode &= 0o7777
            # The hot path (most files, every turn): size, mtime and mode as recorded -> the
            # entry is reused as it is.  A racy entry holds mtime 0, which no mtime equals.
            if (
                prior is not None
                and prior.mtime_ns == st.st_mtime_ns
                and prior.size == st.st_size
                and prior.mode == mode
            ):
                group[name] = prior
                continue
            entry: ManifestEntry | None
            size = st.st_size
            if size > max_file:
                entry = None
            else:
                mtime = st.st_mtime_ns if now - st.st_mtime_ns > _RACY_NS else 0
                if prior is not None and prior.size == size and prior.mtime_ns == st.st_mtime_ns:
                    entry = ManifestEntry(prior.hash, size, mode, mtime)
                elif new_bytes + size > settings.max_snapshot_bytes:
                    entry = None
                else:
                    if inline:
                        raise _NeedsThread
                    read = _hash_file(workspace / (prefix + name))
                    if read is None:  # vanished or unreadable between the walk and the read
                        continue
                    digest, data = read
                    hashed += 1
                    if store is not None and not store.has_blob(digest):
                        store.put_blob(data, digest)
                        written += 1
                        new_bytes += len(data)
                    entry = ManifestEntry(digest, len(data), mode, mtime)
            group[name] = entry
            if same and (prior_group is None or prior_group.get(name, _ABSENT) is not entry):
                same = False
        if same and prior_group is not None and len(group) == len(prior_group):
            # Every entry is the previous object under the same name: ``files`` holds them.
            group = prior_group
            if d in was_capped:
                capped[d] = was_capped[d]
        else:
            if prior_group is not None:
                for name in prior_group:
                    files.pop(prefix + name, None)
            left_out = []
            for name, entry in group.items():
                if entry is None:
                    left_out.append(name)
                else:
                    files[prefix + name] = entry
            if left_out:
                capped[d] = left_out
        if group:
            groups[d] = group
    if before is not None:  # directories gone (removed, now ignored or emptied of files)
        for d in before.keys() - visited:
            prefix = f"{d}/" if d else ""
            for name in before[d]:
                files.pop(prefix + name, None)
    skipped = [f"{d}/{name}" if d else name for d in groups if d in capped for name in capped[d]]
    manifest = SnapshotManifest(files=files, skipped=skipped)
    if cache is not None:
        cache.manifest, cache.groups, cache.capped = manifest, groups, capped
        cache.walked = walked
    return ScanResult(manifest=manifest, written=written, hashed=hashed, groups=groups)


def _skipped(workspace: Path, exclude: Path | None) -> frozenset[str]:
    """``exclude`` (the data root, where the snapshots themselves live) as a path relative to
    the workspace, when it lies inside it: a snapshot never copies the store or the traces."""
    if exclude is None:
        return frozenset()
    try:
        rel = exclude.resolve().relative_to(workspace.resolve())
    except ValueError:
        return frozenset()
    return frozenset({rel.as_posix()}) if rel.parts else frozenset()


class Snapshots:
    """One session's snapshots: what the last one was, and whether a tool ran since."""

    def __init__(
        self,
        store: SnapshotStore,
        workspace: Path,
        settings: SnapshotSettings,
        *,
        last_id: str | None = None,
        exclude: Path | None = None,
    ) -> None:
        self.store = store
        self.exclude = exclude
        self.workspace = workspace
        self.settings = settings
        self._last: SnapshotManifest | None = None
        self._last_id = last_id
        self._cache = ScanCache()
        self.dirty = False  # a tool was started since the last snapshot

    @classmethod
    def of(
        cls,
        settings: SnapshotSettings | None,
        root: DataRoot,
        project: str,
        agent: str,
        workspace: Path,
        *,
        last_id: str | None = None,
    ) -> Snapshots | None:
        """A session's snapshots, or ``None`` when they are off."""
        if settings is None or not settings.enabled:
            return None
        store = SnapshotStore(root, project=project, agent=agent)
        return cls(store, workspace, settings, last_id=last_id, exclude=root.home)

    def _previous(self) -> SnapshotManifest | None:
        if self._last is None and self._last_id is not None:
            try:
                self._last = self.store.read_manifest(self._last_id)
            except Exception:
                self._last_id = None  # unreadable: hash everything once
        return self._last

    def _take(self, inline: bool = False) -> tuple[str, SnapshotManifest]:
        result = _scan(
            self.workspace,
            self.store,
            self.settings,
            self._previous(),
            exclude=self.exclude,
            cache=self._cache,
            inline=inline,
        )
        snapshot_id = self.store.put_manifest(result.manifest, groups=result.groups)
        self._last, self._last_id = result.manifest, snapshot_id
        return snapshot_id, result.manifest

    async def take(self, emit: Callable[[OmniMessage], None]) -> None:
        """Scan (in a worker thread unless the workspace is small and nothing needs hashing),
        then record the ``workspace_snapshot`` (R-SNAP-1).  A store that cannot be written costs
        the snapshot, not the run: a warning, and no record."""
        try:
            taken = None
            if 0 <= self._cache.walked <= _INLINE_FILES:
                try:
                    taken = self._take(inline=True)
                except _NeedsThread:
                    pass
            if taken is None:
                taken = await anyio.to_thread.run_sync(self._take)
            snapshot_id, manifest = taken
        except (OSError, SnapshotStoreError) as exc:
            _log.warning("[penguin] workspace snapshot skipped: %s", exc)
            return
        self.dirty = False
        emit(
            b.workspace_snapshot(
                snapshot_id, len(manifest.files), manifest.bytes, skipped=len(manifest.skipped)
            )
        )
