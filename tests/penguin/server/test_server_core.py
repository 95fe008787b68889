"""`penguin serve` core: auth, sessions, tasks, the stream and its lossless reconnect
(SPEC §19, R-SRV-1…8), against a real uvicorn on 127.0.0.1 and the in-process app."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from serverkit import AUTH, TOKEN, Reader, is_server, payload_type, scripted, served

from engine import LLMOutcome, LLMRequest
from eventstore import OmniMessage, encode, iter_trace
from eventstore import builders as b
from penguin.server import create_app

pytestmark = pytest.mark.anyio

ECHO_TOOLS = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]
TOOL_TURN = [
    {"text": "hello there", "chunks": 3},
    {"tool_call": {"name": "echo", "arguments": {"x": 1}, "result": {"output": "ok"}}},
]
TEXT = {"input": [{"type": "text", "text": "hi"}]}


def trace_lines(root: Path, sid: str) -> list[tuple[str, bytes]]:
    """(``file:ordinal``, encoded record) of every record of the session, in trace order."""
    out: list[tuple[str, bytes]] = []
    for path in sorted(root.rglob(f"{sid}_*.jsonl")):
        index = int(path.stem.rsplit("_", 1)[1])
        out += [(f"{index}:{o}", encode(r)) for o, r in enumerate(iter_trace(path, report=False))]
    return out


def recorded(events: list[Any]) -> list[tuple[str, bytes]]:
    return [(e.id, e.data.encode()) for e in events if e.event is None and "+" not in (e.id or "+")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


class _InProcess:
    """The app in process (lifespan run by hand: httpx's ASGI transport does not)."""

    def __init__(self, root: Path, **options: Any) -> None:
        options.setdefault("token", TOKEN)
        options.setdefault("workspace", root)
        options.setdefault("watch", False)
        self.app = create_app(root, **options)

    async def __aenter__(self) -> httpx.AsyncClient:
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=AUTH
        )
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self._life.__aexit__(None, None, None)


# ---------------------------------------------------------------------------- R-SRV-1 auth


async def test_r_srv_1_token_required_and_cookie_login_checks_origin(root: Path) -> None:
    async with _InProcess(root, llm_factory=scripted([{"text": "ok"}])) as c:
        r = await c.get("/api/sessions", headers={"Authorization": ""})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await c.get("/api/sessions", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        r = await c.post("/api/login", json={"token": "nope"}, headers={"Authorization": ""})
        assert r.status_code == 401
        r = await c.post("/api/login", json={"token": TOKEN}, headers={"Authorization": ""})
        assert r.status_code == 200
        key = r.json()["key"]
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        session = r.cookies["penguin_session_80"]
        c.cookies.clear()
        no_auth = {
            "Authorization": "",
            "Cookie": f"penguin_session_80={session}",
            "X-Penguin-Key": key,
        }
        r = await c.get("/api/sessions", headers=no_auth)
        assert r.status_code == 200
        assert "access-control-allow-origin" not in r.headers
        r = await c.post("/api/sessions", json={}, headers=no_auth)
        assert r.status_code == 403 and r.json()["error"]["code"] == "bad_origin"
        evil = {**no_auth, "Origin": "http://evil.example"}
        r = await c.post("/api/sessions", json={}, headers=evil)
        assert r.status_code == 403
        same = {**no_auth, "Origin": "http://testserver"}
        r = await c.post("/api/sessions", json={}, headers=same)
        assert r.status_code == 201


def test_r_srv_1_token_generated_once_with_mode_0600(root: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("PENGUIN_SERVER_TOKEN", raising=False)
    app = create_app(root, watch=False)
    token = app.state.penguin.token
    path = root / "server-token"
    assert path.read_text().strip() == token and (path.stat().st_mode & 0o777) == 0o600
    assert create_app(root, watch=False).state.penguin.token == token
    monkeypatch.setenv("PENGUIN_SERVER_TOKEN", "from-env")
    assert create_app(root, watch=False).state.penguin.token == "from-env"


def test_r_srv_1_token_is_never_written_through_a_planted_symlink(
    root: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """Issue 28 (R-ROOT-9, security): a dangling ``server-token`` symlink planted in the home
    must not make the server write its secret to the link's target."""
    monkeypatch.delenv("PENGUIN_SERVER_TOKEN", raising=False)
    root.mkdir(parents=True, exist_ok=True)
    stolen = tmp_path / "attacker-readable"
    (root / "server-token").symlink_to(stolen)
    token = create_app(root, watch=False).state.penguin.token
    assert not stolen.exists()
    path = root / "server-token"
    assert not path.is_symlink() and path.read_text().strip() == token
    assert (path.stat().st_mode & 0o777) == 0o600


async def test_without_a_model_sessions_are_refused_and_nothing_is_written(root: Path) -> None:
    """Safe by default: an app built without ``llm_factory`` never falls back to a demo script
    that would run real tools in the workspace."""
    async with _InProcess(root) as c:
        r = await c.post("/api/sessions", json={})
        assert r.status_code == 409 and r.json()["error"]["code"] == "no_model"
        assert "llm_factory" in r.json()["error"]["message"]
    assert sorted(p.name for p in root.rglob("*.jsonl")) == []


# ---------------------------------------------------------------------------- R-SRV-2/3 requests, sessions


async def test_r_srv_2_3_errors_share_one_shape(root: Path) -> None:
    async with _InProcess(root, body_limit=1000) as c:
        r = await c.post("/api/sessions", content=b"{}", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        r = await c.post(
            "/api/sessions", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = await c.post("/api/sessions", json={"bogus": 1})
        assert r.status_code == 400 and "bogus" in r.json()["error"]["message"]
        r = await c.post("/api/sessions", json={"max_turns": "x"})
        assert r.status_code == 400 and "max_turns" in r.json()["error"]["message"]
        r = await c.post("/api/sessions", json={"system_prompt": "x" * 2000})
        assert r.status_code == 413
        r = await c.post("/api/sessions", json={"workspace": str(root / "missing")})
        assert r.status_code == 400 and r.json()["error"]["code"] == "workspace_not_found"
        # The engine's one workspace check (R-SESSION-1) words the message.
        assert r.json()["error"]["message"] == f"workspace does not exist: {root / 'missing'}"
        (root / "a-file").write_text("x")
        r = await c.post("/api/sessions", json={"workspace": str(root / "a-file")})
        assert r.status_code == 400 and r.json()["error"]["code"] == "workspace_not_found"
        assert r.json()["error"]["message"].startswith("workspace is not a directory: ")
        r = await c.get("/api/sessions/session-nope")
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
        r = await c.get("/api/sessions/..%2F..%2Fetc")
        assert r.status_code == 404
        r = await c.get("/api/nothing-here")
        assert r.status_code == 404 and set(r.json()["error"]) == {"code", "message"}


async def test_r_srv_3_created_session_is_listed_and_fetched(root: Path) -> None:
    async with _InProcess(root, llm_factory=scripted([{"text": "ok"}])) as c:
        r = await c.post("/api/sessions", json={"approval": "allow-all"})
        assert r.status_code == 201
        sid = r.json()["id"]
        assert r.json()["state"] == "idle"
        listed = (await c.get("/api/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == [sid]
        got = (await c.get(f"/api/sessions/{sid}")).json()
        assert got["id"] == sid and got["state"] == "idle"


# ---------------------------------------------------------------------------- R-SRV-4 one task at a time


async def test_r_srv_4_fifty_concurrent_tasks_exactly_one_accepted(root: Path) -> None:
    llm = scripted([{"sleep_ms": 60_000}, {"text": "late"}])
    async with _InProcess(root, llm_factory=llm, approval="allow-all") as c:
        sid = (await c.post("/api/sessions", json={})).json()["id"]
        codes: list[int] = []

        async def post() -> None:
            r = await c.post(f"/api/sessions/{sid}/tasks", json=TEXT)
            codes.append(r.status_code)
            if r.status_code == 409:
                assert r.json()["error"]["code"] == "task_in_progress"

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(post)
        assert sorted(codes) == [202] + [409] * 49
        r = await c.post(f"/api/sessions/{sid}/abort")
        assert r.status_code == 202
        with anyio.fail_after(10):
            while (await c.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
                await anyio.sleep(0.02)
        assert (await c.post(f"/api/sessions/{sid}/abort")).status_code == 204


# ---------------------------------------------------------------------------- R-SRV-5..8 over uvicorn


async def test_full_task_with_ask_approval_streams_every_record_once(root: Path) -> None:
    llm = scripted(TOOL_TURN, [{"text": "done"}], tools=ECHO_TOOLS)
    async with served(root, llm_factory=llm, approval="ask") as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            first = await rd.next()
            assert first.json["type"] == "task_state" and first.id is None
            r = await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            assert r.status_code == 202 and "task_id" in r.json()
            events = await rd.until(is_server("approval_request"))
            call = events[-1].json["tool_call"]
            cid = call["payload"]["tool_call_id"]
            # The call itself came first (R-SRV-7): the request follows its record.
            assert any(payload_type(e) == "tool_call" for e in events)
            r = await s.post(f"/api/sessions/{sid}/approvals/{cid}", {"decision": "allow"})
            assert r.status_code == 204
            r = await s.post(f"/api/sessions/{sid}/approvals/{cid}", {"decision": "allow"})
            assert r.status_code == 409
            r = await s.post(f"/api/sessions/{sid}/approvals/nope", {"decision": "allow"})
            assert r.status_code == 404
            events += await rd.until(is_server("task_state", state="idle"))
        # R-SRV-8: every record, exactly once, in trace order, with its position as id.
        assert recorded(events) == trace_lines(root, sid)
        partial_ids = [e.id for e in events if e.id and "+" in e.id]
        assert len(partial_ids) == len(set(partial_ids))
        msgs = (await s.client.get(f"/api/sessions/{sid}/messages")).json()
        assert msgs["live"] is None
        got = [
            (f"{m['position']['file']}:{m['position']['ordinal']}", m["message"])
            for m in msgs["messages"]
        ]
        assert got == [(i, json.loads(d)) for i, d in trace_lines(root, sid)]


async def test_r_srv_8_reconnect_replays_from_buffer_and_from_trace(root: Path) -> None:
    llm = scripted(TOOL_TURN, [{"text": "done"}], [{"text": "again"}], tools=ECHO_TOOLS)
    async with served(root, llm_factory=llm, approval="allow-all", buffer_events=4) as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            head = await rd.until(lambda e: payload_type(e) == "tool_call")
            cut = rd.last_id
        # Disconnected while the task runs on; the tiny buffer has evicted the gap.
        with anyio.fail_after(10):
            while (await s.client.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
                await anyio.sleep(0.02)
        async with s.client.stream(
            "GET", f"/api/sessions/{sid}/stream", headers={"Last-Event-ID": cut or ""}
        ) as resp:
            rd2 = Reader(resp)
            tail = await rd2.until(lambda e: is_server("task_state")(e) and e.id is None)
        assert recorded(head) + recorded(tail) == trace_lines(root, sid)
        assert any(is_server("resync_required")(e) for e in tail)


async def test_r_srv_8_reconnect_after_server_restart_is_lossless(root: Path) -> None:
    llm = scripted(TOOL_TURN, [{"text": "done"}], tools=ECHO_TOOLS)
    async with served(root, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            head = await rd.until(lambda e: payload_type(e) == "tool_call")
            cut = rd.last_id
            await rd.until(is_server("task_state", state="idle"))
    async with (
        served(root, llm_factory=llm, approval="allow-all") as s2,
        s2.client.stream(
            "GET", f"/api/sessions/{sid}/stream", headers={"Last-Event-ID": cut or ""}
        ) as resp,
    ):
        tail = await Reader(resp).until(is_server("task_state"))
    assert recorded(head) + recorded(tail) == trace_lines(root, sid)


async def test_r_srv_4_second_server_on_same_root_gets_session_locked(root: Path) -> None:
    llm = scripted([{"text": "one"}], [{"text": "two"}])
    async with served(root, llm_factory=llm, approval="allow-all") as a:
        sid = await a.new_session()
        async with a.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (await a.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            await rd.until(is_server("task_state", state="idle"))
        async with served(root, llm_factory=llm, approval="allow-all") as b2:
            r = await b2.post(f"/api/sessions/{sid}/tasks", TEXT)
            assert r.status_code == 409 and r.json()["error"]["code"] == "session_locked"
            assert "process" in r.json()["error"]["message"]


# ---------------------------------------------------------------------------- R-SRV-6 live fragments


class _Gated:
    """An LLM that streams a text segment halfway, then waits for the test."""

    vision = True

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        yield b.partial_text("start")
        yield b.partial_text("delta", "Hello, ")
        yield b.partial_text("delta", "wor")
        await self.gate.wait()
        yield b.partial_text("delta", "ld")
        yield b.partial_text("stop")
        yield b.assistant_text("Hello, world")
        yield LLMOutcome("completed")


async def test_r_srv_6_messages_mid_stream_carry_live_fragments(root: Path) -> None:
    gate = anyio.Event()
    async with served(root, llm_factory=lambda m: _Gated(gate), approval="allow-all") as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            seen = await rd.until(lambda e: e.event is None and '"wor"' in e.data)
            page = (await s.client.get(f"/api/sessions/{sid}/messages")).json()
            live = page["live"]
            assert live["cursor"] == rd.last_id
            frags = live["fragments"]
            assert [f["payload"]["text"] for f in frags] == ["Hello, wor"]
            assert frags[0]["payload"]["event_type"] == "start"
            positions = [
                f"{m['position']['file']}:{m['position']['ordinal']}" for m in page["messages"]
            ]
            assert positions == [e.id for e in seen if e.id and "+" not in e.id]
            gate.set()
            await rd.until(is_server("task_state", state="idle"))


async def test_r_srv_15_openapi_lists_every_served_route(root: Path) -> None:
    async with _InProcess(root) as c:
        doc = (await c.get("/api/openapi.json")).json()
        app = create_app(root, token=TOKEN, watch=False)
        served_routes = {
            (m.lower(), r.path.replace("{name:path}", "{name}"))
            for r in app.routes
            for m in (getattr(r, "methods", None) or ())
            if m != "HEAD" and r.path != "/api/openapi.json"
        }
        documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
        assert served_routes == documented
        assert "TaskBody" in doc["components"]["schemas"]
