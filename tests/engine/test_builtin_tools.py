"""The built-in tools exec_command, read_file, write_file and edit_file run through
LocalEnvironment (SPEC §5.5 R-TOOL-1…5, R-STREAM-2; API.md "The Environment protocol")."""

from __future__ import annotations

import os
import signal as signals
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from engine._local import LocalEnvironment
from engine._signal import AbortSignal
from eventstore import OmniMessage, PartialToolCallOutputPayload, ToolCallOutputPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio

CALL = "call_1"
ABORTED = "[interrupted: tool aborted by user]"


# ---------------------------------------------------------------------------- helpers


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def env(ws: Path) -> LocalEnvironment:
    return LocalEnvironment(ws)


def call(name: str, arguments: dict[str, Any] | str) -> OmniMessage:
    return b.tool_call(name, arguments, CALL)


async def execute(
    env: LocalEnvironment, name: str, arguments: dict[str, Any] | str
) -> list[OmniMessage]:
    with anyio.fail_after(20):  # a hang is a failure, not a stuck CI job
        return [
            m async for m in env.execute(call(name, arguments), signal=AbortSignal(), approve=None)
        ]


def framed(msgs: list[OmniMessage]) -> ToolCallOutputPayload:
    """Assert R-TOOL-1 and R-STREAM-1/2 and return the complete output."""
    *partials, last = [m.payload for m in msgs]
    assert isinstance(last, ToolCallOutputPayload)
    frags = [p for p in partials if isinstance(p, PartialToolCallOutputPayload)]
    assert len(frags) == len(partials)
    kinds = [p.event_type for p in frags]
    assert kinds == ["start"] + ["delta"] * (len(kinds) - 2) + ["stop"]
    assert {p.tool_call_id for p in frags} | {last.tool_call_id} == {CALL}
    assert "".join(p.output for p in frags) == last.output  # R-STREAM-2
    assert frags[-1].stop_reason == last.stop_reason
    assert last.output  # R-TOOL-4
    return last


async def run(env: LocalEnvironment, name: str, arguments: dict[str, Any] | str) -> tuple[str, str]:
    out = framed(await execute(env, name, arguments))
    assert out.stop_reason is not None
    return out.output, out.stop_reason


def delta_text(msg: OmniMessage) -> str:
    p = msg.payload
    if isinstance(p, PartialToolCallOutputPayload) and p.event_type == "delta":
        return p.output
    return ""


def group_runs(pgid: int) -> bool:
    """Whether any process of the group still runs.

    ``killpg(pgid, 0)`` alone is not enough: a killed shell's children are orphaned zombies
    (dead, not yet reaped) until init reaps them, which some container inits do only every
    couple of seconds.  So a surviving group is checked member by member in ``/proc``.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp = stat_line.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


# ---------------------------------------------------------------------------- exec_command


async def test_exec_merges_stderr_and_reports_a_failing_exit_code(env: LocalEnvironment) -> None:
    output, status = await run(env, "exec_command", {"cmd": "echo out; echo err >&2; exit 3"})
    assert (output, status) == ("out\nerr\n\n[exit code: 3]", "failed")


async def test_exec_success_and_stdin_is_not_inherited(env: LocalEnvironment) -> None:
    # `cat` would block forever on an inherited terminal/pipe; stdin is /dev/null.
    assert await run(env, "exec_command", {"cmd": "cat"}) == ("[exit code: 0]", "completed")
    assert await run(env, "exec_command", {"cmd": "printf hi"}) == (
        "hi\n[exit code: 0]",
        "completed",
    )


async def test_exec_runs_in_the_workspace_or_a_confined_workdir(
    env: LocalEnvironment, ws: Path
) -> None:
    (ws / "sub").mkdir()
    assert await run(env, "exec_command", {"cmd": "pwd -P"}) == (
        f"{ws}\n\n[exit code: 0]",
        "completed",
    )
    assert await run(env, "exec_command", {"cmd": "pwd -P", "workdir": "sub"}) == (
        f"{ws / 'sub'}\n\n[exit code: 0]",
        "completed",
    )
    assert await run(env, "exec_command", {"cmd": "pwd", "workdir": ".."}) == (
        "[tool error] path is outside the workspace: ..",
        "failed",
    )
    assert await run(env, "exec_command", {"cmd": "pwd", "workdir": "nope"}) == (
        "[tool error] workdir is not a directory: nope",
        "failed",
    )


async def test_exec_streams_output_before_the_process_exits(
    env: LocalEnvironment, ws: Path
) -> None:
    """R-TOOL-1: deltas arrive as output is produced; the command cannot finish until the test
    has seen its first delta and released it through the fifo."""
    fifo = ws / "go"
    os.mkfifo(fifo)

    def release() -> None:
        fd = os.open(fifo, os.O_WRONLY)
        try:
            os.write(fd, b"go\n")
        finally:
            os.close(fd)

    msgs: list[OmniMessage] = []
    released = False
    cmd = "echo ready; read line < go; echo got $line"
    with anyio.fail_after(20):
        async for m in env.execute(
            call("exec_command", {"cmd": cmd}), signal=AbortSignal(), approve=None
        ):
            msgs.append(m)
            if not released and "ready" in "".join(delta_text(x) for x in msgs):
                assert not any(isinstance(x.payload, ToolCallOutputPayload) for x in msgs)
                await anyio.to_thread.run_sync(release)
                released = True
    assert released
    out = framed(msgs)
    assert (out.output, out.stop_reason) == ("ready\ngot go\n\n[exit code: 0]", "completed")


async def test_exec_decodes_utf8_incrementally_across_reads(
    env: LocalEnvironment, ws: Path
) -> None:
    """A multi-byte character split across two reads is decoded whole; bad bytes become U+FFFD."""
    fifo = ws / "go"
    os.mkfifo(fifo)

    def release() -> None:
        fd = os.open(fifo, os.O_WRONLY)
        os.close(fd)

    msgs: list[OmniMessage] = []
    cmd = r"printf 'a\303'; read line < go; printf '\251b\377'"
    with anyio.fail_after(20):
        async for m in env.execute(
            call("exec_command", {"cmd": cmd}), signal=AbortSignal(), approve=None
        ):
            msgs.append(m)
            if delta_text(m) == "a":
                await anyio.to_thread.run_sync(release)
    out = framed(msgs)
    assert out.output == "aéb\ufffd\n[exit code: 0]"
    assert [delta_text(m) for m in msgs if delta_text(m)][:2] == ["a", "éb\ufffd"]


async def test_exec_timeout_kills_the_process_group(env: LocalEnvironment) -> None:
    """R-TOOL-3: per-call timeout_ms; the whole group is gone when the output is complete."""
    cmd = "echo $$; sleep 5; touch finished"
    msgs = await execute(env, "exec_command", {"cmd": cmd, "timeout_ms": 500})
    out = framed(msgs)
    pgid_line, _, rest = out.output.partition("\n")
    assert rest == "\n[tool timeout: exceeded 500ms]"
    assert out.stop_reason == "failed"
    assert not group_runs(int(pgid_line))
    assert not (env.workspace / "finished").exists()  # killed, not waited for


async def test_exec_abort_kills_the_process_group(env: LocalEnvironment) -> None:
    """R-TOOL-3: a user abort while `sleep 30` runs ends the call at once, aborted."""
    signal = AbortSignal()
    msgs: list[OmniMessage] = []
    pgid: int | None = None
    with anyio.fail_after(20):
        async for m in env.execute(
            call("exec_command", {"cmd": "echo $$; echo started; sleep 30; touch finished"}),
            signal=signal,
            approve=None,
        ):
            msgs.append(m)
            seen = "".join(delta_text(x) for x in msgs)
            if pgid is None and "started\n" in seen:
                pgid = int(seen.split()[0])
                assert group_runs(pgid)
                signal.abort()
    assert pgid is not None
    out = framed(msgs)
    assert out.output == f"{pgid}\nstarted\n\n{ABORTED}"
    assert out.stop_reason == "aborted"
    assert not group_runs(pgid)
    assert not (env.workspace / "finished").exists()  # killed, not waited for


async def test_exec_does_not_wait_for_a_background_child_holding_the_pipe(
    env: LocalEnvironment,
) -> None:
    output, status = await run(env, "exec_command", {"cmd": "echo $$; sleep 30 & echo bg"})
    pgid = int(output.split()[0])
    try:
        assert (output.split("\n", 1)[1], status) == ("bg\n\n[exit code: 0]", "completed")
    finally:
        os.killpg(pgid, signals.SIGKILL)


async def test_exec_schema_rejects_bad_calls(env: LocalEnvironment) -> None:
    for args in ({"cmd": ""}, {"cmd": "true", "timeout_ms": 0}, {"cmd": "true", "shell": "x"}):
        output, status = await run(env, "exec_command", args)
        assert status == "failed"
        assert output.startswith(
            'Tool call "exec_command" failed: the arguments do not match the tool schema ('
        )


# ---------------------------------------------------------------------------- read_file


async def test_read_file_whole_and_windows(env: LocalEnvironment, ws: Path) -> None:
    (ws / "f.txt").write_text("one\ntwo\nthree\nfour\n")
    assert await run(env, "read_file", {"path": "f.txt"}) == (
        "one\ntwo\nthree\nfour\n",
        "completed",
    )
    assert await run(env, "read_file", {"path": "f.txt", "offset": 2, "limit": 2}) == (
        "two\nthree\n",
        "completed",
    )
    assert await run(env, "read_file", {"path": str(ws / "f.txt"), "offset": 4}) == (
        "four\n",
        "completed",
    )
    assert await run(env, "read_file", {"path": "f.txt", "offset": 9}) == (
        "[tool error] offset 9 is past the end of f.txt (4 lines)",
        "failed",
    )


async def test_read_file_errors(env: LocalEnvironment, ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x7fELF\x00\x01")
    (ws / "empty").write_text("")
    assert await run(env, "read_file", {"path": "missing.txt"}) == (
        "[tool error] file not found: missing.txt",
        "failed",
    )
    assert await run(env, "read_file", {"path": "d"}) == ("[tool error] not a file: d", "failed")
    assert await run(env, "read_file", {"path": "bin"}) == (
        "[tool error] bin looks like a binary file",
        "failed",
    )
    assert await run(env, "read_file", {"path": "empty"}) == ("[no output]", "completed")


async def test_read_file_refuses_paths_outside(env: LocalEnvironment, ws: Path) -> None:
    secret = ws.parent / "secret.txt"
    secret.write_text("top secret")
    (ws / "link").symlink_to(secret)
    for path in ("../secret.txt", str(secret), "link"):
        output, status = await run(env, "read_file", {"path": path})
        assert (output, status) == (f"[tool error] path is outside the workspace: {path}", "failed")


# ---------------------------------------------------------------------------- write_file


async def test_write_file_creates_parents_and_reports_bytes(
    env: LocalEnvironment, ws: Path
) -> None:
    assert await run(env, "write_file", {"path": "a/b/c.txt", "content": "héllo"}) == (
        "wrote 6 bytes to a/b/c.txt",
        "completed",
    )
    assert (ws / "a" / "b" / "c.txt").read_text() == "héllo"
    assert await run(env, "write_file", {"path": str(ws / "a" / "b" / "c.txt"), "content": ""}) == (
        "wrote 0 bytes to a/b/c.txt",
        "completed",
    )
    assert (ws / "a" / "b" / "c.txt").read_text() == ""


async def test_write_file_never_writes_outside(env: LocalEnvironment, ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    target = outside / "target.txt"
    target.write_text("original")
    (ws / "file_link").symlink_to(target)
    (ws / "dir_link").symlink_to(outside)
    for path in ("../escape.txt", str(outside / "abs.txt"), "file_link", "dir_link/new.txt"):
        output, status = await run(env, "write_file", {"path": path, "content": "pwned"})
        assert (output, status) == (f"[tool error] path is outside the workspace: {path}", "failed")
    assert target.read_text() == "original"
    assert sorted(p.name for p in outside.iterdir()) == ["target.txt"]
    assert not (ws.parent / "escape.txt").exists()


async def test_write_file_onto_a_directory_fails(env: LocalEnvironment, ws: Path) -> None:
    (ws / "d").mkdir()
    output, status = await run(env, "write_file", {"path": "d", "content": "x"})
    assert status == "failed"
    assert output.startswith("[tool error] cannot write d: ")
    output, status = await run(env, "write_file", {"path": ".", "content": "x"})
    assert (output, status) == (
        "[tool error] cannot write the workspace directory itself",
        "failed",
    )


# ---------------------------------------------------------------------------- edit_file


async def test_edit_file_replaces_exactly_one_occurrence(env: LocalEnvironment, ws: Path) -> None:
    (ws / "f.py").write_text("x = 1\ny = 2\n")
    assert await run(env, "edit_file", {"path": "f.py", "old": "y = 2", "new": "y = 3"}) == (
        "replaced 1 occurrence in f.py",
        "completed",
    )
    assert (ws / "f.py").read_text() == "x = 1\ny = 3\n"


async def test_edit_file_zero_or_many_occurrences_fail_untouched(
    env: LocalEnvironment, ws: Path
) -> None:
    (ws / "f.py").write_text("a = 1\na = 1\n")
    assert await run(env, "edit_file", {"path": "f.py", "old": "b", "new": "c"}) == (
        "[tool error] the old text was not found in f.py; nothing was changed",
        "failed",
    )
    assert await run(env, "edit_file", {"path": "f.py", "old": "a = 1", "new": "a = 2"}) == (
        "[tool error] the old text occurs 2 times in f.py; include more surrounding context "
        "so that it occurs exactly once (nothing was changed)",
        "failed",
    )
    assert (ws / "f.py").read_text() == "a = 1\na = 1\n"


async def test_edit_file_other_failures(env: LocalEnvironment, ws: Path) -> None:
    outside = ws.parent / "o.txt"
    outside.write_text("keep")
    (ws / "link").symlink_to(outside)
    assert await run(env, "edit_file", {"path": "link", "old": "keep", "new": "x"}) == (
        "[tool error] path is outside the workspace: link",
        "failed",
    )
    assert outside.read_text() == "keep"
    assert await run(env, "edit_file", {"path": "nope", "old": "a", "new": "b"}) == (
        "[tool error] file not found: nope",
        "failed",
    )
    output, status = await run(env, "edit_file", {"path": "link", "old": "", "new": "b"})
    assert status == "failed"
    assert "do not match the tool schema (old: String should have at least 1 character)" in output


# ---------------------------------------------------------------------------- schemas


async def test_builtin_json_schemas(env: LocalEnvironment) -> None:
    """API.md: the schema sent to the model is generated from the pydantic model (R-MSG-21)."""
    defs = {d.name: d.parameters for d in await env.list_tools()}
    assert defs == {
        "exec_command": {
            "additionalProperties": False,
            "properties": {
                "cmd": {
                    "description": "The command line, run by /bin/sh -c.",
                    "minLength": 1,
                    "type": "string",
                },
                "timeout_ms": {
                    "description": "Kill the command after this many milliseconds "
                    "(default: the tool timeout).",
                    "minimum": 1,
                    "type": "integer",
                },
                "workdir": {
                    "description": "Working directory, relative to the workspace "
                    "(default: the workspace).",
                    "type": "string",
                },
            },
            "required": ["cmd"],
            "type": "object",
        },
        "read_file": {
            "additionalProperties": False,
            "properties": {
                "path": {"description": "File path, relative to the workspace.", "type": "string"},
                "offset": {
                    "description": "First line to return, 1-based (default: 1).",
                    "minimum": 1,
                    "type": "integer",
                },
                "limit": {
                    "description": "Maximum number of lines to return (default: all).",
                    "minimum": 1,
                    "type": "integer",
                },
            },
            "required": ["path"],
            "type": "object",
        },
        "write_file": {
            "additionalProperties": False,
            "properties": {
                "path": {"description": "File path, relative to the workspace.", "type": "string"},
                "content": {
                    "description": "The complete new content of the file.",
                    "type": "string",
                },
            },
            "required": ["path", "content"],
            "type": "object",
        },
        "edit_file": {
            "additionalProperties": False,
            "properties": {
                "path": {"description": "File path, relative to the workspace.", "type": "string"},
                "old": {
                    "description": "Exact text to replace; it must occur exactly once.",
                    "minLength": 1,
                    "type": "string",
                },
                "new": {"description": "Replacement text.", "type": "string"},
            },
            "required": ["path", "old", "new"],
            "type": "object",
        },
    }
    assert [d.description for d in await env.list_tools()] == [
        d.description for d in await LocalEnvironment(env.workspace).list_tools()
    ]
