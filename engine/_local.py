"""LocalEnvironment: runs registered ``Tool``s in a workspace with central framing (SPEC §5.5).

Owns: the Environment protocol for local tools — lookup, argument parsing and validation
(R-TOOL-5), the ``partial_tool_call_output`` framing and the one complete ``tool_call_output``
(R-TOOL-1, R-STREAM-1/2/4), online head truncation with the scratchpad archive (R-TOOL-2,
R-ROOT-9 file modes), timeouts and user aborts (R-TOOL-3), the never-empty rule (R-TOOL-4) and
``ToolContext`` with workspace path confinement.  Does not: approve calls (the engine does), know
any particular tool (``engine._tools``), or write traces.

How a running tool is interrupted: ``execute`` is an async generator, so it cannot hold a task
group or cancel scope across its ``yield``s.  Instead it advances the tool one item at a time;
each advance runs inside a cancel scope carrying the call's deadline and a task group in which
``signal.wait()`` cancels the advance when the user aborts.  A cancelled tool is then closed
(``aclose`` under a shield) before the closing fragments are emitted, so its resources (e.g. a
process group) are gone by the time the complete output is seen.  A ``Tool`` declared
``interruptible=False`` (``run_subagent``) is not cancelled on abort: it ends by itself.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import os
import re
import secrets
import shutil
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, TypeVar

import anyio
import msgspec
import pydantic

from eventstore import (
    OmniMessage,
    StopReason,
    ToolCallPayload,
    ToolDefinition,
    create_private,
    make_private_dirs,
)
from eventstore.partials import SegmentWriter
from projections import markers as mk

from ._config import check_workspace
from ._protocols import ApproveFn
from ._sandbox import (
    Confinement,
    SandboxMode,
    SandboxPolicy,
    make_private_tmpdir,
    run_confined,
)
from ._signal import AbortSignal
from ._subagent import SubagentRunner, subagent_tool
from ._tools import Tool, ToolError, ToolItem, ToolResult, builtin_tools

__all__ = [
    "ABORTED_NOTE",
    "ARCHIVE_DIR",
    "NO_OUTPUT",
    "LocalEnvironment",
    "ToolContext",
]

ABORTED_NOTE: Final = mk.PLACEHOLDER_ABORTED
NO_OUTPUT: Final = mk.NO_OUTPUT
ARCHIVE_DIR: Final = "truncated-tool-output"

_DEFAULT_MAX_OUTPUT: Final = 16000
_DEFAULT_TIMEOUT_MS: Final = 120000
# Archive text is buffered in memory and written out in batches of about this many characters.
_SPILL_CHARS: Final = 1 << 20
# Upper bound on closing a tool after an interrupt; a tool that will not finish its cleanup by
# then is abandoned rather than allowed to hang the session.
_CLOSE_BOUND_S: Final = 10.0
_ID_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")

T = TypeVar("T")


# --------------------------------------------------------------------------- ToolContext


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a tool may use while it runs.

    ``workspace`` is the resolved workspace directory; ``scratchpad`` the session scratchpad (or
    ``None``); ``approve`` the caller's approve callback (a tool running a nested session passes
    it on, R-SUB-5).  Paths coming from the model go through ``resolve``.
    """

    workspace: Path
    signal: AbortSignal
    tool_call_id: str
    scratchpad: Path | None = None
    approve: ApproveFn | None = None
    confinement: Confinement | None = None

    def resolve(self, path: str | os.PathLike[str], *, write: bool = False) -> Path:
        """The real path of ``path`` (relative to the workspace, or absolute inside it, inside
        the session scratchpad or inside the sandbox's private temporary directory).

        Symlinks are resolved before the check, so ``..`` escapes, absolute paths elsewhere and
        links pointing out all raise ``ToolError`` — the tool fails and nothing is touched.
        ``write``: the path must also be writable under the session's sandbox (R-BOX-2), so a
        ``read-only`` session's file tools write nothing but its temporary directory.
        """
        real = self._resolve(path)
        box = self.confinement
        writable = [] if box is None or not write else box.writable()
        if box is not None and writable and not any(real.is_relative_to(r) for r in writable):
            raise ToolError(
                f"the sandbox ({box.policy.mode}) does not allow writing {os.fspath(path)}"
            )
        if box is not None and writable and (beside := box.beside_hidden(real)) is not None:
            raise ToolError(
                f"cannot create {os.fspath(path)}: the data root {beside} lies inside the "
                "workspace, so the sandbox allows no new entry in the directories on the way "
                "to it; use a subdirectory, or keep the data root outside the workspace"
            )
        return real

    def run_confined(self, fn: Callable[[], T]) -> T:
        """``fn()`` under the session's sandbox rules (blocking: call it in a worker thread), so
        the kernel refuses what the path check could miss (a symlink swapped in meanwhile)."""
        return run_confined(self.confinement, fn)

    def _resolve(self, path: str | os.PathLike[str]) -> Path:
        raw = os.fspath(path)
        if not raw.strip():
            raise ToolError("the path is empty")
        if "\x00" in raw:
            raise ToolError("the path contains a NUL character")
        candidate = Path(raw)
        if not candidate.is_absolute():
            candidate = self.workspace / candidate
        real = Path(os.path.realpath(candidate))
        if real.is_relative_to(self.workspace):
            return real
        # The session's own scratchpad is the agent's too: goal mode's GOAL.yaml and PLAN.md
        # live there (SPEC §18), as do archived outputs it may want to read back.
        if self.scratchpad is not None and real.is_relative_to(os.path.realpath(self.scratchpad)):
            return real
        tmpdir = None if self.confinement is None else self.confinement.tmpdir
        if tmpdir is not None and real.is_relative_to(os.path.realpath(tmpdir)):
            return real
        raise ToolError(f"path is outside the workspace: {raw}")

    def display(self, path: Path) -> str:
        """``path`` as shown to the model: relative to the workspace, ``/``-separated."""
        try:
            rel = path.relative_to(self.workspace)
        except ValueError:
            return str(path)
        return rel.as_posix() or "."


# --------------------------------------------------------------------------- LocalEnvironment


class LocalEnvironment:
    """The Environment for local tools (API.md "The Environment protocol").

    ``tools=None`` registers the four built-ins.  ``max_output_length`` (characters, ``<= 0``
    disables truncation) and ``default_timeout_ms`` (``<= 0`` disables it; a ``Tool`` or an
    ``exec_command`` call may override it) apply to every call.

    ``subagents`` (a ``SubagentRunner``) adds the ``run_subagent`` tool (SPEC §11); the runner
    is injected so that the environment never depends on the layers that run sessions.

    The scratchpad receives the full text of truncated outputs.  The engine learns the session's
    scratchpad only once it has allocated the session id, so it may be given later with
    ``bind_scratchpad``; without one, truncated outputs carry no archive note.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        tools: Sequence[Tool[Any]] | None = None,
        max_output_length: int = _DEFAULT_MAX_OUTPUT,
        default_timeout_ms: int = _DEFAULT_TIMEOUT_MS,
        scratchpad: str | os.PathLike[str] | None = None,
        subagents: SubagentRunner | None = None,
        sandbox: SandboxMode = "workspace-write",
        network: bool | None = None,
    ) -> None:
        self._workspace = check_workspace(workspace)
        self._sandbox = SandboxPolicy.of(sandbox, network)
        self._data_root: Path | None = None
        self._own_files: Callable[[], Sequence[Path]] = tuple
        self._tmpdir: Path | None = None
        registered = builtin_tools() if tools is None else list(tools)
        if subagents is not None:
            registered.append(subagent_tool(subagents))
        self._tools: dict[str, Tool[Any]] = {}
        for tool in registered:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name: {tool.name}")
            self._tools[tool.name] = tool
        self._max_output_length = max_output_length
        self._default_timeout_ms = default_timeout_ms
        self._scratchpad: Path | None = None
        self.bind_scratchpad(scratchpad)

    def __repr__(self) -> str:
        return f"LocalEnvironment({str(self._workspace)!r}, tools={list(self._tools)!r})"

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def scratchpad(self) -> Path | None:
        return self._scratchpad

    @property
    def tools(self) -> tuple[Tool[Any], ...]:
        return tuple(self._tools.values())

    @property
    def max_output_length(self) -> int:
        return self._max_output_length

    @property
    def default_timeout_ms(self) -> int:
        return self._default_timeout_ms

    @property
    def sandbox(self) -> SandboxPolicy:
        """The sandbox every tool of this environment runs under (SPEC §25)."""
        return self._sandbox

    def set_sandbox(self, policy: SandboxPolicy) -> None:
        """Use ``policy`` from now on; ``SandboxUnavailable`` if the kernel cannot enforce it
        (R-BOX-2) — then nothing changes."""
        policy.check()
        self._sandbox = policy

    def bind_session(self, *, data_root: Path, own_files: Callable[[], Sequence[Path]]) -> None:
        """The session's data root, hidden from its tools but for ``own_files()`` (its trace
        files) and its scratchpad (R-BOX-1)."""
        self._data_root = data_root
        self._own_files = own_files

    def confinement(self) -> Confinement | None:
        """The rules of the next call: ``None`` when the sandbox is off and the network on."""
        policy = self._sandbox
        if not policy.confined:
            return None
        if policy.confines_files and self._tmpdir is None:
            self._tmpdir = make_private_tmpdir(self._data_root)
        hidden = [] if self._data_root is None else [self._data_root]
        if self._tmpdir is not None and not any(self._tmpdir.is_relative_to(h) for h in hidden):
            hidden.append(self._tmpdir.parent)  # other sessions' temporary directories
        return Confinement(
            policy=policy,
            workspace=self._workspace,
            tmpdir=self._tmpdir,
            scratchpad=self._scratchpad,
            hidden=tuple(hidden),
            own=self._own_files,
        )

    def bind_scratchpad(self, path: str | os.PathLike[str] | None) -> None:
        """Set (or clear) the session scratchpad used for truncated-output archives.

        The directory need not exist: it is created (mode 0700) on the first archive.
        """
        self._scratchpad = None if path is None else Path(path).absolute()

    async def list_tools(self) -> list[ToolDefinition]:
        return [tool.definition for tool in self._tools.values()]

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        tool = self._tools.get(name)
        return None if tool is None else tool.permission

    async def aclose(self) -> None:
        """Nothing outlives a call (each ``execute`` reaps what it started) but the private
        temporary directory, removed here; idempotent."""
        tmpdir, self._tmpdir = self._tmpdir, None
        if tmpdir is not None:
            await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, tmpdir, True))

    async def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None = None
    ) -> AsyncIterator[OmniMessage]:
        """Run ``call``: ``partial_tool_call_output`` start, deltas, stop, then exactly one
        ``tool_call_output`` (R-TOOL-1); never raises for tool or argument failures."""
        payload = call.payload
        if not isinstance(payload, ToolCallPayload):
            raise TypeError(f"execute expects a tool_call, got {type(payload).__name__}")
        call_id = payload.tool_call_id
        seg = SegmentWriter("tool_call_output", tool_call_id=call_id)
        yield seg.start()
        tool = self._tools.get(payload.name)
        if tool is None:
            for msg in _failure(seg, mk.unknown_tool(payload.name)):
                yield msg
            return
        parsed = _parse_arguments(tool, payload.arguments)
        if isinstance(parsed, str):
            for msg in _failure(seg, parsed):
                yield msg
            return
        try:
            confinement = self.confinement()
        except OSError as exc:
            for msg in _failure(seg, mk.tool_error(f"the sandbox could not be prepared: {exc}")):
                yield msg
            return
        ctx = ToolContext(
            workspace=self._workspace,
            signal=signal,
            tool_call_id=call_id,
            scratchpad=self._scratchpad,
            approve=approve,
            confinement=confinement,
        )
        # The inner generator is closed explicitly: a consumer that abandons ``execute`` must
        # stop the tool now, not whenever the garbage collector finalizes it.
        async with contextlib.aclosing(self._run(tool, parsed, ctx, seg)) as run:
            async for msg in run:
                yield msg

    # ----------------------------------------------------------------------- the run itself

    def _timeout_ms(self, tool: Tool[Any], args: pydantic.BaseModel) -> int:
        per_call = getattr(args, "timeout_ms", None)
        if isinstance(per_call, int) and not isinstance(per_call, bool):
            return per_call
        return self._default_timeout_ms if tool.timeout_ms is None else tool.timeout_ms

    async def _run(
        self, tool: Tool[Any], args: pydantic.BaseModel, ctx: ToolContext, seg: SegmentWriter
    ) -> AsyncGenerator[OmniMessage, None]:
        call_id = ctx.tool_call_id
        signal = ctx.signal
        timeout_ms = self._timeout_ms(tool, args)
        deadline = anyio.current_time() + timeout_ms / 1000 if timeout_ms > 0 else math.inf
        out = _Output(self._max_output_length, self._scratchpad, call_id)
        facts = _Facts()
        try:
            items: AsyncIterator[ToolItem] | None = None
            try:
                if signal.aborted:
                    facts.end = _End.ABORTED
                else:
                    try:
                        items = _as_items(tool.run(args, ctx))
                    except Exception as exc:
                        facts.end, facts.raised = _End.RAISED, exc
                # A non-interruptible tool ends by itself once the signal fires (Tool docs).
                watched = signal if tool.interruptible else None
                while items is not None:
                    step = await _advance(items, watched, deadline)
                    facts.timer_fired = facts.timer_fired or step.timer_fired
                    item = step.item
                    if isinstance(item, _End):
                        facts.end = item
                        break
                    if isinstance(item, _Raised):
                        facts.end, facts.raised = _End.RAISED, item.exc
                        break
                    if isinstance(item, OmniMessage):
                        if item.origin:
                            yield item  # a nested session's message passes through (R-TOOL-1)
                        else:
                            _warn(f'tool "{tool.name}" yielded a message without origin; ignored')
                        continue
                    text = facts.take(item)
                    if text is None:
                        facts.end = _End.RAISED
                        facts.raised = TypeError(f"tool produced {type(item).__name__}")
                        break
                    if text:
                        delta = out.add(text)
                        await out.spill()
                        if delta:
                            yield seg.delta(delta)
            finally:
                if items is not None:
                    await _close(items)
            # R-TOOL-3: the verdict is frozen before any archive I/O, so a late abort cannot
            # reclassify a call that has already ended.
            stop_reason, final_note = facts.verdict(signal, timeout_ms)
            archive = await out.save() if out.truncated else None

            notes: list[str] = []
            if out.truncated:
                notes.append(mk.output_truncated_note(self._max_output_length))
                if archive is not None:
                    notes.append(mk.output_archived_note(str(archive)))
            if facts.note:
                notes.append(facts.note)
            if final_note:
                notes.append(final_note)
            content = out.text
            if not content and not notes:
                notes.append(NO_OUTPUT)  # R-TOOL-4
            tail = "\n".join(notes)
            if tail:
                # R-STREAM-2: the notes are streamed too, so the fragments add up to the output.
                yield seg.delta(f"\n{tail}" if content else tail)
            images = facts.images if stop_reason == "completed" else None
            if images:
                yield seg.delta("", images=images)
            for msg in seg.stop(stop_reason):
                yield msg
        finally:
            out.discard()


# --------------------------------------------------------------------------- arguments


def _parse_arguments(tool: Tool[Any], raw: str) -> pydantic.BaseModel | str:
    """The validated argument model, or the R-TOOL-5 failure sentence."""
    name = tool.name
    if not raw.strip():
        return mk.arguments_empty(name)
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return mk.arguments_invalid_json(name, _one_line(exc))
    try:
        model: type[pydantic.BaseModel] = tool.args
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in exc.errors()
        )
        return mk.arguments_schema_mismatch(name, _one_line(detail))


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _failure(seg: SegmentWriter, message: str) -> Iterator[OmniMessage]:
    yield seg.delta(message)
    yield from seg.stop("failed")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


_log = logging.getLogger("engine")


def _warn(message: str) -> None:
    _log.warning("[penguin] %s", message)


# --------------------------------------------------------------------------- stepping a tool


class _End(Enum):
    DONE = "done"
    ABORTED = "aborted"
    TIMEOUT = "timeout"
    RAISED = "raised"


@dataclass
class _Facts:
    """What is known about a call when its tool stops: how it ended and what it reported."""

    end: _End = _End.DONE
    raised: Exception | None = None
    timer_fired: bool = False
    note: str | None = None
    status: StopReason | None = None
    images: list[str] | None = None

    def take(self, item: object) -> str | None:
        """Record a content item's terminal facts; its text, or ``None`` if it is no item."""
        if isinstance(item, str):
            return item
        if isinstance(item, ToolResult):
            self.note = item.note or self.note
            self.status = item.status or self.status
            self.images = list(item.images) if item.images else self.images
            return item.output
        return None

    def verdict(self, signal: AbortSignal, timeout_ms: int) -> tuple[StopReason, str | None]:
        """R-TOOL-3: user abort > timeout > tool raised > tool self-report."""
        raised = self.end is _End.RAISED
        timed_out = self.end is _End.TIMEOUT or (raised and self.timer_fired)
        if (
            self.end is _End.ABORTED
            or (raised and signal.aborted)
            or (self.status == "aborted" and not timed_out)
        ):
            return "aborted", ABORTED_NOTE
        if timed_out:
            return "failed", mk.tool_timeout_note(timeout_ms)
        if self.raised is not None:
            return "failed", mk.tool_error(_describe(self.raised))
        return self.status or "completed", None


@dataclass(frozen=True)
class _Raised:
    exc: Exception


@dataclass(frozen=True)
class _Step:
    item: ToolItem | _End | _Raised
    timer_fired: bool


class _OneShot:
    """An ``async def`` tool seen as a one-item iterator."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self._awaitable: Awaitable[Any] | None = awaitable

    def __aiter__(self) -> _OneShot:
        return self

    async def __anext__(self) -> Any:
        awaitable, self._awaitable = self._awaitable, None
        if awaitable is None:
            raise StopAsyncIteration
        return await awaitable

    async def aclose(self) -> None:
        awaitable, self._awaitable = self._awaitable, None
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never started: close it so it is not reported as never awaited


def _as_items(produced: object) -> AsyncIterator[ToolItem]:
    if hasattr(produced, "__anext__"):
        return produced  # type: ignore[return-value]
    if inspect.isawaitable(produced):
        return _OneShot(produced)
    raise TypeError(
        f"run returned {type(produced).__name__}; expected a coroutine or an async generator"
    )


async def _cancel_on_abort(signal: AbortSignal, scope: anyio.CancelScope) -> None:
    await signal.wait()
    scope.cancel()


async def _advance(
    items: AsyncIterator[ToolItem], signal: AbortSignal | None, deadline: float
) -> _Step:
    """The tool's next item, or why there is none; interrupted by abort (unless ``signal`` is
    ``None``) and by the deadline."""
    if signal is not None and signal.aborted:
        return _Step(_End.ABORTED, False)
    if anyio.current_time() >= deadline:
        return _Step(_End.TIMEOUT, True)
    result: ToolItem | _End | _Raised | None = None
    with anyio.CancelScope(deadline=deadline) as timer:
        async with anyio.create_task_group() as tg:
            if signal is not None:
                tg.start_soon(_cancel_on_abort, signal, tg.cancel_scope)
            try:
                result = await items.__anext__()
            except StopAsyncIteration:
                result = _End.DONE
            except Exception as exc:
                result = _Raised(exc)
            finally:
                tg.cancel_scope.cancel()
    fired = timer.cancel_called
    if result is None:  # the advance itself was cancelled by one of the two scopes above
        result = _End.ABORTED if signal is not None and signal.aborted else _End.TIMEOUT
    return _Step(result, fired)


async def _close(items: AsyncIterator[ToolItem]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is None:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_BOUND_S):
        try:
            await aclose()
        except Exception as exc:
            _warn(f"a tool raised while closing: {_describe(exc)}")


# --------------------------------------------------------------------------- output and archive


class _Output:
    """Online head truncation (R-TOOL-2) plus the full-text capture for the archive."""

    def __init__(self, limit: int, scratchpad: Path | None, call_id: str) -> None:
        self._limit = limit
        self._kept: list[str] = []
        self._kept_len = 0
        self._total_len = 0
        self._scratchpad = scratchpad
        self._call_id = call_id
        self._archive: _Archive | None = None

    @property
    def text(self) -> str:
        return "".join(self._kept)

    @property
    def truncated(self) -> bool:
        return self._limit > 0 and self._total_len > self._limit

    def add(self, chunk: str) -> str:
        """Account for ``chunk``; return the part that still fits (the delta to stream)."""
        self._total_len += len(chunk)
        if self._limit <= 0:
            self._kept.append(chunk)
            return chunk
        if self._total_len > self._limit and self._scratchpad is not None:
            if self._archive is None:
                self._archive = _Archive(self._scratchpad, self._call_id)
                self._archive.append(self.text)
            self._archive.append(chunk)
        room = self._limit - self._kept_len
        part = chunk[:room] if room > 0 else ""
        if part:
            self._kept.append(part)
            self._kept_len += len(part)
        return part

    async def spill(self) -> None:
        if self._archive is not None and self._archive.pending >= _SPILL_CHARS:
            await self._archive.flush()

    async def save(self) -> Path | None:
        if self._archive is None:
            return None
        return await self._archive.save()

    def discard(self) -> None:
        if self._archive is not None:
            self._archive.close()


class _Archive:
    """``<scratchpad>/truncated-tool-output/<call id>-<8 hex>.txt``: dirs 0700, file 0600."""

    def __init__(self, scratchpad: Path, call_id: str) -> None:
        self._dir = scratchpad / ARCHIVE_DIR
        self._stem = _ID_UNSAFE.sub("_", call_id)[:64] or "call"
        self._buffer: list[str] = []
        self.pending = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._failed = False

    def append(self, text: str) -> None:
        if not self._failed and text:
            self._buffer.append(text)
            self.pending += len(text)

    async def flush(self) -> None:
        data = "".join(self._buffer).encode("utf-8", errors="replace")
        self._buffer.clear()
        self.pending = 0
        if self._failed:
            return
        try:
            await anyio.to_thread.run_sync(self._write, data)
        except OSError as exc:
            self._failed = True
            _warn(f"could not archive a truncated tool output: {_describe(exc)}")

    async def save(self) -> Path | None:
        await self.flush()
        self.close()
        return None if self._failed else self._path

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def _write(self, data: bytes) -> None:
        if self._file is None:
            self._open()
        assert self._file is not None
        self._file.write(data)
        self._file.flush()

    def _open(self) -> None:
        _private_dirs(self._dir)
        for _ in range(16):
            path = self._dir / f"{self._stem}-{secrets.token_hex(4)}.txt"
            try:
                self._file = create_private(path)  # 0600, never through a symlink (R-ROOT-9)
            except FileExistsError:
                continue
            self._path = path
            return
        raise FileExistsError(f"no free archive name under {self._dir}")


def _private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700 (R-ROOT-9); refuse a symlink."""
    if not path.is_symlink():
        make_private_dirs(path)
    if path.is_symlink() or not path.is_dir():
        raise NotADirectoryError(f"not a private directory: {path}")
