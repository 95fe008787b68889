"""Steering (SPEC §8) and input images (§9)."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginekit import (
    Env,
    GatedEnvironment,
    check_trace,
    collect,
    complete,
    kinds,
    make_session,
    texts,
)

from engine import AbortSignal, CompactionSettings, allow_all
from eventstore import ImageUrlPayload, OmniMessage, RequestEndPayload, TextPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio
TOOLS = [{"name": "t", "description": "test tool"}]
PNG = "data:image/png;base64,iVBORw0KGgo="


async def test_steer_during_tool_run_lands_after_outputs(env: Env) -> None:
    """R-STEER-4/5/7, INV-13: delivered after the turn's outputs, yielded and recorded."""
    gated = GatedEnvironment()
    script = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], [{"text": "ok"}]],
        "tools": TOOLS,
    }
    session, llm = await make_session(env, script, environment=gated)

    async def on(msg: OmniMessage) -> None:
        if isinstance(msg.payload, RequestEndPayload) and len(llm.requests) == 1:
            assert session.steer([b.user_text("also keep backups"), b.user_text("and be quick")])
            gated.release("a")

    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        check_trace(session, stream)
    steering = "[user_steering]\nalso keep backups\n\nand be quick\n[/user_steering]"
    assert steering in texts(complete(stream))
    assert texts(llm.requests[1].messages)[-2:] == ["out a", steering]


async def test_steer_without_tool_calls_continues_the_task(env: Env) -> None:
    """R-STEER-7: a turn without tool calls continues as a steering continuation turn."""
    script = [[{"steer": "one more thing"}, {"text": "answer"}], [{"text": "then this"}]]
    session, llm = await make_session(env, script)
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
    assert len(llm.requests) == 2
    assert (
        texts(llm.requests[1].messages)[-1] == "[user_steering]\none more thing\n[/user_steering]"
    )
    assert llm.requests[1].new_messages == 1


async def test_steer_after_run_is_false_and_blank_is_ignored(env: Env) -> None:
    """R-STEER-1/2/8."""
    script = [[{"steer": "   "}, {"text": "answer"}]]
    session, llm = await make_session(env, script)
    async with session:
        assert session.steer([b.user_text("x")]) is False
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
        assert session.steer([b.user_text("late")]) is False
    assert len(llm.requests) == 1


async def test_steering_discarded_on_abort(env: Env) -> None:
    """R-CARRY-11: queued steering never delivered is discarded, never written."""
    gated = GatedEnvironment()
    script = {
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], [{"text": "ok"}]],
        "tools": TOOLS,
    }
    session, llm = await make_session(env, script, environment=gated)
    signal = AbortSignal()

    async def on(msg: OmniMessage) -> None:
        if isinstance(msg.payload, RequestEndPayload):
            session.steer([b.user_text("lost")])
            signal.abort()

    async with session:
        stream = await collect(
            session.run([b.user_text("go")], approve=allow_all, signal=signal), on=on
        )
        records = check_trace(session, stream)
        await collect(session.run([b.user_text("next")]))
    assert "lost" not in " ".join(texts(records))
    assert not any("lost" in t for t in texts(llm.requests[-1].messages))


async def test_steering_image_folded_without_vision(env: Env) -> None:
    """R-STEER-6, R-IMG-1/2: images land as path lines inside the block."""
    gated = GatedEnvironment()
    script = {
        "tools": TOOLS,
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], [{"text": "b"}]],
        "vision": False,
    }
    session, llm = await make_session(env, script, environment=gated)

    async def on(msg: OmniMessage) -> None:
        if isinstance(msg.payload, RequestEndPayload) and len(llm.requests) == 1:
            session.steer([b.user_text("look"), b.image_url(PNG)])
            gated.release("a")

    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        check_trace(session, stream)
        scratch = session.scratchpad
    block = texts(llm.requests[1].messages)[-1]
    assert block.startswith("[user_steering]\nlook\n\n[attached image: ")
    path = Path(block.split("[attached image: ")[1].split("]")[0])
    assert path.parent == scratch.resolve() and path.suffix == ".png"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_steering_image_kept_with_vision(env: Env) -> None:
    """R-IMG-5, R-STEER-5: a vision model gets the image after the block."""
    gated = GatedEnvironment()
    script = {
        "tools": TOOLS,
        "responses": [[{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}], [{"text": "b"}]],
    }
    session, llm = await make_session(env, script, environment=gated)

    async def on(msg: OmniMessage) -> None:
        if isinstance(msg.payload, RequestEndPayload) and len(llm.requests) == 1:
            session.steer([b.image_url(PNG)])
            gated.release("a")

    async with session:
        stream = await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        check_trace(session, stream)
    last_two = llm.requests[1].messages[-2:]
    assert last_two[0].payload.text == "[user_steering]\n\n[/user_steering]"  # type: ignore[union-attr]
    assert isinstance(last_two[1].payload, ImageUrlPayload)


async def test_prompt_images_folded_before_writing(env: Env) -> None:
    """R-IMG-4: the trace records the path lines, not the image."""
    script = {"responses": [[{"text": "seen"}]], "vision": False}
    session, llm = await make_session(env, script)
    async with session:
        stream = await collect(
            session.run(
                [
                    b.user_text("what is this?"),
                    b.image_url(PNG),
                    b.image_url("https://x.test/a.png"),
                    b.image_url("ftp://nope"),
                ]
            )
        )
        records = check_trace(session, stream)
    sent = texts(llm.requests[0].messages)
    assert len(sent) == 1
    lines = sent[0].split("\n")
    assert lines[0] == "what is this?" and lines[1] == ""
    assert lines[2].startswith("[attached image: /")
    assert lines[3:] == [
        "[attached image: https://x.test/a.png]",
        "[an attached image could not be saved and was dropped]",
    ]
    assert not any(isinstance(r.payload, ImageUrlPayload) for r in records)


async def test_steering_during_compaction_delivered_after(env: Env) -> None:
    """R-COMPACT-13/29: steering queued during a boundary compaction continues the task with
    [summary, steering] on the new context."""
    script = [
        [{"text": "big"}, {"usage": {"cache_write": 1000}}],
        [{"steer": "after compaction"}, {"text": "[summary]all good[/summary]"}],
        [{"text": "continuing"}],
    ]
    session, llm = await make_session(
        env, script, compaction=CompactionSettings(max_context_length=500)
    )
    async with session:
        stream = await collect(session.run([b.user_text("go")]))
        check_trace(session, stream)
        assert session.trace_path.name.endswith("_002.jsonl")
    third = llm.requests[2]
    assert texts(third.messages) == [
        "[context_summary]\nall good\n[/context_summary]",
        "[user_steering]\nafter compaction\n[/user_steering]",
    ]
    assert kinds(complete(stream))[-5:] == [
        "text",
        "request_begin",
        "text",
        "token_usage",
        "request_end",
    ]
    assert isinstance(complete(stream)[-5].payload, TextPayload)


async def test_failed_steering_fold_raises_out_of_run(env: Env, tmp_path: Path) -> None:
    """R-STEER-6: a fold that fails ends the run by raising its error; no abort event and no
    further request."""
    gated = GatedEnvironment()
    script = {
        "tools": TOOLS,
        "vision": False,
        "responses": [
            [{"tool_call": {"name": "t", "arguments": {}, "id": "a"}}],
            [{"text": "never"}],
        ],
    }
    session, llm = await make_session(env, script, environment=gated)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")

    stream: list[OmniMessage] = []

    async def on(msg: OmniMessage) -> None:
        stream.append(msg)
        if isinstance(msg.payload, RequestEndPayload):
            session._root = type(session._root)(blocker)  # the scratchpad cannot be created
            session.steer([b.user_text("see"), b.image_url(PNG)])
            gated.release("a")

    async with session:
        with pytest.raises(OSError):
            await collect(session.run([b.user_text("go")], approve=allow_all), on=on)
        assert not session.running
    assert len(llm.requests) == 1
    assert kinds(stream)[-1] == "tool_call_output"  # no abort event after it
