"""The HTTP providers never reuse a recorded tool-call id after a crash (R-RUN-20, R-RESUME-14a).

A provider that reuses ids (one that sends the function name as the id) gets ``<id>#<n>`` from
the adapter's allocator, which learns the ids already taken from the request history.  A crash
between a call's ``approval_decision`` and its output leaves the request span open; resume
closes it ``aborted`` and the context drops the attempt, so the call is in the trace but in no
later request.  A fresh adapter on the resumed session must still not hand out that id again:
the session seeds it with the ids its trace records (``SeedsToolCallIds``).  Driven through
``httpx.MockTransport``; the resumed trace must validate.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import httpx
import pytest
from soupkit import MULTI_FILE, SID, place

from engine import SeedsToolCallIds, Session, allow_all
from engine.llm import Anthropic, OpenAICompatible, ScriptedEnvironment, ScriptedLLM
from eventstore import ApprovalDecisionPayload, ToolCallPayload, iter_trace
from eventstore import builders as b
from replay import resume_session, validate_session

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def _data(obj: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n"


def openai_call(provider_id: str) -> bytes:
    call = {
        "index": 0,
        "id": provider_id,
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
    }
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return (
        _data({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        + _data({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        + _data({**chunk, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        + "data: [DONE]\n\n"
    ).encode()


def openai_text() -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return (
        _data({**chunk, "choices": [{"index": 0, "delta": {"content": "done"}}]})
        + _data({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        + _data({**chunk, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        + "data: [DONE]\n\n"
    ).encode()


def _anthropic(blocks: list[tuple[dict[str, Any], dict[str, Any]]], stop: str) -> bytes:
    message = {"id": "msg", "type": "message", "role": "assistant", "model": "m", "content": []}
    out = _data(
        {"type": "message_start", "message": {**message, "usage": {"input_tokens": 5}}},
        "message_start",
    )
    for index, (start, delta) in enumerate(blocks):
        out += _data(
            {"type": "content_block_start", "index": index, "content_block": start},
            "content_block_start",
        )
        out += _data(
            {"type": "content_block_delta", "index": index, "delta": delta},
            "content_block_delta",
        )
        out += _data({"type": "content_block_stop", "index": index}, "content_block_stop")
    out += _data(
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 1}},
        "message_delta",
    )
    out += _data({"type": "message_stop"}, "message_stop")
    return out.encode()


def anthropic_call(provider_id: str) -> bytes:
    start = {"type": "tool_use", "id": provider_id, "name": "read_file", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": '{"path": "a.txt"}'}
    return _anthropic([(start, delta)], "tool_use")


def anthropic_text() -> bytes:
    return _anthropic(
        [({"type": "text", "text": ""}, {"type": "text_delta", "text": "done"})], "end_turn"
    )


REPLIES = {
    "openai": (openai_call, openai_text),
    "anthropic": (anthropic_call, anthropic_text),
}


def make_llm(provider: str, replies: list[bytes]) -> Any:
    """``provider``'s adapter whose HTTP requests are answered, in order, by ``replies``."""
    queue = deque(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        body = queue.popleft() if queue else REPLIES[provider][1]()
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    if provider == "openai":
        return OpenAICompatible(
            model="m", base_url="http://llm.test/v1", api_key="k", client=client
        )
    return Anthropic(model="m", base_url="http://llm.test", api_key="k", client=client)


def environment() -> ScriptedEnvironment:
    call = {"name": "read_file", "arguments": {"path": "a.txt"}, "id": "read_file"}
    return ScriptedEnvironment(
        {"tools": TOOLS, "responses": [[{"tool_call": {**call, "result": {"output": "A"}}}]]}
    )


async def _task(session: Session, llm: Any, text: str) -> None:
    async with session, llm:
        async for _ in session.run([b.user_text(text)], approve=allow_all):
            pass


def _decisions(path: Path) -> list[str]:
    return [
        r.payload.tool_call_id
        for r in iter_trace(path, report=False)
        if isinstance(r.payload, ApprovalDecisionPayload)
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_resumed_provider_never_reuses_a_recorded_call_id(
    provider: str, tmp_path: Path
) -> None:
    call, text = REPLIES[provider]
    ws = tmp_path / "ws"
    ws.mkdir()
    llm = make_llm(provider, [call("read_file"), text()])
    assert isinstance(llm, SeedsToolCallIds)
    session = await Session.create(
        llm=llm, environment=environment(), root=tmp_path, workspace=ws, system_prompt="t"
    )
    sid = session.id
    await _task(session, llm, "go")
    [latest] = sorted(tmp_path.rglob(f"{sid}_*.jsonl"))
    assert _decisions(latest) == ["read_file"]
    # The crash: the trace ends right after the approval_decision (no output, span open).
    lines = latest.read_bytes().splitlines(keepends=True)
    cut = next(
        k + 1
        for k, r in enumerate(iter_trace(latest, report=False))
        if isinstance(r.payload, ApprovalDecisionPayload)
    )
    latest.write_bytes(b"".join(lines[:cut]))

    # A fresh adapter (a new process) on the resumed session; the provider sends the same id.
    llm = make_llm(provider, [call("read_file"), text()])
    resumed = await resume_session(tmp_path, sid, llm=llm, environment=environment())
    await _task(resumed, llm, "again")
    calls = [
        r.payload.tool_call_id
        for r in iter_trace(latest, report=False)
        if isinstance(r.payload, ToolCallPayload)
    ]
    assert calls == ["read_file", "read_file#2"]
    assert _decisions(latest) == ["read_file", "read_file#2"]
    errors = [str(f) for f in validate_session([latest]) if f.severity == "error"]
    assert errors == []


class Seeded:
    """An LLM that only records the ids its session seeds it with."""

    vision = False

    def __init__(self) -> None:
        self.seeded: list[set[str]] = []

    def seed_tool_call_ids(self, ids: Any) -> None:
        self.seeded.append(set(ids))

    def stream(self, request: Any) -> Any:
        raise AssertionError("not called")


async def test_ids_of_earlier_files_are_seeded_through_the_sidecar(tmp_path: Path) -> None:
    """R-RUN-20 across compactions: the ids of files before the latest come from their
    summaries (R-TRACE-19), so seeding them keeps resume flat; with or without the sidecar."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/compaction_mid_task"]]
    root = place(tmp_path / "home", files)
    recorded = {
        r.payload.tool_call_id
        for f in root.trace_files(SID)
        for r in iter_trace(f, report=False)
        if isinstance(r.payload, ToolCallPayload)
    }
    in_latest = {
        r.payload.tool_call_id
        for r in iter_trace(root.latest_trace(SID), report=False)
        if isinstance(r.payload, ToolCallPayload)
    }
    assert recorded - in_latest  # some only in the earlier file
    for _ in range(2):  # builds the sidecar, then resumes through it
        llm = Seeded()
        assert isinstance(llm, SeedsToolCallIds)
        session = await resume_session(
            root.home,
            SID,
            llm=llm,
            environment=ScriptedEnvironment({"responses": []}),
            workspace=tmp_path,
        )
        async with session:
            pass
        assert llm.seeded == [recorded]


def test_scripted_llm_takes_the_seam() -> None:
    assert isinstance(ScriptedLLM({"responses": []}), SeedsToolCallIds)
