"""The tolerant trace reader (SPEC §4.5, R-ROOT-10, R-TRACE-17).

Owns: turning trace files into records plus diagnostics — line splitting, the torn-tail rule,
skipping malformed lines, the one-line stderr report, ordering several files by index, and
ignoring a crash-residue latest file.  Does not: decode a line (``_codec.decode``), modify or
repair a file (the writer truncates torn tails, R-TRACE-14), or know where files live
(``_layout``).

Every content problem has a defined outcome and none raises:

- blank or whitespace-only lines are skipped without a diagnostic (the validator flags them);
- a UTF-8 BOM at the very start of a file is skipped; lines are trimmed, so CRLF files read;
- the last non-blank line is dropped as ``torn_tail`` when it has no terminating ``\\n`` (even
  if it decodes, R-READ-2) or when it does not decode;
- any other line that does not decode — invalid UTF-8, not JSON, NaN/Infinity literals, nesting
  too deep, valid JSON that is not an envelope, or longer than ``max_line_bytes`` — is
  ``malformed``; a line over the limit is skipped without ever being held in memory whole;
- duplicate keys in an object: the last one wins (msgspec's behaviour, pinned by a test);
- huge integers, unknown payload types and unknown envelope types are kept (R-MSG-7, R-READ-4).

Only the file system can raise: a missing file is ``FileNotFoundError``.

Hot path: a file is read in 1 MiB chunks, each split with one ``bytes.split``; a line is handed
to the codec untrimmed (its fast path inline, any other line to ``decode``; msgspec skips JSON
whitespace itself, CR included), and trimming, blank detection and the torn-tail bookkeeping
happen only after a line failed to decode.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, TypeAlias

import msgspec

from ._codec import _LINE_TYPES, _decode_typed_line, decode
from ._diagnostics import Diagnostic
from ._exceptions import TraceDecodeError
from ._names import parse_trace_name
from ._residue import ResidueCheck
from ._schema import OmniMessage

__all__ = [
    "MAX_LINE_BYTES",
    "TraceRead",
    "iter_trace",
    "read_trace",
    "scan_trace",
]

PathLike: TypeAlias = "str | os.PathLike[str]"

#: R-TRACE-17: a longer line is malformed and is never held in memory whole.
MAX_LINE_BYTES: Final = 256 * 2**20
_CHUNK_BYTES: Final = 2**20
_BOM: Final = b"\xef\xbb\xbf"
_MAX_LINES_SHOWN: Final = 20

# One chunk's worth of output from the scanner:
#   first   line number of the chunk's first complete line
#   records decoded records, in line order
#   gaps    line numbers (>= first) that produced no record; sorted; None when there were none,
#           so that in the common case the record line numbers are first, first+1, …
#   diags   diagnostics found while scanning the chunk, in line order
_Batch: TypeAlias = "tuple[int, list[OmniMessage], list[int] | None, list[Diagnostic]]"


class TraceRead(msgspec.Struct):
    """The result of ``read_trace``: every decodable record, what was skipped and why, and the
    files read, in the order they were read."""

    records: list[OmniMessage]
    diagnostics: list[Diagnostic]
    paths: list[Path]


# --------------------------------------------------------------------------- single file


def scan_trace(
    path: PathLike, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, OmniMessage] | Diagnostic]:
    """Stream one trace file: ``(line_no, record)`` for every record and a ``Diagnostic``
    (``malformed`` or ``torn_tail``) for every other non-blank line, in line order (1-based,
    counting every physical line; blank lines are skipped silently, R-READ-1).

    Memory is bounded by ``max_line_bytes`` plus one chunk, whatever the file size.  Prints
    nothing.  Raises ``FileNotFoundError`` at the call when the file does not exist, and
    ``ValueError`` for a ``max_line_bytes`` below 3.
    """
    if max_line_bytes < len(_BOM):
        raise ValueError(f"max_line_bytes must be at least 3, got {max_line_bytes}")
    p = Path(path)
    os.stat(p)  # fail at the call, not at the first next()
    return _numbered(p, max_line_bytes)


def _numbered(path: Path, max_line_bytes: int) -> Iterator[tuple[int, OmniMessage] | Diagnostic]:
    for first, records, gaps, diags in _scan(path, max_line_bytes=max_line_bytes):
        if gaps is None and not diags:
            yield from zip(range(first, first + len(records)), records, strict=True)
            continue
        skipped = set(gaps or ())
        pending = iter(diags)
        diag = next(pending, None)
        line = first
        for record in records:
            while line in skipped:
                line += 1
            # A diagnostic may describe a line of an earlier chunk (a held-back bad line).
            while diag is not None and diag.line < line:
                yield diag
                diag = next(pending, None)
            yield line, record
            line += 1
        if diag is not None:
            yield diag
        yield from pending


def _scan(
    path: Path, *, max_line_bytes: int = MAX_LINE_BYTES, chunk_bytes: int | None = None
) -> Generator[_Batch, None, None]:
    """The scanner: one batch per chunk read (see ``_Batch``); ``chunk_bytes`` defaults to
    the module's ``_CHUNK_BYTES`` (looked up per call, so tests can shrink it)."""
    if max_line_bytes < len(_BOM):
        raise ValueError(f"max_line_bytes must be at least 3, got {max_line_bytes}")
    # A chunk no longer than the limit cannot hold a whole over-long line, so only a line that
    # spans chunks needs a length check.  (At least 3 bytes, so the first read sees a BOM whole.)
    chunk_bytes = max(len(_BOM), min(chunk_bytes or _CHUNK_BYTES, max_line_bytes))
    n = 0  # physical lines completed so far
    parts: list[bytes] = []  # the current, still unterminated line
    parts_len = 0
    oversized = False  # the current line passed the limit; its bytes are being discarded
    # The last bad non-blank line seen: it is torn_tail if no non-blank line follows it,
    # malformed otherwise (R-READ-2, R-READ-3).
    held: tuple[int, str] | None = None

    with open(path, "rb") as f:
        at_start = True
        while True:
            chunk = f.read(chunk_bytes)
            if not chunk:
                break
            if at_start:
                at_start = False
                if chunk.startswith(_BOM):
                    chunk = chunk[len(_BOM) :]
            first = n + 1
            records: list[OmniMessage] = []
            gaps: list[int] | None = None
            diags: list[Diagnostic] = []
            if oversized:
                cut = chunk.find(b"\n")
                if cut < 0:
                    continue
                n += 1
                gaps = [n]
                if held is not None:
                    diags.append(Diagnostic(path, held[0], "malformed", held[1]))
                held = (n, f"line longer than {max_line_bytes} bytes")
                oversized = False
                chunk = chunk[cut + 1 :]
            lines = chunk.split(b"\n")
            tail = lines.pop()
            if lines and parts:
                parts_len += len(lines[0])
                if parts_len > max_line_bytes:
                    n += 1
                    if gaps is None:
                        gaps = []
                    gaps.append(n)
                    if held is not None:
                        diags.append(Diagnostic(path, held[0], "malformed", held[1]))
                    held = (n, f"line longer than {max_line_bytes} bytes")
                    del lines[0]
                else:
                    parts.append(lines[0])
                    lines[0] = b"".join(parts)
                parts = []
                parts_len = 0
            append = records.append
            fast, line_types, message = _decode_typed_line, _LINE_TYPES, OmniMessage
            for line in lines:
                n += 1
                try:
                    # ``decode``'s fast path, inlined (the per-line call is a fair share of a
                    # resume); any line it does not take goes through ``decode`` itself.
                    typed = fast(line)
                    payload = typed.payload
                    if payload.extra is not None:
                        raise _NotOrdinary
                    record = message(
                        typed.timestamp, line_types[type(typed)], payload, typed.origin or None
                    )
                except Exception:
                    try:
                        record = decode(line)
                    except Exception as exc:  # only TraceDecodeError is expected; see _salvage
                        salvaged = _salvage(line, exc)
                        if salvaged is None:
                            gaps = _gap(gaps, n)  # R-READ-1: blank, no diagnostic
                            continue
                        if isinstance(salvaged, str):
                            gaps = _gap(gaps, n)
                            if held is not None:
                                diags.append(Diagnostic(path, held[0], "malformed", held[1]))
                            held = (n, salvaged)
                            continue
                        record = salvaged
                if held is not None:
                    diags.append(Diagnostic(path, held[0], "malformed", held[1]))
                    held = None
                append(record)
            if tail:
                parts.append(tail)
                parts_len += len(tail)
                if parts_len > max_line_bytes:
                    parts = []
                    parts_len = 0
                    oversized = True
            if records or diags:
                yield first, records, gaps, diags

    # End of file: what is left is the last line, without its "\n".
    first = n + 1
    diags = []
    gaps = None
    if oversized or parts:
        n += 1
        gaps = [n]
        if oversized or b"".join(parts).strip():
            if held is not None:
                diags.append(Diagnostic(path, held[0], "malformed", held[1]))
            size = "over the limit" if oversized else f"{parts_len} byte(s)"
            held = None
            diags.append(
                Diagnostic(path, n, "torn_tail", f"last line has no terminating newline ({size})")
            )
    if held is not None:
        diags.append(
            Diagnostic(path, held[0], "torn_tail", f"last line does not decode: {held[1]}")
        )
    if diags:
        yield first, [], gaps, diags


class _NotOrdinary(Exception):
    """A line the inlined fast path leaves to ``decode`` (a payload with unknown keys)."""


def _gap(gaps: list[int] | None, line: int) -> list[int]:
    if gaps is None:
        return [line]
    gaps.append(line)
    return gaps


def _salvage(line: bytes, exc: Exception) -> OmniMessage | str | None:
    """After ``decode(line)`` failed: ``None`` for a blank line, the record when the trimmed
    line decodes (trimming takes \\v and \\f too, which JSON does not), else why it failed."""
    stripped = line.strip()
    if not stripped:
        return None
    if stripped != line:
        try:
            return decode(stripped)
        except Exception as again:
            exc = again
    if isinstance(exc, TraceDecodeError):
        return exc.detail
    # The codec promises TraceDecodeError only; anything else is still a bad line, not a crash
    # of the reader (R-TRACE-17: a decode error of any kind is malformed).
    return f"decoder error: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- several files


def iter_trace(
    path_or_paths: PathLike | Iterable[PathLike],
    *,
    report: bool = True,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[OmniMessage]:
    """Stream the records of one file, or of a session's files in index order.

    Same rules as ``read_trace`` (including the stderr report); diagnostics are not returned.
    Memory stays bounded by the longest line, except while the last file of a sequence is
    being checked for crash residue (R-ROOT-10): its records are held until it shows a
    ``session_meta`` (and, with index > 1, a record beyond its rotation head).
    """
    paths, as_session = _ordered(path_or_paths)
    sink: list[Diagnostic] = []
    for records in _read(
        paths, sink, as_session=as_session, report=report, max_line_bytes=max_line_bytes
    ):
        yield from records
        sink.clear()


def read_trace(
    path_or_paths: PathLike | Iterable[PathLike],
    *,
    report: bool = True,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> TraceRead:
    """Read one file, or a session's files in index order (R-READ-5), tolerantly (§4.5).

    With ``report`` (the default), every file that had malformed lines prints one line on
    stderr (R-READ-3); torn tails and crash residue are not printed.

    A single path is read as it is: whatever it holds is returned, and ``empty_file`` is never
    reported (the caller chose the file; ``DataRoot.latest_trace`` is what skips residue).
    A sequence of paths (even of one) is read as a session: files are ordered by their
    ``_NNN`` index (names without one keep their given order, before the numbered ones) and the
    highest-index file is ignored, with an ``empty_file`` diagnostic, when it is crash residue
    (R-ROOT-10): it holds no decodable ``session_meta``, or its index is > 1 and it holds
    nothing but its rotation head (``session_meta``, ``tool_list_ready``).
    """
    records: list[OmniMessage] = []
    diagnostics: list[Diagnostic] = []
    paths, as_session = _ordered(path_or_paths)
    for batch in _read(
        paths, diagnostics, as_session=as_session, report=report, max_line_bytes=max_line_bytes
    ):
        records += batch
    return TraceRead(records=records, diagnostics=diagnostics, paths=paths)


def _ordered(path_or_paths: PathLike | Iterable[PathLike]) -> tuple[list[Path], bool]:
    if isinstance(path_or_paths, str | os.PathLike):
        return [Path(path_or_paths)], False
    paths = [Path(p) for p in path_or_paths]
    return sorted(paths, key=lambda p: file_index(p) or 0), True


def _read(
    paths: list[Path],
    diagnostics: list[Diagnostic],
    *,
    as_session: bool,
    report: bool,
    max_line_bytes: int,
) -> Iterator[list[OmniMessage]]:
    for position, path in enumerate(paths, start=1):
        os.stat(path)
        malformed: list[int] = []
        batches: Iterator[_Batch] = _scan(path, max_line_bytes=max_line_bytes)
        if as_session and position == len(paths):
            batches = _unless_residue(batches, path, file_index(path) or position)
        for _first, records, _gaps, diags in batches:
            if diags:
                diagnostics += diags
                malformed += [d.line for d in diags if d.kind == "malformed"]
            if records:
                yield records
        if report and malformed:
            _report(path, malformed)


def _unless_residue(batches: Iterator[_Batch], path: Path, index: int) -> Iterator[_Batch]:
    """Hold records back until the file is known not to be crash residue (R-ROOT-10)."""
    held: list[OmniMessage] = []
    check = ResidueCheck(index)
    decided = False
    for first, records, gaps, diags in batches:
        if not decided:
            decided = any(check.feed(record) for record in records)
            if decided:
                records = held + records
                held = []
            else:
                held += records
                records = []
        yield first, records, gaps, diags
    if not decided:
        yield 0, [], None, [Diagnostic(path, 1, "empty_file", check.detail)]


_log = logging.getLogger("eventstore")


def _report(path: Path, lines: Sequence[int]) -> None:
    shown = ", ".join(str(n) for n in lines[:_MAX_LINES_SHOWN])
    more = ", …" if len(lines) > _MAX_LINES_SHOWN else ""
    _log.warning("[trace] skipped %d malformed line(s) [%s%s] in %s", len(lines), shown, more, path)


def file_index(path: PathLike) -> int | None:
    """The ``_NNN`` index of a trace file name (R-ROOT-4), or ``None`` when it has none."""
    parsed = parse_trace_name(path)
    return parsed[1] if parsed is not None else None
