"""Every other route of `penguin serve` and its errors (R-SRV-5, R-SRV-9…13), over a real
uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from serverkit import Reader, Served, is_server, payload_type, scripted, served

from engine import LLMOutcome, LLMRequest, RetryPolicy
from eventstore import OmniMessage, TokenCounts, iter_trace
from eventstore import builders as b
from eventstore import builders as bld

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "hi"}]}
SUMMARY = [{"text": "[summary]we said hi[/summary]"}]


def records(root: Path, sid: str) -> list[OmniMessage]:
    out: list[OmniMessage] = []
    for path in sorted(root.rglob(f"{sid}_*.jsonl")):
        out += list(iter_trace(path, report=False))
    return out


def kinds(root: Path, sid: str) -> list[str]:
    return [bld.payload_type(r) or "session_meta" for r in records(root, sid)]


async def run_task(s: Served, sid: str, body: Any = TEXT) -> list[Any]:
    async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
        rd = Reader(resp)
        await rd.next()
        r = await s.post(f"/api/sessions/{sid}/tasks", body)
        assert r.status_code == 202, r.text
        return await rd.until(is_server("task_state", state="idle"))


async def idle(s: Served, sid: str) -> None:
    with anyio.fail_after(10):
        while (await s.client.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
            await anyio.sleep(0.02)


class _Gated:
    """Request k waits for ``gates[k]`` (when given) before answering ``texts[k]``."""

    vision = True

    def __init__(self, gates: dict[int, anyio.Event], texts: dict[int, str] | None = None) -> None:
        self.gates = gates
        self.texts = texts or {}
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        k = len(self.requests)
        self.requests.append(request)
        if k in self.gates:
            await self.gates[k].wait()
        yield b.assistant_text(self.texts.get(k, f"text {k}"))
        yield b.token_usage(TokenCounts(cache_write=10, output=1, total=11))
        yield LLMOutcome("completed")


async def test_r_srv_5_steer_is_delivered_and_409_when_idle(tmp_path: Path) -> None:
    gate = anyio.Event()
    llm = _Gated({0: gate})
    async with served(tmp_path, llm_factory=lambda m: llm, approval="allow-all") as s:
        sid = await s.new_session()
        r = await s.post(f"/api/sessions/{sid}/steer", TEXT)
        assert r.status_code == 409 and r.json()["error"]["code"] == "not_running"
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            await rd.until(lambda e: payload_type(e) == "request_begin")
            r = await s.post(
                f"/api/sessions/{sid}/steer", {"input": [{"type": "text", "text": "also this"}]}
            )
            assert r.status_code == 202
            gate.set()
            await rd.until(is_server("task_state", state="idle"))
        texts = [
            r.payload.text
            for r in records(tmp_path, sid)
            if r.type == "model_msg" and getattr(r.payload, "role", "") == "user"
        ]
        assert any("also this" in t for t in texts) and len(llm.requests) == 2


async def test_r_srv_5_abort_records_an_abort(tmp_path: Path) -> None:
    llm = scripted([{"sleep_ms": 60_000}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            await rd.until(lambda e: payload_type(e) == "request_begin")
            assert (await s.post(f"/api/sessions/{sid}/abort")).status_code == 202
            seen = await rd.until(is_server("task_state", state="idle"))
        assert any(payload_type(e) == "abort" for e in seen)
        assert "abort" in kinds(tmp_path, sid)


async def test_r_srv_5_retry_now_ends_the_backoff(tmp_path: Path) -> None:
    llm = scripted([{"fail": {"status": "timeout", "message": "idle"}}], [{"text": "ok"}])
    retry = RetryPolicy(base_ms=600_000, cap_ms=600_000)
    async with served(tmp_path, llm_factory=llm, approval="allow-all", retry=retry) as s:
        sid = await s.new_session()
        assert (await s.post(f"/api/sessions/{sid}/retry-now")).json() == {"skipped": False}
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            await rd.until(lambda e: payload_type(e) == "request_end")
            r = await s.post(f"/api/sessions/{sid}/retry-now")
            assert r.status_code == 200 and r.json() == {"skipped": True}
            with anyio.fail_after(10):
                await rd.until(is_server("task_state", state="idle"))
        assert kinds(tmp_path, sid).count("request_begin") == 2


async def test_r_srv_5_compact_fork_title(tmp_path: Path) -> None:
    gate = anyio.Event()
    llm = _Gated({2: gate}, {1: "A Greeting", 2: "[summary]we said hi[/summary]"})
    async with served(tmp_path, llm_factory=lambda m: llm, approval="allow-all") as s:
        sid = await s.new_session()
        r = await s.post(f"/api/sessions/{sid}/compact")
        assert r.status_code == 409 and r.json()["error"]["code"] == "empty"
        await run_task(s, sid)
        r = await s.post(f"/api/sessions/{sid}/title")
        assert r.status_code == 200 and r.json() == {"title": "A Greeting"}
        recs = records(tmp_path, sid)
        final = max(
            i
            for i, r in enumerate(recs)
            if r.type == "model_msg" and getattr(r.payload, "role", "") == "assistant"
        )
        r = await s.post(f"/api/sessions/{sid}/fork", {"at": {"file": 1, "ordinal": final}})
        assert r.status_code == 201, r.text
        child = r.json()["id"]
        assert child != sid and (await s.client.get(f"/api/sessions/{child}")).status_code == 200
        r = await s.post(f"/api/sessions/{sid}/fork", {"at": {"file": 1, "ordinal": 0}})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_fork_point"
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (await s.post(f"/api/sessions/{sid}/compact")).status_code == 202
            r = await s.post(f"/api/sessions/{sid}/tasks", TEXT)
            assert r.status_code == 409 and r.json()["error"]["code"] == "compacting"
            gate.set()
            seen = await rd.until(is_server("task_state", state="idle"))
        assert any(payload_type(e) == "compaction_end" for e in seen)
        r = await s.post(f"/api/sessions/{sid}/compact")
        assert r.status_code == 409 and r.json()["error"]["code"] == "just_compacted"


async def test_r_srv_11_traces_pages_raw_and_context(tmp_path: Path) -> None:
    async with served(
        tmp_path, llm_factory=scripted([{"text": "hello"}]), approval="allow-all"
    ) as s:
        sid = await s.new_session()
        await run_task(s, sid)
        files = (await s.client.get(f"/api/sessions/{sid}/traces")).json()["files"]
        total = len(records(tmp_path, sid))
        assert [(f["index"], f["records"]) for f in files] == [(1, total)]
        page = (await s.client.get(f"/api/sessions/{sid}/traces/1?offset=1&limit=2")).json()
        assert [r["ordinal"] for r in page["records"]] == [1, 2] and page["total"] == total
        raw = await s.client.get(f"/api/sessions/{sid}/traces/1/raw")
        assert "attachment" in raw.headers["content-disposition"]
        assert raw.content == next(tmp_path.rglob(f"{sid}_001.jsonl")).read_bytes()
        assert (await s.client.get(f"/api/sessions/{sid}/traces/7")).status_code == 404
        begin = kinds(tmp_path, sid).index("request_begin")
        ctx = (await s.client.get(f"/api/sessions/{sid}/context?at=1:{begin}")).json()
        assert ctx["request"]["messages"][-1]["message"]["payload"]["text"] == "hi"
        r = await s.client.get(f"/api/sessions/{sid}/context?at=nope")
        assert r.status_code == 400
        r = await s.client.get(f"/api/sessions/{sid}/context?at=1:9999")
        assert r.status_code == 404


async def test_r_srv_12_scratchpad_serves_inside_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with served(
        root, llm_factory=scripted([{"text": "hello"}]), approval="allow-all", workspace=tmp_path
    ) as s:
        sid = await s.new_session()
        await run_task(s, sid)
        pad = root / "default_project" / "agents" / "default_agent" / "scratchpad" / sid
        pad.mkdir(parents=True, exist_ok=True)
        (pad / "a.png").write_bytes(b"\x89PNG....")
        (pad / "notes.html").write_text("<script>x</script>")
        secret = tmp_path / "secret.txt"
        secret.write_text("secret")
        os.symlink(secret, pad / "link.png")
        r = await s.client.get(f"/api/sessions/{sid}/scratchpad/a.png")
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert r.headers["x-content-type-options"] == "nosniff"
        r = await s.client.get(f"/api/sessions/{sid}/scratchpad/notes.html")
        assert r.headers["content-type"] == "application/octet-stream"
        assert "attachment" in r.headers["content-disposition"]
        for bad in (
            "link.png",
            "..%2F..%2Fsecret.txt",
            "%2Fetc%2Fpasswd",
            "a.png%00.txt",
            "missing.png",
        ):
            r = await s.client.get(f"/api/sessions/{sid}/scratchpad/{bad}")
            assert r.status_code == 404, bad
            assert "secret" not in r.text


async def test_r_srv_9_10_usage_errors_and_user_channel(tmp_path: Path) -> None:
    llm = scripted(
        [{"text": "hello"}], [{"fail": {"status": "auth", "message": "bad key", "permanent": True}}]
    )
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        async with s.client.stream("GET", "/api/events") as resp:
            rd = Reader(resp)
            await rd.opened()
            sid = await s.new_session()
            created = await rd.until(is_server("session_created"))
            assert created[-1].json["id"] == sid
            await run_task(s, sid)
            states = await rd.until(is_server("session_state", state="idle"))
            assert any(is_server("session_state", state="running")(e) for e in states)
        await run_task(s, sid)
        usage = (await s.client.get("/api/usage?group_by=session")).json()["rows"]
        assert usage == [
            {
                "key": sid,
                "requests": 1,
                "cache_read": 0,
                "cache_write": 1,
                "output": 1,
                "total": 2,
                # The scripted model has no price: tokens only.
                "cost": None,
                "unpriced_tokens": 2,
            }
        ]
        by_model = (await s.client.get("/api/usage?group_by=model")).json()["rows"]
        assert [r["key"] for r in by_model] == ["script"]
        errors = (await s.client.get("/api/usage/errors")).json()["errors"]
        assert [(e["session"], e["status"], e["message"]) for e in errors] == [
            (sid, "auth", "bad key")
        ]
        assert (await s.client.get("/api/usage?group_by=nope")).status_code == 400


async def test_r_srv_3_delete(tmp_path: Path) -> None:
    llm = scripted([{"text": "hello"}], [{"sleep_ms": 60_000}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        await run_task(s, sid)
        await s.post(f"/api/sessions/{sid}/tasks", TEXT)
        r = await s.client.delete(f"/api/sessions/{sid}")
        assert r.status_code == 409
        await s.post(f"/api/sessions/{sid}/abort")
        await idle(s, sid)
        assert (await s.client.delete(f"/api/sessions/{sid}")).status_code == 204
        assert list(tmp_path.rglob(f"{sid}*")) == []
        assert (await s.client.get(f"/api/sessions/{sid}")).status_code == 404
        assert (await s.client.get("/api/sessions")).json()["sessions"] == []


async def test_r_srv_13_index_rebuilt_gives_identical_rows(tmp_path: Path) -> None:
    llm = scripted([{"text": "a"}], [{"text": "b"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        for _ in range(2):
            await run_task(s, await s.new_session())
        ctx = s.app.state.penguin
        await ctx.refresh_index(max_age=0)
        before = (ctx.index.session_rows(), ctx.index.usage_rows())
    db = tmp_path / "index.sqlite3"
    for p in tmp_path.glob("index.sqlite3*"):
        p.unlink()
    assert not db.exists()
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s2:
        ctx2 = s2.app.state.penguin
        after = (ctx2.index.session_rows(), ctx2.index.usage_rows())
        listed = (await s2.client.get("/api/sessions")).json()["sessions"]
    assert after == before and len(before[0]) == 2 and len(before[1]) == 2
    assert {r["id"] for r in listed} == {r["id"] for r in before[0]}
    assert json.loads(json.dumps(before[0]))  # plain values


async def test_r_srv_13_cli_run_appears_within_2s(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [[{"text": "hi from the CLI"}]]}))
    async with served(tmp_path / "root", watch=True, workspace=ws) as s:
        assert (await s.client.get("/api/sessions")).json()["sessions"] == []
        await anyio.run_process(
            [
                os.path.join(os.path.dirname(os.sys.executable), "penguin"),
                "--home",
                str(tmp_path / "root"),
                "run",
                "-m",
                "hi",
                "--workspace",
                str(ws),
                "--approve",
                "allow-all",
                "--script",
                str(script),
            ],
            check=True,
        )
        with anyio.fail_after(2):
            while True:
                ctx = s.app.state.penguin
                rows = await anyio.to_thread.run_sync(ctx.index.session_rows)
                if rows:
                    break
                await anyio.sleep(0.05)
        listed = (await s.client.get("/api/sessions")).json()["sessions"]
        usage = (await s.client.get("/api/usage")).json()["rows"]
        assert len(listed) == 1 and usage and usage[0]["key"] == listed[0]["id"]
        # Found by a search too: the watcher folded the CLI's words (once it is armed, readers
        # no longer check the traces themselves).
        hits = (await s.client.get("/api/search", params={"q": "CLI"})).json()["hits"]
        assert [h["session_id"] for h in hits] == [listed[0]["id"]]
