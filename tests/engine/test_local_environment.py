"""LocalEnvironment framing, truncation, timeouts, aborts and path confinement with scripted tools
(SPEC §5.5 R-TOOL-1…7, §3 R-STREAM-1/2/4, R-ROOT-9 archive modes)."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pydantic import BaseModel

from engine._local import LocalEnvironment, ToolContext
from engine._signal import AbortSignal
from engine._tools import Tool, ToolError, ToolItem, ToolResult, tool_schema
from eventstore import (
    OmniMessage,
    PartialToolCallOutputPayload,
    ToolCallOutputPayload,
    ToolDefinition,
)
from eventstore import builders as b

pytestmark = pytest.mark.anyio

CALL = "call_1"
ABORTED = "[interrupted: tool aborted by user]"


# ---------------------------------------------------------------------------- helpers


class NoArgs(BaseModel):
    pass


class TextArgs(BaseModel):
    text: str
    count: int = 1


def make_tool(run: Any, *, name: str = "t", args: type[BaseModel] = NoArgs, **kw: Any) -> Tool[Any]:
    return Tool(name, "a test tool", args, run, **kw)


async def execute(
    env: LocalEnvironment,
    name: str = "t",
    arguments: str | dict[str, Any] | None = None,
    *,
    call_id: str = CALL,
    signal: AbortSignal | None = None,
) -> list[OmniMessage]:
    call = b.tool_call(name, "{}" if arguments is None else arguments, call_id)
    with anyio.fail_after(20):  # a hang is a failure, not a stuck CI job
        return [m async for m in env.execute(call, signal=signal or AbortSignal(), approve=None)]


def framed(msgs: list[OmniMessage], call_id: str = CALL) -> ToolCallOutputPayload:
    """Assert R-TOOL-1 and R-STREAM-1/2/4 for one call and return its complete output."""
    own = [m.payload for m in msgs if not m.origin]
    *partials, last = own
    assert isinstance(last, ToolCallOutputPayload)
    frags = [p for p in partials if isinstance(p, PartialToolCallOutputPayload)]
    assert len(frags) == len(partials)  # nothing else of this call, and one complete output
    kinds = [p.event_type for p in frags]
    assert kinds == ["start"] + ["delta"] * (len(kinds) - 2) + ["stop"]
    assert frags[0].output == ""
    assert frags[-1].output == ""
    assert {p.tool_call_id for p in frags} | {last.tool_call_id} == {call_id}
    assert "".join(p.output for p in frags) == last.output  # R-STREAM-2
    assert frags[-1].stop_reason == last.stop_reason
    delta_images = [p.images for p in frags if p.images]
    assert (delta_images[-1] if delta_images else None) == last.images
    assert last.output  # R-TOOL-4
    return last


def deltas(msgs: list[OmniMessage]) -> list[str]:
    return [
        m.payload.output
        for m in msgs
        if isinstance(m.payload, PartialToolCallOutputPayload) and m.payload.event_type == "delta"
    ]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def chunks_tool(*items: ToolItem, **kw: Any) -> Tool[Any]:
    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[ToolItem]:
        for item in items:
            yield item

    return make_tool(run, **kw)


def returning(value: Any, **kw: Any) -> Tool[Any]:
    async def run(args: NoArgs, ctx: ToolContext) -> Any:
        return value

    return make_tool(run, **kw)


def raising(exc: Exception, *before: ToolItem) -> Tool[Any]:
    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[ToolItem]:
        for item in before:
            yield item
        raise exc

    return make_tool(run)


# ---------------------------------------------------------------------------- R-TOOL-1 framing


async def test_r_tool_1_async_function_result_is_one_delta(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("hello")])
    msgs = await execute(env)
    out = framed(msgs)
    assert deltas(msgs) == ["hello"]
    assert (out.output, out.stop_reason) == ("hello", "completed")


async def test_r_tool_1_generator_streams_each_chunk_as_a_delta(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[chunks_tool("a", "", "bc", ToolResult("d"))])
    msgs = await execute(env)
    assert deltas(msgs) == ["a", "bc", "d"]
    assert framed(msgs).output == "abcd"


async def test_r_tool_1_the_environment_enforces_the_call_id(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("x")])
    framed(await execute(env, call_id="toolu_ABC"), "toolu_ABC")


async def test_r_tool_1_origin_tagged_messages_pass_through_unchanged(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    nested = b.tool_call_output("child_call", "child says hi", origin=["session-child"])
    stray = b.user_text("no origin")
    env = LocalEnvironment(tmp_path, tools=[chunks_tool("a", nested, stray, "b")])
    msgs = await execute(env)
    assert nested in msgs
    assert stray not in msgs
    assert msgs.index(nested) < len(msgs) - 2  # interleaved before the stop, not after
    assert framed(msgs).output == "ab"
    assert "without origin" in reported()


async def test_execute_refuses_a_message_that_is_not_a_tool_call(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path)
    with pytest.raises(TypeError):
        async for _ in env.execute(b.user_text("hi"), signal=AbortSignal(), approve=None):
            pass


# ---------------------------------------------------------------------------- R-TOOL-4 never empty


async def test_r_tool_4_empty_result_becomes_no_output(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("")])
    msgs = await execute(env)
    out = framed(msgs)
    assert (out.output, out.stop_reason) == ("[no output]", "completed")
    assert deltas(msgs) == ["[no output]"]


async def test_r_tool_4_generator_yielding_nothing_becomes_no_output(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[chunks_tool()])
    assert framed(await execute(env)).output == "[no output]"


async def test_r_tool_4_a_note_alone_is_not_padded(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning(ToolResult(note="[exit code: 0]"))])
    assert framed(await execute(env)).output == "[exit code: 0]"


# ---------------------------------------------------------------------------- R-TOOL-5 bad calls


async def test_r_tool_5_unknown_tool(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("x")])
    msgs = await execute(env, "nope")
    out = framed(msgs)
    assert (out.output, out.stop_reason) == ("Unknown tool: nope", "failed")


async def test_r_tool_5_invalid_json_sentence(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("x", args=TextArgs)])
    out = framed(await execute(env, "t", '{"text": "a"'))
    assert out.stop_reason == "failed"
    assert re.fullmatch(
        r'Tool call "t" failed: the arguments are not valid JSON \([^\n]+\)\. '
        r"Re-issue the call with one complete, valid JSON object\.",
        out.output,
    )


@pytest.mark.parametrize("raw", ["", "   \n"])
async def test_r_tool_5_empty_arguments_sentence(tmp_path: Path, raw: str) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("x", args=TextArgs)])
    out = framed(await execute(env, "t", raw))
    assert out.stop_reason == "failed"
    assert out.output == (
        'Tool call "t" failed: the arguments field is empty. '
        "Re-issue the call with a complete JSON object."
    )


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ('{"count": 2}', "text: Field required"),
        ('{"text": "a", "count": "many"}', "count: Input should be a valid integer"),
        ("[1, 2]", "arguments: Input should be a valid dictionary"),
    ],
)
async def test_r_tool_5_schema_mismatch_sentence(tmp_path: Path, raw: str, detail: str) -> None:
    ran = []

    async def run(args: TextArgs, ctx: ToolContext) -> str:
        ran.append(args)
        return "ran"

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, args=TextArgs)])
    out = framed(await execute(env, "t", raw))
    assert out.stop_reason == "failed"
    assert out.output.startswith(
        'Tool call "t" failed: the arguments do not match the tool schema ('
    )
    assert out.output.endswith("). Re-issue the call with one complete, valid JSON object.")
    assert detail in out.output
    assert "\n" not in out.output
    assert ran == []  # validation happens before the tool runs


async def test_valid_arguments_reach_the_tool_as_a_model(tmp_path: Path) -> None:
    async def run(args: TextArgs, ctx: ToolContext) -> str:
        return args.text * args.count

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, args=TextArgs)])
    assert framed(await execute(env, "t", {"text": "ab", "count": 3})).output == "ababab"


# ---------------------------------------------------------------------------- R-TOOL-2 notes, R-TOOL-3


async def test_r_tool_2_tool_error_note_after_content(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[raising(ToolError("disk on fire"), "partial")])
    msgs = await execute(env)
    out = framed(msgs)
    assert (out.output, out.stop_reason) == ("partial\n[tool error] disk on fire", "failed")
    assert deltas(msgs) == ["partial", "\n[tool error] disk on fire"]


async def test_r_tool_2_any_exception_is_a_tool_error(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[raising(KeyError("k"))])
    out = framed(await execute(env))
    assert (out.output, out.stop_reason) == ("[tool error] 'k'", "failed")


async def test_r_tool_2_run_that_fails_to_start_is_a_tool_error(tmp_path: Path) -> None:
    def not_async(args: NoArgs, ctx: ToolContext) -> int:
        return 3

    def boom(args: NoArgs, ctx: ToolContext) -> str:
        raise ToolError("cannot start")

    env = LocalEnvironment(tmp_path, tools=[make_tool(not_async), make_tool(boom, name="b")])
    out = framed(await execute(env))
    assert out.stop_reason == "failed"
    assert out.output.startswith("[tool error] run returned int")
    assert framed(await execute(env, "b")).output == "[tool error] cannot start"


async def test_r_tool_2_self_reported_note_and_status(tmp_path: Path) -> None:
    tool = chunks_tool("out\n", ToolResult(note="[exit code: 2]", status="failed"))
    out = framed(await execute(LocalEnvironment(tmp_path, tools=[tool])))
    assert (out.output, out.stop_reason) == ("out\n\n[exit code: 2]", "failed")


async def test_r_tool_3_tool_raised_beats_self_report(tmp_path: Path) -> None:
    tool = raising(RuntimeError("boom"), "x", ToolResult(note="[exit code: 0]", status="completed"))
    out = framed(await execute(LocalEnvironment(tmp_path, tools=[tool])))
    assert (out.output, out.stop_reason) == ("x\n[exit code: 0]\n[tool error] boom", "failed")


async def test_r_tool_3_self_reported_abort_gets_the_abort_note(tmp_path: Path) -> None:
    tool = returning(ToolResult("half", status="aborted"))
    out = framed(await execute(LocalEnvironment(tmp_path, tools=[tool])))
    assert (out.output, out.stop_reason) == (f"half\n{ABORTED}", "aborted")


async def test_r_tool_2_images_only_on_completed(tmp_path: Path) -> None:
    image = "data:image/png;base64,iVBORw0KGgo="
    ok = returning(ToolResult("see", images=[image]))
    bad = returning(ToolResult("see", images=[image], status="failed"), name="bad")
    env = LocalEnvironment(tmp_path, tools=[ok, bad])
    msgs = await execute(env)
    out = framed(msgs)
    assert out.images == [image]
    assert [
        m.payload.images for m in msgs if isinstance(m.payload, PartialToolCallOutputPayload)
    ] == [
        None,
        None,
        [image],
        None,
    ]
    assert framed(await execute(env, "bad")).images is None


# ---------------------------------------------------------------------------- timeouts


async def test_r_tool_3_timeout_note_and_failed(tmp_path: Path) -> None:
    closed = anyio.Event()

    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[str]:
        try:
            yield "working"
            await anyio.sleep_forever()
        finally:
            closed.set()

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, timeout_ms=30)])
    out = framed(await execute(env))
    assert (out.output, out.stop_reason) == ("working\n[tool timeout: exceeded 30ms]", "failed")
    assert closed.is_set()


async def test_r_tool_3_environment_default_timeout_applies(tmp_path: Path) -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        await anyio.sleep_forever()
        return "never"

    env = LocalEnvironment(tmp_path, tools=[make_tool(run)], default_timeout_ms=20)
    out = framed(await execute(env))
    assert (out.output, out.stop_reason) == ("[tool timeout: exceeded 20ms]", "failed")


async def test_r_tool_3_tool_timeout_zero_disables_the_default(tmp_path: Path) -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        await anyio.sleep(0.05)  # longer than the 1 ms default below
        return "finished"

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, timeout_ms=0)], default_timeout_ms=1)
    assert framed(await execute(env)).output == "finished"


async def test_r_tool_3_timeout_beats_an_error_raised_by_the_interrupted_tool(
    tmp_path: Path,
) -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("cleanup failed") from None
        return "never"

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, timeout_ms=20)])
    out = framed(await execute(env))
    assert (out.output, out.stop_reason) == ("[tool timeout: exceeded 20ms]", "failed")


async def test_r_tool_3_abort_beats_timeout(tmp_path: Path) -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            ctx.signal.abort("user pressed Esc during the timeout")
        return "never"

    env = LocalEnvironment(tmp_path, tools=[make_tool(run, timeout_ms=20)])
    out = framed(await execute(env))
    assert (out.output, out.stop_reason) == (ABORTED, "aborted")


# ---------------------------------------------------------------------------- aborts


async def test_r_tool_3_abort_interrupts_a_running_tool(tmp_path: Path) -> None:
    closed = anyio.Event()

    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[str]:
        try:
            yield "started"
            await anyio.sleep_forever()
        finally:
            closed.set()

    env = LocalEnvironment(tmp_path, tools=[make_tool(run)])
    signal = AbortSignal()
    msgs: list[OmniMessage] = []
    with anyio.fail_after(10):
        async for m in env.execute(b.tool_call("t", "{}", CALL), signal=signal, approve=None):
            msgs.append(m)
            if deltas(msgs) == ["started"]:
                signal.abort()
    out = framed(msgs)
    assert (out.output, out.stop_reason) == (f"started\n{ABORTED}", "aborted")
    assert closed.is_set()


async def test_r_tool_3_abort_from_another_thread_cancels_a_blocked_tool(tmp_path: Path) -> None:
    started = threading.Event()

    async def run(args: NoArgs, ctx: ToolContext) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    def fire(signal: AbortSignal) -> None:
        started.wait(10)
        signal.abort()

    env = LocalEnvironment(tmp_path, tools=[make_tool(run)])
    signal = AbortSignal()
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, fire, signal)
        msgs = await execute(env, signal=signal)
    out = framed(msgs)
    assert (out.output, out.stop_reason) == (ABORTED, "aborted")


async def test_r_tool_3_already_aborted_signal_never_starts_the_tool(tmp_path: Path) -> None:
    ran = []

    async def run(args: NoArgs, ctx: ToolContext) -> str:
        ran.append(1)
        return "ran"

    signal = AbortSignal()
    signal.abort()
    env = LocalEnvironment(tmp_path, tools=[make_tool(run)])
    out = framed(await execute(env, signal=signal))
    assert (out.output, out.stop_reason) == (ABORTED, "aborted")
    assert ran == []


async def test_r_tool_3_abort_beats_a_tool_error(tmp_path: Path) -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        ctx.signal.abort()
        raise ToolError("failed while the user aborted")

    out = framed(await execute(LocalEnvironment(tmp_path, tools=[make_tool(run)])))
    assert (out.output, out.stop_reason) == (ABORTED, "aborted")


async def test_abandoning_execute_closes_the_tool(tmp_path: Path) -> None:
    closed = anyio.Event()

    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[str]:
        try:
            yield "one"
            yield "two"
        finally:
            closed.set()

    env = LocalEnvironment(tmp_path, tools=[make_tool(run)])
    gen = env.execute(b.tool_call("t", "{}", CALL), signal=AbortSignal(), approve=None)
    async with contextlib.aclosing(gen):
        async for m in gen:
            if isinstance(m.payload, PartialToolCallOutputPayload) and m.payload.output == "one":
                break
    assert closed.is_set()


async def test_outside_cancellation_propagates_and_closes_the_tool(tmp_path: Path) -> None:
    closed = anyio.Event()

    async def run(args: NoArgs, ctx: ToolContext) -> AsyncIterator[str]:
        try:
            yield "one"
            await anyio.sleep_forever()
        finally:
            closed.set()

    env = LocalEnvironment(tmp_path, tools=[make_tool(run)])
    seen: list[OmniMessage] = []
    with anyio.CancelScope() as scope:
        async for m in env.execute(
            b.tool_call("t", "{}", CALL), signal=AbortSignal(), approve=None
        ):
            seen.append(m)
            if deltas(seen) == ["one"]:
                scope.cancel()
    assert scope.cancelled_caught
    assert closed.is_set()
    assert not any(isinstance(m.payload, ToolCallOutputPayload) for m in seen)


# ---------------------------------------------------------------------------- R-TOOL-2 truncation


async def test_r_tool_2_head_truncation_streams_only_the_head(tmp_path: Path) -> None:
    env = LocalEnvironment(
        tmp_path, tools=[chunks_tool("0123456789", "abcdefghij", "XYZ")], max_output_length=15
    )
    msgs = await execute(env)
    out = framed(msgs)
    assert deltas(msgs) == ["0123456789", "abcde", "\n[output truncated: exceeded 15 chars]"]
    assert out.output == "0123456789abcde\n[output truncated: exceeded 15 chars]"
    assert out.stop_reason == "completed"


async def test_r_tool_2_output_exactly_at_the_limit_is_not_truncated(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[chunks_tool("01234", "56789")], max_output_length=10)
    assert framed(await execute(env)).output == "0123456789"


@pytest.mark.parametrize("limit", [0, -1])
async def test_r_tool_2_non_positive_limit_disables_truncation(tmp_path: Path, limit: int) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("x" * 20000)], max_output_length=limit)
    assert framed(await execute(env)).output == "x" * 20000


async def test_r_tool_2_default_limit_is_16000(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("y" * 16001)])
    assert framed(await execute(env)).output == (
        "y" * 16000 + "\n[output truncated: exceeded 16000 chars]"
    )


@pytest.mark.parametrize("mask", [0o022, 0o277])
async def test_r_tool_2_archive_keeps_the_full_text_with_private_modes(
    tmp_path: Path, mask: int
) -> None:
    """R-TOOL-2 archive note; R-ROOT-9: dirs 0700, file 0600 whatever the umask."""
    ws = tmp_path / "ws"
    ws.mkdir()
    scratch = tmp_path / "scratch" / "session-x"
    tool = chunks_tool(
        "0123456789", "abcdefghij", ToolResult(note="[exit code: 1]", status="failed")
    )
    env = LocalEnvironment(ws, tools=[tool], max_output_length=12, scratchpad=scratch)
    with umask(mask):
        msgs = await execute(env, call_id="call/1:x")
    out = framed(msgs, "call/1:x")
    match = re.fullmatch(
        r"0123456789ab\n\[output truncated: exceeded 12 chars\]\n"
        r"\[output archived: (?P<path>[^\]\n]+)\]\n\[exit code: 1\]",
        out.output,
    )
    assert match is not None, out.output
    assert out.stop_reason == "failed"
    archive = Path(match["path"])
    assert archive.parent == scratch / "truncated-tool-output"
    assert re.fullmatch(r"call_1_x-[0-9a-f]{8}\.txt", archive.name)
    assert archive.read_text() == "0123456789abcdefghij"
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    for directory in (scratch, scratch / "truncated-tool-output"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


async def test_r_tool_2_archive_of_a_large_output_is_complete(tmp_path: Path) -> None:
    pieces = [f"{i:07d}" * 10_000 for i in range(30)]  # 2.1 M chars, several spills
    env = LocalEnvironment(
        tmp_path, tools=[chunks_tool(*pieces)], max_output_length=100, scratchpad=tmp_path / "s"
    )
    out = framed(await execute(env))
    path = re.search(r"\[output archived: ([^\]\n]+)\]", out.output)
    assert path is not None
    assert Path(path[1]).read_text() == "".join(pieces)


async def test_r_tool_2_no_scratchpad_no_archive_note(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path, tools=[returning("abcdef")], max_output_length=3)
    assert framed(await execute(env)).output == "abc\n[output truncated: exceeded 3 chars]"


async def test_r_tool_2_bind_scratchpad_later_enables_the_archive(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path / ".", tools=[returning("abcdef")], max_output_length=3)
    env.bind_scratchpad(tmp_path / "pad")
    assert env.scratchpad == tmp_path / "pad"
    out = framed(await execute(env))
    assert "[output archived: " in out.output
    archived = list((tmp_path / "pad" / "truncated-tool-output").iterdir())
    assert [p.read_text() for p in archived] == ["abcdef"]


async def test_r_tool_2_full_note_order_with_truncation_and_error(tmp_path: Path) -> None:
    tool = raising(ToolError("boom"), "abcdef", ToolResult(note="[exit code: 1]"))
    env = LocalEnvironment(tmp_path, tools=[tool], max_output_length=4)
    out = framed(await execute(env))
    assert out.output == (
        "abcd\n[output truncated: exceeded 4 chars]\n[exit code: 1]\n[tool error] boom"
    )


async def test_r_tool_2_unwritable_scratchpad_drops_only_the_archive_note(
    tmp_path: Path, reported: Callable[[], str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = LocalEnvironment(
        tmp_path, tools=[returning("abcdef")], max_output_length=3, scratchpad=blocker
    )
    out = framed(await execute(env))
    assert out.output == "abc\n[output truncated: exceeded 3 chars]"
    assert "could not archive" in reported()


# ---------------------------------------------------------------------------- ToolContext.resolve


def context(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws.resolve(), signal=AbortSignal(), tool_call_id=CALL)


def test_resolve_keeps_paths_inside_the_workspace(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ws = tmp_path.resolve()
    assert ctx.resolve("a/b.txt") == ws / "a" / "b.txt"
    assert ctx.resolve("a/../c") == ws / "c"
    assert ctx.resolve(str(ws / "d")) == ws / "d"
    assert ctx.resolve(".") == ws
    assert ctx.display(ws / "a" / "b.txt") == "a/b.txt"
    assert ctx.display(ws) == "."


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "", "  ", "a\x00b"])
def test_resolve_refuses_escapes_and_junk(tmp_path: Path, path: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ToolError):
        context(ws).resolve(path)


def test_resolve_follows_symlinks_before_checking(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "out_dir").symlink_to(outside)
    (ws / "out_file").symlink_to(outside / "f.txt")
    (ws / "in_dir").symlink_to(ws / "real")
    ctx = context(ws)
    for path in ("out_dir", "out_dir/new.txt", "out_file"):
        with pytest.raises(ToolError, match="outside the workspace"):
            ctx.resolve(path)
    assert ctx.resolve("in_dir/x") == (ws / "real" / "x").resolve()


# ---------------------------------------------------------------------------- the registry


async def test_list_tools_and_permissions(tmp_path: Path) -> None:
    read_only = returning("r", name="look", permission="r")
    env = LocalEnvironment(tmp_path, tools=[read_only, returning("w", name="touch")])
    assert await env.list_tools() == [read_only.definition, env.tools[1].definition]
    assert env.tool_permission("look") == "r"
    assert env.tool_permission("touch") == "rw"
    assert env.tool_permission("missing") is None
    await env.aclose()
    await env.aclose()


async def test_default_tools_are_the_four_builtins(tmp_path: Path) -> None:
    env = LocalEnvironment(tmp_path)
    names = [d.name for d in await env.list_tools()]
    assert names == ["exec_command", "read_file", "write_file", "edit_file"]
    assert [env.tool_permission(n) for n in names] == ["rw", "r", "rw", "rw"]


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LocalEnvironment(tmp_path / "missing")
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError):
        LocalEnvironment(tmp_path / "f")
    with pytest.raises(ValueError, match="duplicate"):
        LocalEnvironment(tmp_path, tools=[returning("a"), returning("b")])


def test_tool_declaration_checks() -> None:
    async def run(args: NoArgs, ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ValueError):
        Tool("bad name", "d", NoArgs, run)
    with pytest.raises(TypeError):
        Tool("ok", "d", dict, run)  # type: ignore[type-var]
    with pytest.raises(ValueError):
        Tool("ok", "d", NoArgs, run, permission="x")  # type: ignore[arg-type]


def test_tool_definition_schema_is_clean_and_stable() -> None:
    class Args(BaseModel):
        title: str
        limit: int | None = None
        tags: list[str] = []

    async def run(args: Args, ctx: ToolContext) -> str:
        return ""

    tool = Tool("t", "desc", Args, run)
    assert tool.definition == ToolDefinition(
        name="t",
        description="desc",
        parameters={
            "properties": {
                "title": {"type": "string"},
                "limit": {"type": "integer"},
                "tags": {"default": [], "items": {"type": "string"}, "type": "array"},
            },
            "required": ["title"],
            "type": "object",
        },
    )
    assert tool.definition == tool.definition
    assert tool_schema(Args) is not tool_schema(Args)  # a fresh dict: callers may not share it
