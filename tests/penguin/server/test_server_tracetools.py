"""Trace tools over HTTP (R-SRV-11 with SPEC R-TOOL-1 and R-TOOL-5): ``GET .../context?at=`` is
``replay.trace_point`` (the same JSON as ``penguin inspect --at --json``), ``POST
/api/traces/import`` is ``replay.import_trace`` (201, 409 when the session exists, 400 with the
validator's findings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverkit import served

from replay import trace_point

pytestmark = pytest.mark.anyio

TRACES = Path(__file__).resolve().parents[3] / "fixtures" / "traces"


async def test_import_then_context_at(tmp_path: Path) -> None:
    (src,) = sorted((TRACES / "abort_stream").rglob("*.jsonl"))
    sid = src.name.rsplit("_", 1)[0]
    async with served(tmp_path) as s:
        r = await s.post("/api/traces/import", {"jsonl": src.read_text()})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == sid
        again = await s.post("/api/traces/import", {"jsonl": src.read_text()})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "trace_session_exists"

        r = await s.client.get(f"/api/sessions/{sid}/context", params={"at": "1:13"})
        assert r.status_code == 200, r.text
        expected = trace_point([src], (1, 13)).as_json()
        expected.pop("path")
        assert r.json() == expected
        assert [m["synthesized"] for m in r.json()["request"]["messages"]] == [
            False,
            False,
            True,
            False,
        ]
        for at, status in (("x", 400), ("", 400), ("9:0", 404), ("1:9999", 404)):
            bad = await s.client.get(f"/api/sessions/{sid}/context", params={"at": at})
            assert bad.status_code == status, (at, bad.text)
            assert str(tmp_path) not in bad.text


async def test_import_refusals(tmp_path: Path) -> None:
    hostile = TRACES / "hostile"
    async with served(tmp_path) as s:
        r = await s.post(
            "/api/traces/import", {"jsonl": (hostile / "duplicate_keys_001.jsonl").read_text()}
        )
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["code"] == "invalid_trace"
        assert any("V-2 error" in f for f in error["findings"])
        r = await s.post(
            "/api/traces/import", {"jsonl": (hostile / "path_ids_001.jsonl").read_text()}
        )
        assert r.status_code == 400 and "invalid session id" in r.json()["error"]["message"]
        r = await s.post("/api/traces/import", {"jsonl": "not a trace"})
        assert r.status_code == 400
