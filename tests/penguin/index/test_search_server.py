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
        file, ordinal = hit["at"].split(":")
        ctx = await s.client.get(f"/api/sessions/{sid}/context", params={"at": hit["at"]})
        assert ctx.status_code == 200 and int(file) == 1 and int(ordinal) >= 1
        assert (await s.client.get("/api/search", params={"q": "pelican"})).json()["hits"] == []
        for bad in ({"q": "AND ("}, {"q": ""}, {"q": "x", "limit": "0"}, {"q": "x", "since": "?"}):
            r = await s.client.get("/api/search", params=bad)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query", bad
        doc = (await s.client.get("/api/openapi.json")).json()
        op = doc["paths"]["/api/search"]["get"]
        assert next(p["name"] for p in op["parameters"]) == "q"
        assert "schema" in op["responses"]["200"]["content"]["application/json"]
