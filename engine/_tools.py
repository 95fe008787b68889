"""Tools for ``LocalEnvironment``: the ``Tool`` record and the four built-ins (SPEC §5.5).

Owns: how a tool is declared (name, description, a pydantic argument model, a ``run`` callable,
permission, timeout), the JSON Schema the model is shown, ``ToolResult``/``ToolError``, and the
built-ins ``exec_command``, ``read_file``, ``write_file``, ``edit_file``.  Does not: frame
output, truncate, time out or interrupt tools — ``engine._local`` does that centrally for every
tool, so a tool only produces content.

The ``run`` contract (one shape, two spellings):

* ``run(args, ctx)`` is called with a validated instance of the tool's ``args`` model and a
  ``ToolContext``.  It either is an ``async def`` that *returns* one item, or an async generator
  that *yields* items as they become available (streamed output).
* An item is a ``str`` (content, appended to the output and streamed as a delta), a
  ``ToolResult`` (its ``output`` is content like a ``str``; its ``note``, ``status`` and ``images``
  are the tool's terminal facts, the last non-empty value of each winning), or an origin-tagged
  ``OmniMessage`` of a nested session, which is passed through unchanged (R-TOOL-1).
* Failures are raised: ``ToolError(message)`` (or any ``Exception``) becomes the
  ``[tool error] <message>`` note with stop_reason ``failed`` (R-TOOL-2, R-TOOL-7).
* Tools need not watch ``ctx.signal``: the environment cancels a running tool when the signal
  fires or its timeout expires, so a tool must release its resources in ``finally`` blocks under
  a shielded cancel scope, and an async-generator tool must never ``yield`` inside a cancel scope
  or task group.
* A tool whose ``args`` model has a ``timeout_ms`` field lets the model override the tool's
  timeout per call (``exec_command`` does).
"""

from __future__ import annotations

import codecs
import functools
import os
import re
import signal as _signals
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeAlias, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from eventstore import OmniMessage, StopReason, ToolDefinition

from ._exceptions import SandboxUnavailable
from ._spawn import ToolProcess, open_tool_process

if TYPE_CHECKING:
    from ._local import ToolContext

__all__ = [
    "EditFileArgs",
    "ExecCommandArgs",
    "ReadFileArgs",
    "Tool",
    "ToolError",
    "ToolItem",
    "ToolResult",
    "WriteFileArgs",
    "builtin_tools",
    "edit_file_tool",
    "exec_command_tool",
    "read_file_tool",
    "tool_schema",
    "write_file_tool",
]


class ToolError(Exception):
    """A tool failure meant for the model: becomes ``[tool error] <message>`` (failed)."""


@dataclass(frozen=True)
class ToolResult:
    """One item of a tool's output carrying terminal facts besides content.

    ``output`` is content; ``note`` is the tool's own terminal note (e.g. ``[exit code: 1]``),
    appended after the truncation notes so it survives truncation; ``status`` is the tool's
    self-reported stop_reason (``None`` = completed); ``images`` are ``data:`` URLs, kept only when
    the call completes.
    """

    output: str = ""
    _: KW_ONLY
    images: Sequence[str] | None = None
    note: str | None = None
    status: StopReason | None = None


ToolItem: TypeAlias = "str | ToolResult | OmniMessage"
"""What a tool produces: content, terminal facts, or a nested session's origin-tagged message."""

A = TypeVar("A", bound=BaseModel)
T = TypeVar("T")

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Tool(Generic[A]):
    """A tool ``LocalEnvironment`` can run; see the module docstring for the ``run`` contract.

    ``permission`` is what ``Environment.tool_permission`` reports (``"r"`` = read-only).
    ``timeout_ms`` overrides the environment's default timeout for this tool (``<= 0`` disables
    it; ``None`` = the environment default).  ``interruptible=False`` means the tool watches
    ``ctx.signal`` itself and ends promptly once it fires (reporting ``ToolResult(status=
    "aborted")``), so the environment does not cancel it on abort and it can finish its own
    protocol — a nested session runs its abort path and forwards it.  Timeouts still cancel it.
    ``parameters`` replaces the JSON Schema generated from ``args`` (a tool whose schema comes
    from elsewhere, e.g. an MCP server's ``inputSchema``).
    """

    name: str
    description: str
    args: type[A]
    run: Callable[[A, ToolContext], Awaitable[str | ToolResult] | AsyncIterator[ToolItem]]
    _: KW_ONLY
    permission: Literal["r", "rw"] = "rw"
    timeout_ms: int | None = None
    interruptible: bool = True
    parameters: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use 1-64 of [A-Za-z0-9_-]")
        if not (isinstance(self.args, type) and issubclass(self.args, BaseModel)):
            raise TypeError(f"tool {self.name!r}: args must be a pydantic BaseModel subclass")
        if self.permission not in ("r", "rw"):
            raise ValueError(f"tool {self.name!r}: permission must be 'r' or 'rw'")

    @property
    def definition(self) -> ToolDefinition:
        """What the model is told: the description and the JSON Schema of ``args``."""
        parameters = self.parameters if self.parameters is not None else tool_schema(self.args)
        return ToolDefinition(name=self.name, description=self.description, parameters=parameters)


# --------------------------------------------------------------------------- JSON Schema


def tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` as sent to the model: deterministic and free of noise.

    pydantic's schema is cleaned: ``title`` keywords are dropped (the property names already say
    it), and an optional field spelled ``X | None = None`` is shown as plain ``X`` (it is simply
    not required), which providers with strict schema dialects accept more readily.
    """
    cleaned: dict[str, Any] = _clean(model.model_json_schema())
    return cleaned


# Keywords whose value maps names to schemas (the names themselves are not schema keywords).
_NAME_MAPS: Final = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _clean(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {name: _clean(sub) for name, sub in value.items()}
        else:
            out[key] = _clean(value)
    props = out.get("properties")
    if isinstance(props, dict):
        required = set(out.get("required", ()))
        for name, sub in list(props.items()):
            if name not in required:
                props[name] = _drop_nullable(sub)
    return out


def _drop_nullable(prop: Any) -> Any:
    if not isinstance(prop, dict) or prop.get("default", 0) is not None:
        return prop
    variants = prop.get("anyOf")
    if not isinstance(variants, list):
        return prop
    kept = [v for v in variants if v != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(variants) or not isinstance(kept[0], dict):
        return prop
    merged = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    merged.update(kept[0])
    return dict(sorted(merged.items()))


# --------------------------------------------------------------------------- argument models


class ExecCommandArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: str = Field(min_length=1, description="The command line, run by /bin/sh -c.")
    timeout_ms: int | None = Field(
        default=None,
        ge=1,
        description="Kill the command after this many milliseconds (default: the tool timeout).",
    )
    workdir: str | None = Field(
        default=None,
        description="Working directory, relative to the workspace (default: the workspace).",
    )


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace.")
    offset: int | None = Field(
        default=None, ge=1, description="First line to return, 1-based (default: 1)."
    )
    limit: int | None = Field(
        default=None, ge=1, description="Maximum number of lines to return (default: all)."
    )


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace.")
    content: str = Field(description="The complete new content of the file.")


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace.")
    old: str = Field(min_length=1, description="Exact text to replace; it must occur exactly once.")
    new: str = Field(description="Replacement text.")


# --------------------------------------------------------------------------- exec_command

# How long to wait for output before checking whether the shell has exited while a background
# descendant still holds the pipe open (we stop reading then rather than wait for it).
_POLL_S: Final = 0.1
# SIGTERM grace before SIGKILL, and how long to wait for the group to vanish afterwards.
_TERM_GRACE_S: Final = 0.5
_KILL_WAIT_S: Final = 2.0
_READ_CHUNK: Final = 65536


async def _exec_command(args: ExecCommandArgs, ctx: ToolContext) -> AsyncIterator[ToolItem]:
    cwd = ctx.workspace
    if args.workdir is not None:
        cwd = ctx.resolve(args.workdir)
        if not cwd.is_dir():
            raise ToolError(f"workdir is not a directory: {args.workdir}")
    box = ctx.confinement
    env: dict[str, str] | None = None
    if box is not None and box.tmpdir is not None:
        # The private temporary directory: the only writable temp of a sandboxed command.
        env = {**os.environ, "TMPDIR": str(box.tmpdir), "TMP": str(box.tmpdir)}
        env["TEMP"] = env["TMP"]
    try:
        proc = await open_tool_process(
            ["/bin/sh", "-c", args.cmd], cwd=cwd, env=env, confinement=box
        )
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise ToolError(f"cannot start the command: {exc.strerror or exc}") from None
    finished = False
    try:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            data: bytes | None = None
            eof = False
            with anyio.move_on_after(_POLL_S):
                try:
                    data = await proc.receive(_READ_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    eof = True
            if eof:
                break
            if data is None:
                if proc.returncode is not None:
                    break  # the shell is gone; a background child keeps the pipe open
                continue
            text = decoder.decode(data)
            if text:
                yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail
        code = await proc.wait()
        finished = True
        yield ToolResult(note=f"[exit code: {code}]", status="failed" if code != 0 else None)
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:
                await _kill_group(proc)
            await proc.aclose()


async def _kill_group(proc: ToolProcess) -> None:
    """SIGTERM the process group, SIGKILL it after a short grace, and reap the leader."""
    pgid = proc.pid
    if _signal_group(pgid, _signals.SIGTERM) and not await _group_dies(pgid, _TERM_GRACE_S):
        _signal_group(pgid, _signals.SIGKILL)
        await _group_dies(pgid, _KILL_WAIT_S)
    with anyio.move_on_after(_KILL_WAIT_S):
        await proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # the id now names somebody else's group: nothing of ours is left
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a member of the group still runs.

    ``killpg(pgid, 0)`` also succeeds for zombies, and a killed shell's children are orphaned
    zombies until init reaps them — which some container inits do only every few seconds, and a
    non-init PID 1 never.  A zombie no longer runs, so on Linux the members' states are read
    from ``/proc`` instead; elsewhere the ``killpg`` probe is the answer.
    """
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return True
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue  # exited meanwhile
        # Fields after the parenthesized command name: state, ppid, pgrp, ...
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _group_dies(pgid: int, within_s: float) -> bool:
    give_up = anyio.current_time() + within_s
    while True:
        if not await anyio.to_thread.run_sync(_group_alive, pgid):
            return True
        if anyio.current_time() >= give_up:
            return False
        await anyio.sleep(0.01)


def exec_command_tool() -> Tool[ExecCommandArgs]:
    return Tool(
        "exec_command",
        "Run a shell command (/bin/sh -c) in the workspace. stdout and stderr are merged and "
        "streamed; the output ends with [exit code: <n>]. A non-zero exit code fails the call.",
        ExecCommandArgs,
        _exec_command,
        permission="rw",
    )


# --------------------------------------------------------------------------- file tools


def _read_text(path: Path, display: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"file not found: {display}") from None
    except IsADirectoryError:
        raise ToolError(f"not a file: {display}") from None
    except OSError as exc:
        raise ToolError(f"cannot read {display}: {exc.strerror or exc}") from None
    if b"\x00" in raw[:8192]:
        raise ToolError(f"{display} looks like a binary file")
    return raw.decode("utf-8", errors="replace")


async def _confined(ctx: ToolContext, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a worker thread under the session's sandbox (R-BOX-2)."""
    try:
        return await anyio.to_thread.run_sync(ctx.run_confined, functools.partial(fn, *args))
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None


async def _read_file(args: ReadFileArgs, ctx: ToolContext) -> str:
    path = ctx.resolve(args.path)
    display = ctx.display(path)
    text = await _confined(ctx, _read_text, path, display)
    if args.offset is None and args.limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = (args.offset or 1) - 1
    if start >= len(lines) and lines:
        raise ToolError(f"offset {args.offset} is past the end of {display} ({len(lines)} lines)")
    end = len(lines) if args.limit is None else start + args.limit
    return "".join(lines[start:end])


def _write_text(path: Path, display: str, content: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    except OSError as exc:
        raise ToolError(f"cannot write {display}: {exc.strerror or exc}") from None


async def _write_file(args: WriteFileArgs, ctx: ToolContext) -> str:
    path = ctx.resolve(args.path, write=True)
    display = ctx.display(path)
    if path == ctx.workspace:
        raise ToolError("cannot write the workspace directory itself")
    data = args.content.encode("utf-8")
    await _confined(ctx, _write_text, path, display, data)
    return f"wrote {len(data)} bytes to {display}"


async def _edit_file(args: EditFileArgs, ctx: ToolContext) -> str:
    path = ctx.resolve(args.path, write=True)
    display = ctx.display(path)
    text = await _confined(ctx, _read_text, path, display)
    count = text.count(args.old)
    if count == 0:
        raise ToolError(f"the old text was not found in {display}; nothing was changed")
    if count > 1:
        raise ToolError(
            f"the old text occurs {count} times in {display}; include more surrounding context "
            "so that it occurs exactly once (nothing was changed)"
        )
    await _confined(
        ctx, _write_text, path, display, text.replace(args.old, args.new, 1).encode("utf-8")
    )
    return f"replaced 1 occurrence in {display}"


def read_file_tool() -> Tool[ReadFileArgs]:
    return Tool(
        "read_file",
        "Read a UTF-8 text file inside the workspace, optionally a window of lines "
        "(offset is the 1-based first line, limit the number of lines).",
        ReadFileArgs,
        _read_file,
        permission="r",
    )


def write_file_tool() -> Tool[WriteFileArgs]:
    return Tool(
        "write_file",
        "Create or overwrite a text file inside the workspace; missing parent directories are "
        "created.",
        WriteFileArgs,
        _write_file,
        permission="rw",
    )


def edit_file_tool() -> Tool[EditFileArgs]:
    return Tool(
        "edit_file",
        "Replace exactly one occurrence of `old` with `new` in a text file inside the "
        "workspace. Fails without changing the file when `old` occurs zero or several times.",
        EditFileArgs,
        _edit_file,
        permission="rw",
    )


def builtin_tools() -> list[Tool[Any]]:
    """The four built-ins, in the order they are listed to the model."""
    return [exec_command_tool(), read_file_tool(), write_file_tool(), edit_file_tool()]
