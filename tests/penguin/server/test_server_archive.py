"""Archive from the sessions list (issue 35 item 6): ``POST /api/sessions/{id}/archive`` writes a
``session_archived`` record through the store's writer; ``GET /api/sessions`` hides archived
sessions unless ``?archived=true``.  The flag is the trace's, so it survives a restart and a
rebuilt index; the one status (R-SET-5) stays the last run's."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from serverkit import Reader, Served, is_server, scripted, served

from eventstore import SessionArchivedPayload, iter_trace

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "hi"}]}


def marks(root: Path, sid: str) -> list[bool]:
    return [
        r.payload.archived
        for path in sorted(root.rglob(f"{sid}_*.jsonl"))
        for r in iter_trace(path, report=False)
        if isinstance(r.payload, SessionArchivedPayload)
    ]


async def run_task(s: Served, sid: str) -> None:
    async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
        rd = Reader(resp)
        await rd.next()
        assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
        await rd.until(is_server("task_state", state="idle"))


async def listed(s: Served, query: str = "") -> list[str]:
    r = await s.client.get(f"/api/sessions{query}")
    assert r.status_code == 200, r.text
    return [row["id"] for row in r.json()["sessions"]]


async def test_archive_hides_unarchive_shows_and_both_survive_a_restart(tmp_path: Path) -> None:
    llm = scripted([{"text": "one"}], [{"text": "two"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        kept, gone = await s.new_session(), await s.new_session()
        await run_task(s, kept)
        await run_task(s, gone)
        assert set(await listed(s)) == {kept, gone}
        r = await s.post(f"/api/sessions/{gone}/archive", {"archived": True})
        assert r.status_code == 200, r.text
        row = r.json()
        assert (row["id"], row["archived"], row["status"]) == (gone, True, "completed")
        assert await listed(s) == [kept]
        assert await listed(s, "?archived=true") == [gone]
        assert (await s.client.get(f"/api/sessions/{gone}")).json()["archived"] is True
        assert marks(tmp_path, gone) == [True]
    # A restart with the index deleted: the flag comes back from the trace.
    for p in tmp_path.glob("index.sqlite3*"):
        p.unlink()
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s2:
        assert await listed(s2) == [kept]
        assert await listed(s2, "?archived=1") == [gone]
        r = await s2.post(f"/api/sessions/{gone}/archive", {"archived": False})
        assert r.status_code == 200 and r.json()["archived"] is False
        assert set(await listed(s2)) == {kept, gone}
        assert await listed(s2, "?archived=true") == []
        # The session still runs after being archived and unarchived (resume ignores marks).
        await run_task(s2, gone)
        row = (await s2.client.get(f"/api/sessions/{gone}")).json()
        assert (row["status"], row["archived"]) == ("completed", False)
    assert marks(tmp_path, gone) == [True, False]


async def test_the_mark_is_on_the_session_stream_at_its_position(tmp_path: Path) -> None:
    """R-SRV-8: event ids are trace positions; the mark is a record of the trace, so the
    session's stream carries it with its position, the next task's records follow it, and
    /api/events tells other pages' lists."""
    llm = scripted([{"text": "one"}], [{"text": "two"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        await run_task(s, sid)
        async with (
            s.client.stream("GET", "/api/events") as events,
            s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp,
        ):
            told, rd = Reader(events), Reader(resp)
            await told.opened()
            await rd.until(is_server("task_state"))
            assert (await s.post(f"/api/sessions/{sid}/archive", {"archived": True})).is_success
            mark = (await rd.until(lambda e: "session_archived" in e.data))[-1]
            await told.until(is_server("session_archived", id=sid, archived=True))
            assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            after = await rd.until(is_server("task_state", state="idle"))
        (path,) = sorted(tmp_path.rglob(f"{sid}_*.jsonl"))
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if "session_archived" in line)
        assert mark.id == f"1:{at}"
        ids = [e.id for e in after if e.event is None and e.id and "+" not in e.id]
        assert ids[0] == f"1:{at + 1}" and ids[-1] == f"1:{len(lines) - 1}"


async def test_a_running_session_is_409_and_nothing_is_written(tmp_path: Path) -> None:
    llm = scripted([{"text": "hello"}], [{"sleep_ms": 60_000}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        await run_task(s, sid)
        assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
        r = await s.post(f"/api/sessions/{sid}/archive", {"archived": True})
        assert r.status_code == 409 and r.json()["error"]["code"] == "task_in_progress"
        await s.post(f"/api/sessions/{sid}/abort")
        with anyio.fail_after(10):
            while (await s.client.get(f"/api/sessions/{sid}")).json()["state"] != "idle":
                await anyio.sleep(0.02)
        assert marks(tmp_path, sid) == []
        # Aborted, it can be archived; its status stays the last run's.
        r = await s.post(f"/api/sessions/{sid}/archive", {"archived": True})
        assert r.status_code == 200 and r.json()["status"] == "aborted"


async def test_a_task_started_while_archiving_unloads_wins_409_and_no_mark(
    tmp_path: Path,
) -> None:
    """Archiving unloads the session, then writes under its load lock: a task claimed in
    between is reported as 409 task_in_progress (not as our own lock), and nothing is written.
    The test holds the load lock so that both requests are seen waiting, in order."""
    llm = scripted([{"text": "one"}], [{"text": "two"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        await run_task(s, sid)
        h = await s.app.state.penguin.host.get(sid)
        answers: dict[str, int] = {}

        async def call(name: str, path: str, body: object) -> None:
            answers[name] = (await s.post(path, body)).status_code

        async def waiting(n: int) -> None:
            with anyio.fail_after(10):
                while h.load_lock.statistics().tasks_waiting < n:
                    await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            await h.load_lock.acquire()
            try:
                tg.start_soon(call, "archive", f"/api/sessions/{sid}/archive", {"archived": True})
                await waiting(1)  # unloaded, waiting to write
                tg.start_soon(call, "task", f"/api/sessions/{sid}/tasks", TEXT)
                await waiting(2)  # the task claimed the session and waits to load it
            finally:
                h.load_lock.release()
        assert answers == {"archive": 409, "task": 202}
        assert marks(tmp_path, sid) == []


async def test_a_session_another_process_holds_is_session_locked(tmp_path: Path) -> None:
    llm = scripted([{"text": "one"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as a:
        sid = await a.new_session()
        await run_task(a, sid)  # server a keeps it loaded: it holds the lock
        async with served(tmp_path, llm_factory=llm, approval="allow-all") as b2:
            r = await b2.post(f"/api/sessions/{sid}/archive", {"archived": True})
            assert r.status_code == 409 and r.json()["error"]["code"] == "session_locked"
        assert marks(tmp_path, sid) == []
        # Its own server releases it to write the mark.
        assert (await a.post(f"/api/sessions/{sid}/archive", {"archived": True})).status_code == 200
    assert marks(tmp_path, sid) == [True]


async def test_bad_requests_get_the_one_error_shape(tmp_path: Path) -> None:
    llm = scripted([{"text": "one"}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        # Created here, nothing recorded yet: nothing to mark.
        r = await s.post(f"/api/sessions/{sid}/archive", {"archived": True})
        assert r.status_code == 409 and r.json()["error"]["code"] == "nothing_recorded"
        await run_task(s, sid)
        for body, code in (
            ({}, "invalid_body"),
            ({"archived": "yes"}, "invalid_body"),
            ({"archived": True, "why": 1}, "invalid_body"),
        ):
            r = await s.post(f"/api/sessions/{sid}/archive", body)
            assert r.status_code == 400 and r.json()["error"]["code"] == code, body
        r = await s.post(f"/api/sessions/{sid}/archive", content=b"archived")
        assert r.status_code == 415
        r = await s.post(
            "/api/sessions/session-2026-01-01-00-00-00-00000000/archive", {"archived": True}
        )
        assert r.status_code == 404
        r = await s.client.get("/api/sessions?archived=maybe")
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"
        assert marks(tmp_path, sid) == []
