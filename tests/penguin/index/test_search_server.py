"""``GET /api/search`` (R-SRV-13, R-SRV-15): the server reads the one index."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverkit import Reader, is_server, scripted, served

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "please find the cormorant"}]}


async def test_search_route_shape_and_errors(tmp_path: Path) -> None:
    llm = scripted([{"text": "The cormorant is in src/birds.py."}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            await rd.until(is_server("task_state", state="idle"))
        r = await s.client.get("/api/search", params={"q": "cormorant"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["query"] == "cormorant"
        (hit,) = body["hits"]
        assert hit["session_id"] == sid and hit["matches"] == 2
        assert {"text": "cormorant", "match": True} in hit["snippet"]
        assert hit["archived"] is False
        file, ordinal = hit["at"].split(":")
        ctx = await s.client.get(f"/api/sessions/{sid}/context", params={"at": hit["at"]})
        assert ctx.status_code == 200 and int(file) == 1 and int(ordinal) >= 1
        assert (await s.client.get("/api/search", params={"q": "pelican"})).json()["hits"] == []
        # Archived: gone from the list, still found, and the hit says so.
        archive = await s.post(f"/api/sessions/{sid}/archive", {"archived": True})
        assert archive.status_code == 200, archive.text
        (hit,) = (await s.client.get("/api/search", params={"q": "cormorant"})).json()["hits"]
        assert hit["session_id"] == sid and hit["archived"] is True
        for bad in ({"q": "AND ("}, {"q": ""}, {"q": "x", "limit": "0"}, {"q": "x", "since": "?"}):
            r = await s.client.get("/api/search", params=bad)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query", bad
        doc = (await s.client.get("/api/openapi.json")).json()
        op = doc["paths"]["/api/search"]["get"]
        assert next(p["name"] for p in op["parameters"]) == "q"
        assert "schema" in op["responses"]["200"]["content"]["application/json"]


async def test_r_srv_13_an_armed_watcher_spares_a_reader_the_check(tmp_path: Path) -> None:
    """While the watcher is armed it folds every change to the traces (other processes'
    included), so a search reads the index alone — the check it spares is one stat per session,
    linear in the fleet — unless this server's own sessions wrote since the last refresh (read
    your writes).  Without the watcher every reader checks, at most once per 0.5 s."""
    llm = scripted([{"text": "The cormorant is in src/birds.py."}])
    async with served(tmp_path, llm_factory=llm, approval="allow-all") as s:
        ctx = s.app.state.penguin
        calls: list[object] = []
        real = ctx.index.refresh

        def counting(*args: object, **kw: object) -> list[str]:
            calls.append(args)
            return real(*args, **kw)

        ctx.index.refresh = counting
        ctx.watching = True  # what watch_traces sets once its watcher is armed
        ctx.refreshed = 0.0  # long ago: no max_age spares the check
        await ctx.refresh_index(max_age=0)  # the watcher's own refresh
        calls.clear()
        ctx.refreshed = 0.0
        assert (await s.client.get("/api/search", params={"q": "cormorant"})).json()["hits"] == []
        assert calls == []  # nothing written here since: the index alone
        sid = await s.new_session()
        async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.next()
            assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            await rd.until(is_server("task_state", state="idle"))
        ctx.refreshed = 0.0
        (hit,) = (await s.client.get("/api/search", params={"q": "cormorant"})).json()["hits"]
        assert hit["session_id"] == sid and len(calls) == 1  # its own writes: checked at once
        ctx.refreshed = 0.0
        assert len((await s.client.get("/api/search", params={"q": "cormorant"})).json()["hits"])
        assert len(calls) == 1  # and not again
        ctx.watching = False
        ctx.refreshed = 0.0
        assert len((await s.client.get("/api/search", params={"q": "cormorant"})).json()["hits"])
        assert len(calls) == 2  # no watcher: every reader checks
