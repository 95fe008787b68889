"""Browser logins survive a server restart (R-SRV-1, issue 35: an open page reconnects by itself):
only digests and expiry are saved, 0600, and what is revoked or expired stays gone."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import httpx
import pytest

from penguin.server import create_app
from penguin.server._logins import Logins

TOKEN = "saved-logins-token-0123456789"


def test_r_srv_1_logins_round_trip_through_save_as_digests_only() -> None:
    saved: list[bytes] = []
    now = [1000.0]
    first = Logins(ttl=60, clock=lambda: now[0], save=saved.append)
    grant = first.create(TOKEN)
    gone = first.create(TOKEN)
    first.revoke(gone.session)
    data = saved[-1]
    assert grant.session.encode() not in data and grant.key.encode() not in data
    assert TOKEN.encode() not in data

    again = Logins(ttl=60, clock=lambda: now[0], saved=data)
    assert again.check(grant.session, grant.key, TOKEN)
    assert not again.check(gone.session, gone.key, TOKEN)  # revoked before the restart
    assert not again.check(grant.session, grant.key, TOKEN + "-new")  # a token change revokes
    now[0] += 61
    later = Logins(ttl=60, clock=lambda: now[0], saved=data)
    assert len(later) == 0  # expired ones are not loaded
    with pytest.raises(ValueError, match="unreadable saved logins"):
        Logins(saved=b"{not json")


@pytest.mark.anyio
async def test_r_srv_1_a_browser_login_works_after_the_server_restarts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def login() -> tuple[httpx.Cookies, str]:
        app = create_app(tmp_path, token=TOKEN, watch=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            r = await c.post("/api/login", json={"token": TOKEN})
            assert r.status_code == 200
            return c.cookies, r.json()["key"]

    async def sessions(cookies: httpx.Cookies, key: str) -> int:
        app = create_app(tmp_path, token=TOKEN, watch=False)  # a new server on the same root
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", cookies=cookies
        ) as c:
            return (await c.get("/api/sessions", headers={"x-penguin-key": key})).status_code

    cookies, key = await login()
    saved = tmp_path / "server-logins.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert key not in saved.read_text() and len(json.loads(saved.read_text())["logins"]) == 1
    assert await sessions(cookies, key) == 200
    assert await sessions(cookies, "another-key") == 401

    saved.write_text("garbage")  # unreadable: every browser logs in again, and the log says so
    with caplog.at_level(logging.WARNING, logger="penguin.server"):
        assert await sessions(cookies, key) == 401
    assert "every browser must log in again" in caplog.text
