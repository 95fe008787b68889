"""The workspace snapshot store (SPEC §27, R-SNAP-1/3): blobs and trees by hash.

Owns: ``<agent_state>/snapshots/`` — ``blobs/<h[:2]>/<h>`` (a file's bytes, named by their
SHA-256) and ``trees/<h[:2]>/<h>`` (one directory of a snapshot, as git stores trees: each
name with its blob hash, size, mode and mtime, or its subdirectory's tree id; a snapshot's id
is its root tree's) — writing each once (0600, atomically, never through a symlink), reading
them back verified, and removing what no kept snapshot reaches (``collect``).  The store is shared by the sessions of one agent, so
a fork or a rewind refers to the same blobs without copying them.  Does not: scan a workspace
(``engine``), decide when a snapshot is taken, or restore files (``replay``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from ._layout import DataRoot
from ._private import write_private

__all__ = [
    "CollectResult",
    "ManifestEntry",
    "SnapshotManifest",
    "SnapshotStore",
    "SnapshotStoreError",
    "hash_bytes",
]

_HASH: Final = re.compile(r"^[0-9a-f]{64}\Z")


class SnapshotStoreError(Exception):
    """A blob or manifest that is missing or does not match its hash."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class ManifestEntry(msgspec.Struct, frozen=True, array_like=True):
    """One file of a snapshot: its blob, size, permission bits and modification time."""

    hash: str
    size: int
    mode: int
    mtime_ns: int


class SnapshotManifest(msgspec.Struct, frozen=True, omit_defaults=True):
    """A workspace at one moment: relative POSIX paths -> entries.  ``skipped`` names the files
    left out by a size cap (R-SNAP-1): a restore leaves them as they are."""

    files: dict[str, ManifestEntry]
    skipped: list[str] = msgspec.field(default_factory=list)
    version: int = 1

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.files.values())


_ENCODER: Final = msgspec.json.Encoder(order="sorted")


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CollectResult:
    trees: int
    blobs: int
    bytes: int


class SnapshotStore:
    """Blobs and trees under ``<agent_state>/snapshots`` of one agent."""

    def __init__(self, root: DataRoot, *, project: str, agent: str) -> None:
        self._root = root
        self.path = root.agent_state(project, agent) / "snapshots"
        self._checked: set[Path] = set()  # directories known to be under the root, private
        # directory -> (its files, its subdirectories' trees, its tree id) of the last manifest
        # put: an unchanged directory is not encoded, hashed or looked up again.
        self._trees: dict[
            str, tuple[Mapping[str, ManifestEntry | None], tuple[tuple[str, str], ...], str]
        ] = {}

    def _write(self, target: Path, data: bytes) -> None:
        """Write a new object once: the root check of its directory is done once per store."""
        parent = target.parent
        if parent not in self._checked:
            self._root.ensure_dir(parent)
            self._checked.add(parent)
        write_private(target, data)

    # ------------------------------------------------------------------ blobs

    def blob_path(self, digest: str) -> Path:
        if not _HASH.match(digest):
            raise ValueError(f"not a blob hash: {digest!r}")
        return self.path / "blobs" / digest[:2] / digest

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def put_blob(self, data: bytes, digest: str | None = None) -> tuple[str, bool]:
        """Store ``data`` once; returns its hash and whether this call wrote it."""
        digest = digest or hash_bytes(data)
        target = self.blob_path(digest)
        if target.is_file():
            return digest, False
        self._write(target, data)
        return digest, True

    def read_blob(self, digest: str) -> bytes:
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotStoreError("blob missing (removed by gc?)", path=path) from None
        if hash_bytes(data) != digest:
            raise SnapshotStoreError("blob does not match its hash", path=path)
        return data

    # ------------------------------------------------------------------ manifests (trees)

    def tree_path(self, tree_id: str) -> Path:
        if not _HASH.match(tree_id):
            raise ValueError(f"not a snapshot id: {tree_id!r}")
        return self.path / "trees" / tree_id[:2] / tree_id

    def put_manifest(
        self,
        manifest: SnapshotManifest,
        *,
        groups: Mapping[str, Mapping[str, ManifestEntry | None]] | None = None,
    ) -> str:
        """Store ``manifest`` as one tree object per directory, as git does, so a snapshot that
        changed one file writes the trees on that file's path and nothing else.  Written after
        the blobs; a crash leaves at most unreferenced files, which ``collect`` removes.
        ``groups``: the same manifest directory by directory (``None`` for a file left out by
        a cap), as a scan found it; a directory passed as the very object of the previous call
        is not compared again.  Returns the root tree's id: the snapshot's id."""
        if groups is None:
            groups = _grouped(manifest)
        subdirs: dict[str, dict[str, str]] = {"": {}}
        for d in groups:
            while d:
                parent, _, name = d.rpartition("/")
                kids = subdirs.get(parent)
                if kids is None:
                    kids = subdirs[parent] = {}
                elif name in kids:
                    break  # this directory's ancestors are already linked
                kids[name] = d
                d = parent
        ids: dict[str, str] = {}
        for d in sorted(subdirs.keys() | groups.keys(), key=lambda x: -x.count("/") - bool(x)):
            own = groups.get(d, _NO_FILES)
            kids = subdirs.get(d)
            linked = tuple(sorted((n, ids[c]) for n, c in kids.items())) if kids else ()
            cached = self._trees.get(d)
            if (
                cached is not None
                and (cached[0] is own or cached[0] == own)
                and cached[1] == linked
            ):
                tree_id = cached[2]
            else:
                entries: dict[str, _TreeEntry] = dict(own)
                entries.update(linked)
                tree_id = self._put_tree(entries)
                self._trees[d] = (own, linked, tree_id)
            ids[d] = tree_id
        return ids[""]

    def _put_tree(self, entries: dict[str, _TreeEntry]) -> str:
        data = _ENCODER.encode(_Tree(e=entries))
        tree_id = hash_bytes(data)
        target = self.tree_path(tree_id)
        if not target.is_file():
            self._write(target, data)
        return tree_id

    def _read_tree(self, tree_id: str) -> dict[str, _TreeEntry]:
        path = self.tree_path(tree_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotStoreError("snapshot tree missing (removed by gc?)", path=path) from None
        if hash_bytes(data) != tree_id:
            raise SnapshotStoreError("snapshot tree does not match its id", path=path)
        try:
            entries = msgspec.json.decode(data, type=_Tree).e
        except msgspec.DecodeError as exc:
            raise SnapshotStoreError(f"unreadable snapshot tree: {exc}", path=path) from None
        return entries

    def _walk(self, tree_id: str, prefix: str, visit: _Visit) -> None:
        visit.tree(tree_id)
        for name, entry in self._read_tree(tree_id).items():
            if isinstance(entry, str):
                self._walk(entry, f"{prefix}{name}/", visit)
            elif entry is None:
                visit.skipped.append(f"{prefix}{name}")
            else:
                visit.file(f"{prefix}{name}", entry)

    def read_manifest(self, snapshot_id: str) -> SnapshotManifest:
        """The snapshot's files, every tree read and checked against its id."""
        visit = _Visit()
        self._walk(snapshot_id, "", visit)
        return SnapshotManifest(files=visit.files, skipped=visit.skipped)

    def has_manifest(self, snapshot_id: str) -> bool:
        return self.tree_path(snapshot_id).is_file()

    # ------------------------------------------------------------------ garbage collection

    def collect(self, keep: Iterable[str], *, dry_run: bool = False) -> CollectResult:
        """Remove every tree and blob that no snapshot in ``keep`` reaches (R-SNAP-3).  A kept
        snapshot whose trees are unreadable keeps what could be read of it."""
        visit = _Visit()
        for snapshot_id in set(keep):
            if _HASH.match(snapshot_id):
                try:
                    self._walk(snapshot_id, "", visit)
                except SnapshotStoreError:
                    pass
        live_blobs = {e.hash for e in visit.all_files}
        trees = blobs = size = 0
        for kind, live in (("trees", visit.trees), ("blobs", live_blobs)):
            for bucket in _list(self.path / kind):
                for entry in _list(bucket):
                    if entry.name in live:
                        continue
                    if kind == "trees":
                        trees += 1
                    else:
                        blobs += 1
                    size += _size(entry)
                    if not dry_run:
                        _unlink(entry)
        return CollectResult(trees=trees, blobs=blobs, bytes=size)


# In a tree: a file's entry, a subdirectory's tree id, or ``None`` for a file left out by a cap.
_TreeEntry = ManifestEntry | str | None


_NO_FILES: Final[Mapping[str, ManifestEntry | None]] = {}


def _grouped(manifest: SnapshotManifest) -> dict[str, dict[str, ManifestEntry | None]]:
    """The manifest directory by directory, as ``put_manifest``'s ``groups``."""
    groups: dict[str, dict[str, ManifestEntry | None]] = {}
    for path, e in manifest.files.items():
        parent, _, name = path.rpartition("/")
        found = groups.get(parent)
        if found is None:
            found = groups[parent] = {}
        found[name] = e
    for path in manifest.skipped:
        parent, _, name = path.rpartition("/")
        groups.setdefault(parent, {})[name] = None
    return groups


class _Tree(msgspec.Struct):
    e: dict[str, _TreeEntry]
    v: int = 1


class _Visit:
    def __init__(self) -> None:
        self.files: dict[str, ManifestEntry] = {}
        self.skipped: list[str] = []
        self.trees: set[str] = set()
        self.all_files: list[ManifestEntry] = []

    def tree(self, tree_id: str) -> None:
        self.trees.add(tree_id)

    def file(self, path: str, entry: ManifestEntry) -> None:
        self.files[path] = entry
        self.all_files.append(entry)


def _list(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if not p.is_symlink())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
