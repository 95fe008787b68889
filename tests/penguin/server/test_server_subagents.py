"""Subagents in `penguin serve` (issue 35 item 8; SPEC §11 R-SUB-1…5, §23 R-SET-1/3, R-SRV-6/7).

A session offers ``run_subagent`` only when its client asked for it (``subagents`` in POST
/api/sessions); the choice is recorded in the settings record's ``tools`` so a restarted server
offers it again.  A subagent's messages reach the session's stream as they happen, tagged with
``origin``, and a page loaded mid-task gets what the running children said so far
(``live.subagent_messages``) with their open segments (``live.fragments``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from serverkit import AUTH, Reader, is_server, payload_type, scripted, served, spawn_server

from engine import LLMOutcome, LLMRequest
from eventstore import (
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    SettingsPayload,
    SubagentPayload,
    ToolCallOutputPayload,
    ToolListReadyPayload,
    iter_trace,
)
from eventstore import builders as b
from penguin.server._channel import NESTED_MESSAGES, Channel

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "delegate"}]}


def spawn(prompt: str, cid: str) -> dict[str, Any]:
    return {"tool_call": {"name": "run_subagent", "arguments": {"prompt": prompt}, "id": cid}}


# Two subagents at once, then the answer; each child streams its text in three deltas.
PARENT = [
    [{"text": "Delegating."}, spawn("alpha", "p1"), spawn("beta", "p2")],
    [{"text": "Both done."}],
]
CHILD = [[{"text": ["child ", "says ", "hi"]}]]


def records(root: Path, sid: str) -> list[OmniMessage]:
    return [r for p in sorted(root.rglob(f"{sid}_*.jsonl")) for r in iter_trace(p)]


def children_of(root: Path, sid: str) -> list[str]:
    return [
        r.payload.session_id for r in records(root, sid) if isinstance(r.payload, SubagentPayload)
    ]


async def run_to_idle(s: Any, sid: str) -> list[Any]:
    """Start a task with the stream open; every event up to the task's end."""
    async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
        rd = Reader(resp)
        await rd.next()  # the task_state snapshot: subscribed
        r = await s.post(f"/api/sessions/{sid}/tasks", TEXT)
        assert r.status_code == 202, r.text
        with anyio.fail_after(30):
            return await rd.until(is_server("task_state", state="idle"))


async def test_a_session_offers_no_subagents_unless_its_client_asks(tmp_path: Path) -> None:
    """Safe by default: the model's run_subagent call meets no such tool, nothing else runs."""
    async with served(
        tmp_path, llm_factory=scripted(*PARENT, subagent=CHILD), approval="allow-all"
    ) as s:
        sid = await s.new_session()
        row = (await s.client.get(f"/api/sessions/{sid}")).json()
        assert row["subagents"] is False
        events = await run_to_idle(s, sid)
    assert not [e for e in events if e.event is None and e.json.get("origin")]
    recs = records(tmp_path, sid)
    (tools,) = [r.payload for r in recs if isinstance(r.payload, ToolListReadyPayload)]
    assert "run_subagent" not in [t.name for t in tools.tools]
    settings = [r.payload for r in recs if isinstance(r.payload, SettingsPayload)]
    assert settings and all(p.tools is None for p in settings)
    outputs = [r.payload for r in recs if isinstance(r.payload, ToolCallOutputPayload)]
    assert len(outputs) == 2 and all(o.stop_reason == "failed" for o in outputs)
    assert children_of(tmp_path, sid) == []


async def test_subagents_stream_live_with_origin_and_are_recorded(tmp_path: Path) -> None:
    """R-SUB-1/5, R-SRV-7: each child's partial and complete messages reach the stream tagged
    with its id, both children of one turn; R-SET-1: the tool set is recorded."""
    async with served(
        tmp_path, llm_factory=scripted(*PARENT, subagent=CHILD), approval="allow-all"
    ) as s:
        r = await s.post("/api/sessions", {"subagents": True})
        assert r.status_code == 201, r.text
        assert r.json()["subagents"] is True
        sid = r.json()["id"]
        events = await run_to_idle(s, sid)
        row = (await s.client.get(f"/api/sessions/{sid}")).json()
        assert row["subagents"] is True
    kids = children_of(tmp_path, sid)
    assert len(kids) == 2
    nested = [e.json for e in events if e.event is None and e.json.get("origin")]
    for kid in kids:
        mine = [m for m in nested if m["origin"] == [kid]]
        assert mine[0]["type"] == "session_meta"  # R-SUB-4: the child's stream starts with it
        deltas = [
            m["payload"]["text"]
            for m in mine
            if m["payload"].get("type") == "partial_text" and m["payload"]["event_type"] == "delta"
        ]
        assert deltas == ["child ", "says ", "hi"]  # live, as the child streamed them
        texts = [m["payload"]["text"] for m in mine if m["payload"].get("type") == "text"]
        assert texts == ["child says hi"]
    # Unrecorded (R-SUB-2): every origin-tagged event has a `+k` id.
    assert all("+" in (e.id or "") for e in events if e.event is None and e.json.get("origin"))
    # The children's answers are the calls' outputs.
    outputs = [
        r.payload for r in records(tmp_path, sid) if isinstance(r.payload, ToolCallOutputPayload)
    ]
    assert [o.output for o in outputs] == ["child says hi", "child says hi"]
    (settings,) = [
        r.payload for r in records(tmp_path, sid) if isinstance(r.payload, SettingsPayload)
    ]
    assert settings.tools is not None and "run_subagent" in settings.tools
    for kid in kids:  # each child is a session of its own, started by this one
        meta = records(tmp_path, kid)[0].payload
        assert isinstance(meta, SessionMetaPayload) and meta.source == "subagent"
        assert all(
            r.payload.tools is None
            for r in records(tmp_path, kid)
            if isinstance(r.payload, SettingsPayload)
        )  # depth 1: children cannot spawn


async def test_a_restarted_server_keeps_a_sessions_subagents(tmp_path: Path) -> None:
    """R-SET-3: the recorded ``tools`` decide, not the new server's default; and a session
    recorded without them does not gain them."""
    llm = scripted(*PARENT, subagent=CHILD)  # each server's model starts the script again
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        with_kids = (await s.post("/api/sessions", {"subagents": True})).json()["id"]
        await run_to_idle(s, with_kids)
        without = await s.new_session()
        await run_to_idle(s, without)
    assert len(children_of(tmp_path, with_kids)) == 2
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        row = (await s.client.get(f"/api/sessions/{with_kids}")).json()
        assert row["subagents"] is True  # folded from the record before it is loaded
        assert (await s.client.get(f"/api/sessions/{without}")).json()["subagents"] is False
        events = await run_to_idle(s, with_kids)
        assert any(e.event is None and e.json.get("origin") for e in events)
        row = (await s.client.get(f"/api/sessions/{with_kids}")).json()
        assert row["subagents"] is True
        await run_to_idle(s, without)
    assert len(children_of(tmp_path, with_kids)) == 4  # two more, after the restart
    assert children_of(tmp_path, without) == []
    settings = [
        r.payload for r in records(tmp_path, with_kids) if isinstance(r.payload, SettingsPayload)
    ]
    assert len(settings) == 1  # unchanged across the restart: not recorded again (R-SET-2b)


async def test_a_script_serving_its_own_tools_cannot_host_subagents(tmp_path: Path) -> None:
    tools = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]
    llm = scripted([{"text": "hi"}], tools=tools)
    async with served(tmp_path, llm_factory=llm) as s:
        r = await s.post("/api/sessions", {"subagents": True})
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "subagents_unavailable"
        assert "tools" in r.json()["error"]["message"]
        r = await s.post("/api/sessions", {"subagents": "yes"})
        assert r.status_code == 400
    assert not list(DataRoot(tmp_path).sessions())


class _Child:
    """A subagent's model: streams half its text, waits for the test, then finishes."""

    vision = True

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def stream(self, request: LLMRequest) -> Any:
        yield b.assistant_text("looking")
        yield b.partial_text("start")
        yield b.partial_text("delta", "half ")
        await self.gate.wait()
        yield b.partial_text("delta", "done")
        yield b.partial_text("stop")
        yield b.assistant_text("half done")
        yield LLMOutcome("completed")


class _Parent:
    """Not a script, so its children are made by the server's factory (the same kind)."""

    vision = True

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: LLMRequest) -> Any:
        self.calls += 1
        if self.calls == 1:
            args = '{"prompt":"go"}'
            yield b.tool_call("run_subagent", args, "p1")
        else:
            yield b.assistant_text("ok")
        yield LLMOutcome("completed")


async def test_r_srv_6_a_page_loaded_mid_task_gets_what_the_children_said(
    tmp_path: Path,
) -> None:
    """``live.subagent_messages``: the children's complete messages so far (origin kept), with
    their open segment in ``live.fragments``; gone once the task ended."""
    gate = anyio.Event()
    made: list[object] = []

    def factory(model: str | None) -> Any:
        llm = _Parent() if not made else _Child(gate)
        made.append(llm)
        return llm

    async with served(tmp_path, llm_factory=factory, approval="allow-all") as s:
        sid = (await s.post("/api/sessions", {"subagents": True})).json()["id"]
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            with anyio.fail_after(30):
                await rd.until(
                    lambda e: (
                        payload_type(e) == "partial_text"
                        and e.json["payload"].get("text") == "half "
                    )
                )
            page = (await s.client.get(f"/api/sessions/{sid}/messages")).json()
            live = page["live"]
            kid = live["subagent_messages"][0]["origin"][0]
            said = live["subagent_messages"]
            assert said[0]["type"] == "session_meta"
            texts = [m["payload"].get("text") for m in said if m["type"] == "model_msg"]
            assert texts == ["looking"]
            assert all(m["origin"] == [kid] for m in said)
            # The call's own output segment is open too (its output streams when it ends).
            (frag,) = [f for f in live["fragments"] if f.get("origin")]
            assert frag["origin"] == [kid] and frag["payload"]["text"] == "half "
            gate.set()
            with anyio.fail_after(30):
                await rd.until(is_server("task_state", state="idle"))
        page = (await s.client.get(f"/api/sessions/{sid}/messages")).json()
        assert page["live"] is None
    assert len(made) == 2 and isinstance(made[1], _Child)


def test_channel_keeps_the_latest_subagent_messages_of_the_running_task() -> None:
    channel = Channel((0, 0), restored=False)

    def kid(msg: OmniMessage, n: int = 0) -> OmniMessage:
        return msgspec.structs.replace(msg, origin=[f"kid{n}"])

    channel.publish_message(kid(b.partial_text("start", "so far")))
    channel.publish_message(b.partial_text("start", "parent"))  # the parent's: not nested
    for n in range(NESTED_MESSAGES + 5):
        channel.publish_message(kid(b.assistant_text(f"m{n}"), n))
    kept = channel.nested()
    assert len(kept) == NESTED_MESSAGES  # the latest, within the bound
    assert kept[-1].origin == [f"kid{NESTED_MESSAGES + 4}"]
    assert kept[0].origin == ["kid5"]
    channel.end_segments()
    assert channel.nested() == [] and channel.fragments() == []


async def test_concurrent_subagents_asking_with_the_same_call_id_are_asked_in_turn(
    tmp_path: Path,
) -> None:
    """R-SUB-5 with ``ask``: two children's calls share the id ``c1`` (scripted ids); each is
    asked (its ``approval_request`` names its child) and decided by that id in turn, instead
    of the second hiding the first, which then waited forever."""
    child = [
        [{"tool_call": {"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}}],
        [{"text": "wrote it"}],
    ]
    child[0][0]["tool_call"]["id"] = "c1"
    parent = [
        [spawn("alpha", "p1"), spawn("beta", "p2")],
        [{"text": "Both done."}],
    ]
    async with served(tmp_path, llm_factory=scripted(*parent, subagent=child), approval="ask") as s:
        sid = (await s.post("/api/sessions", {"subagents": True})).json()["id"]
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            origins: list[Any] = []
            with anyio.fail_after(30):
                for _ in range(4):  # the parent's two calls, then each child's c1 in turn
                    ev = (await rd.until(is_server("approval_request")))[-1].json
                    cid = ev["tool_call"]["payload"]["tool_call_id"]
                    origins.append((cid, ev["origin"]))
                    r = await s.post(f"/api/sessions/{sid}/approvals/{cid}", {"decision": "allow"})
                    assert r.status_code == 204, r.text
                await rd.until(is_server("task_state", state="idle"))
    assert [cid for cid, _ in origins] == ["p1", "p2", "c1", "c1"]
    kids = children_of(tmp_path, sid)
    assert origins[0][1] is None and origins[1][1] is None
    assert sorted(o[0] for _, o in origins[2:]) == sorted(kids)  # one request per child
    outputs = [
        r.payload for r in records(tmp_path, sid) if isinstance(r.payload, ToolCallOutputPayload)
    ]
    assert [o.output for o in outputs] == ["wrote it", "wrote it"]


async def test_penguin_serve_hosts_a_scripted_sessions_subagents(tmp_path: Path) -> None:
    """The command's wiring (its environment offers run_subagent when asked; children answer
    from the script's ``subagent`` key), as a process."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [[spawn("look", "p1")], [{"text": "done"}]],
                "subagent": [[{"text": "child says hi"}]],
            }
        )
    )
    root = tmp_path / "root"
    child = await spawn_server(root, script, ws)
    try:
        async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=30) as c:
            r = await c.post("/api/sessions", json={"subagents": True})
            assert r.status_code == 201, r.text
            sid = r.json()["id"]
            r = await c.post(f"/api/sessions/{sid}/tasks", json=TEXT)
            assert r.status_code == 202, r.text
            with anyio.fail_after(30):
                while (await c.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
                    await anyio.sleep(0.05)
    finally:
        child.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            await child.process.wait()
    outputs = [
        r.payload for r in records(root, sid) if isinstance(r.payload, ToolCallOutputPayload)
    ]
    assert [o.output for o in outputs] == ["child says hi"]
    assert len(children_of(root, sid)) == 1
