"""The sandbox in the server's session body and rows (SPEC §25, R-BOX-1..3): chosen per session,
shown in the session row, kept when the session is loaded again, refused with 409 where the
kernel cannot enforce it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serverkit import AUTH, TOKEN, scripted

from penguin.server import create_app

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app: Any = create_app(
        tmp_path / "home",
        token=TOKEN,
        workspace=tmp_path,
        watch=False,
        llm_factory=scripted([{"text": "ok"}]),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=AUTH
        ) as c:
            yield c


async def test_the_body_chooses_the_sandbox_and_the_row_shows_it(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/api/sessions", json={})
    assert r.status_code == 201
    assert r.json()["sandbox"] == {"mode": "workspace-write", "network": False}
    r = await client.post("/api/sessions", json={"sandbox": "read-only", "network": True})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert r.json()["sandbox"] == {"mode": "read-only", "network": True}
    r = await client.get(f"/api/sessions/{sid}")
    assert r.json()["sandbox"] == {"mode": "read-only", "network": True}
    r = await client.post("/api/sessions", json={"sandbox": "off"})
    assert r.json()["sandbox"] == {"mode": "off", "network": True}  # off: unconfined
    for bad in ({"sandbox": "none"}, {"network": "yes"}):
        r = await client.post("/api/sessions", json=bad)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body", r.text


async def test_a_kernel_without_landlock_refuses_the_session(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-BOX-2: 409 with the reason; `off` chosen explicitly still starts."""
    monkeypatch.setattr("engine._sandbox.landlock_abi", lambda: 0)
    r = await client.post("/api/sessions", json={})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "sandbox_unavailable"
    assert "needs Linux Landlock ABI 3" in r.json()["error"]["message"]
    r = await client.post("/api/sessions", json={"sandbox": "off"})
    assert r.status_code == 201
