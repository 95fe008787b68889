"""The trace validator (SPEC §16.1, V-1…V-20).

Owns: ``validate_file``, ``validate_session`` and ``validate_paths``: one streaming pass per file
(constant memory apart from per-id tables) through ``replay._checks.FileChecker`` — the per-file
checks, one check group per concept — plus reading the lines (V-1) and the cross-file checks of
one session (V-2 crash residue, V-6 rotated heads, V-7 ids, V-17, V-18).
Does not: repair, print, take locks or modify files; decide exit codes (the CLI does, R-CLI-5).

Reading is done here, not through ``eventstore``'s reader: the validator must see what a reader
hides (blank lines, the position of a malformed line, a torn tail), so it numbers raw lines itself
and calls ``eventstore.decode`` on each.  Where the SPEC leaves room, the choices are documented
with the check group that makes them (V-10 ``pairing``, V-12 ``retries``, V-14 ``spans``, V-19
``shape``).
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Final

from eventstore import TraceDecodeError, decode, find_trace_files, parse_trace_name

from ._checks import FileChecker, FileSummary, Finding, Severity

__all__ = ["Finding", "Severity", "validate_file", "validate_paths", "validate_session"]

# R-TRACE-17: a longer line is malformed and is never held in memory.  Module-level so that tests
# can lower it.
_MAX_LINE_BYTES: int = 256 * 1024 * 1024
_SKIP_CHUNK: Final = 1 << 20

# --------------------------------------------------------------------------- line reading


def _raw_lines(f: IO[bytes]) -> Iterator[tuple[int, bytes | None, bool]]:
    """``(line_no, content, terminated)`` per physical line; ``content`` is ``None`` for a line
    longer than ``_MAX_LINE_BYTES``, which is skipped without being held in memory."""
    limit = _MAX_LINE_BYTES
    line_no = 0
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        line_no += 1
        if raw.endswith(b"\n"):
            yield line_no, raw, True
            continue
        if len(raw) <= limit:
            yield line_no, raw, False
            return
        del raw
        terminated = False
        while more := f.readline(_SKIP_CHUNK):
            if more.endswith(b"\n"):
                terminated = True
                break
        yield line_no, None, terminated
        if not terminated:
            return


# --------------------------------------------------------------------------- per-file pass


def _scan(
    path: Path, *, index: int | None, name_id: str | None, is_highest: bool, strict: bool
) -> tuple[list[Finding], FileSummary]:
    """One file's pass: number the raw lines (V-1), decode each and feed it to the checker."""
    checker = FileChecker(path, index=index, name_id=name_id, is_highest=is_highest, strict=strict)
    facts = checker.facts
    deferred: tuple[int, str] | None = None  # a malformed line not yet known to be the last
    with path.open("rb") as f:
        for line_no, raw, terminated in _raw_lines(f):
            if raw is not None and not raw.strip():
                facts.warn(line_no, "V-1", "blank line")
                continue
            if deferred is not None:
                facts.error(deferred[0], "V-1", f"malformed line: {deferred[1]}")
                deferred = None
            if not terminated:
                # R-READ-2: readers drop a last line without its newline, decodable or not.
                facts.warn(line_no, "V-1", "torn last line (no terminating newline)")
                break
            if raw is None:
                deferred = (line_no, f"line longer than {_MAX_LINE_BYTES} bytes")
                continue
            try:
                msg = decode(raw.strip())
            except TraceDecodeError as exc:
                deferred = (line_no, str(exc))
                continue
            checker.feed(line_no, msg)
    if deferred is not None:
        facts.warn(deferred[0], "V-1", f"torn last line: {deferred[1]}")
    checker.finish()
    return checker.findings, checker.summary()


# --------------------------------------------------------------------------- public API


def validate_file(
    path: Path, *, session_files: list[Path] | None = None, strict: bool = False
) -> list[Finding]:
    """Validate one trace file (V-1…V-20 as far as one file can tell).

    ``session_files`` (default: the file's siblings of the same session in its directory) decide
    whether this is the session's highest-index file, whose crash residue is only a warning
    (R-ROOT-10).  A rotated file must start with ``tool_list_ready`` when this file has one at
    all; the session-wide toolset and the other cross-file checks need ``validate_session``.
    """
    path = Path(path)
    parsed = parse_trace_name(path)
    name_id, index = parsed if parsed else (None, None)
    is_highest = True
    if parsed is not None:
        candidates: Iterable[Path]
        if session_files is None:
            candidates = path.parent.glob(f"{glob.escape(parsed[0])}_*.jsonl")
        else:
            candidates = session_files
        for other in candidates:
            other_parsed = parse_trace_name(Path(other))
            if other_parsed and other_parsed[0] == name_id and other_parsed[1] > (index or 0):
                is_highest = False
                break
    findings, summary = _scan(
        path, index=index, name_id=name_id, is_highest=is_highest, strict=strict
    )
    findings.extend(_head_findings(summary, has_toolset=summary.has_tool_list))
    return _sorted(findings, [path])


def validate_session(paths: Sequence[Path], *, strict: bool = False) -> list[Finding]:
    """Validate every file of one session, plus the cross-file checks (V-2 residue, V-6 heads,
    V-17, V-18).  Raises ``ValueError`` when the file names name more than one session."""
    files = sorted({Path(p) for p in paths}, key=_order_key)
    if not files:
        return []
    parsed = [parse_trace_name(p) for p in files]
    ids = {p[0] for p in parsed if p is not None}
    if len(ids) > 1 or (ids and len(files) > 1 and any(p is None for p in parsed)):
        raise ValueError(f"files of more than one session: {sorted(ids)}")
    highest = max((p[1] for p in parsed if p is not None), default=None)

    findings: list[Finding] = []
    summaries: list[FileSummary] = []
    for path, info in zip(files, parsed, strict=True):
        name_id, index = info if info else (None, None)
        file_findings, summary = _scan(
            path,
            index=index,
            name_id=name_id,
            is_highest=index is None or index == highest,
            strict=strict,
        )
        findings.extend(file_findings)
        summaries.append(summary)

    has_toolset = any(s.has_tool_list for s in summaries)
    for s in summaries:
        findings.extend(_head_findings(s, has_toolset=has_toolset))
    findings.extend(_meta_findings(summaries))
    findings.extend(_index_findings(summaries))
    findings.extend(_call_id_findings(summaries))
    return _sorted(findings, files)


def validate_paths(paths: Iterable[Path], *, strict: bool = False) -> list[Finding]:
    """Validate files and directories (searched for ``*.jsonl`` by
    ``eventstore.find_trace_files``: a symlink out of a directory is skipped with a warning;
    ``*.lock`` files are ignored), grouping the files into sessions by the id in their names
    within one ``traces`` directory (the parent of the date directories).  Raises
    ``FileNotFoundError`` for a path that does not exist."""
    seen: set[Path] = set()
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = find_trace_files(p)  # the store's symlink rule (R-ROOT-9)
        elif p.exists():
            found = [p]
        else:
            raise FileNotFoundError(f"No such file or directory: {p}")
        for q in found:
            resolved = q.resolve()
            if resolved not in seen:
                seen.add(resolved)
                files.append(q)

    groups: dict[tuple[Path, str] | Path, list[Path]] = {}
    for q in files:
        info = parse_trace_name(q)
        key: tuple[Path, str] | Path = (q.resolve().parent.parent, info[0]) if info else q
        groups.setdefault(key, []).append(q)
    findings: list[Finding] = []
    for group in groups.values():
        findings.extend(validate_session(group, strict=strict))
    return findings


# --------------------------------------------------------------------------- cross-file checks


def _head_findings(s: FileSummary, *, has_toolset: bool) -> list[Finding]:
    # V-6: a rotated file starts session_meta, tool_list_ready (R-TRACE-8).
    if s.index is None or s.index < 2 or s.residue or s.meta is None or not has_toolset:
        return []
    if s.second_kind == "tool_list_ready":
        return []
    what = s.second_kind or "nothing"
    return [
        Finding(
            s.path,
            s.second_line,
            "V-6",
            "error",
            f"rotated file (index {s.index}) has {what} after its session_meta, not tool_list_ready",
        )
    ]


def _meta_findings(summaries: list[FileSummary]) -> list[Finding]:
    # V-17: one system prompt and one workspace per session.
    out: list[Finding] = []
    ref: FileSummary | None = None
    for s in summaries:
        if s.meta is None:
            continue
        if ref is None or ref.meta is None:
            ref = s
            continue
        for name in ("system_prompt", "workspace"):
            if getattr(s.meta, name) != getattr(ref.meta, name):
                out.append(
                    Finding(
                        s.path,
                        s.meta_line,
                        "V-17",
                        "error",
                        f"{name} differs from that of {ref.path.name}",
                    )
                )
    return out


def _call_id_findings(summaries: list[FileSummary]) -> list[Finding]:
    # V-7 [ours]: a tool_call id is used by one call in the whole session (R-RUN-20).
    out: list[Finding] = []
    seen: dict[str, tuple[Path, int]] = {}
    for s in summaries:
        if s.residue:
            continue
        for cid, line in s.call_lines.items():
            first = seen.setdefault(cid, (s.path, line))
            if first[0] != s.path:
                out.append(
                    Finding(
                        s.path,
                        line,
                        "V-7",
                        "error",
                        f"tool_call id {cid} already used in {first[0].name} (line {first[1]}): "
                        "tool_call ids are unique within a session",
                    )
                )
    return out


def _index_findings(summaries: list[FileSummary]) -> list[Finding]:
    # V-18: indices 1..n without gaps or repeats, all in one date directory.
    out: list[Finding] = []
    indexed = [s for s in summaries if s.index is not None]
    if not indexed:
        return out
    expected = 1
    seen: dict[int, Path] = {}
    for s in indexed:
        assert s.index is not None
        if s.index in seen:
            out.append(
                Finding(
                    s.path,
                    0,
                    "V-18",
                    "warning",
                    f"index {s.index} also used by {seen[s.index].name}",
                )
            )
            continue
        seen[s.index] = s.path
        if s.index != expected:
            missing = f"{expected}" if s.index == expected + 1 else f"{expected}..{s.index - 1}"
            out.append(Finding(s.path, 0, "V-18", "warning", f"file index {missing} missing"))
        expected = s.index + 1
    first_dir = indexed[0].path.parent
    for s in indexed[1:]:
        if s.path.parent != first_dir:
            out.append(
                Finding(
                    s.path, 0, "V-18", "warning", f"not in the session's date directory {first_dir}"
                )
            )
    return out


def _order_key(p: Path) -> tuple[str, int, str]:
    info = parse_trace_name(p)
    return (info[0], info[1], str(p)) if info else ("", 0, str(p))


def _sorted(findings: list[Finding], files: list[Path]) -> list[Finding]:
    rank = {p: i for i, p in enumerate(files)}
    return sorted(findings, key=lambda f: (rank.get(f.path, len(rank)), f.line))
