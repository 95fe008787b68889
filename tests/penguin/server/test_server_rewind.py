"""`POST /api/sessions/{id}/rewind` (SPEC §27, R-SNAP-2), over a real uvicorn on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverkit import served
from snapkit import record_with_snapshots

pytestmark = pytest.mark.anyio

SCRIPT = {
    "responses": [
        {
            "items": [
                {"tool_call": {"name": "write_file", "arguments": {"path": "a", "content": "1"}}}
            ]
        },
        {"items": [{"text": "one"}]},
        {"items": [{"tool_call": {"name": "exec_command", "arguments": {"cmd": "echo 2 > a"}}}]},
        {"items": [{"text": "two"}]},
    ]
}


async def test_r_snap_2_rewind_route_plans_refuses_and_restores(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    sid = await record_with_snapshots(home, ws, SCRIPT, ("first", "second"))
    async with served(home, workspace=ws) as s:
        r = await s.post(f"/api/sessions/{sid}/rewind", {"task": 1, "dry_run": True})
        assert r.status_code == 200, r.text
        plan = r.json()["plan"]
        assert plan["task"] == 1 and plan["change"] == ["a"] and plan["outside"] == []
        assert (ws / "a").read_text() == "2\n"  # a plan writes nothing

        r = await s.post(f"/api/sessions/{sid}/rewind", {"task": 9})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_rewind_point"
        r = await s.post(f"/api/sessions/{sid}/rewind", {})
        assert r.status_code == 400

        (ws / "mine.txt").write_text("by hand")
        r = await s.post(f"/api/sessions/{sid}/rewind", {"task": 1})
        assert r.status_code == 409 and r.json()["error"]["code"] == "rewind_refused"
        assert (ws / "a").read_text() == "2\n"

        r = await s.post(f"/api/sessions/{sid}/rewind", {"task": 1, "force": True})
        assert r.status_code == 201, r.text
        fork = r.json()["session"]["id"]
        assert fork != sid
        assert (ws / "a").read_text() == "1" and not (ws / "mine.txt").exists()
        assert (await s.client.get(f"/api/sessions/{fork}")).status_code == 200
