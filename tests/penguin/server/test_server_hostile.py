"""Hostile HTTP against `penguin serve` (R-SRV-1/2/12): no 5xx, no traceback in a response,
nothing written outside the data root."""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from serverkit import AUTH, TOKEN, scripted

from penguin.server import create_app

pytestmark = pytest.mark.anyio

FUZZ_REQUESTS = 2000


class _App:
    def __init__(self, root: Path, workspace: Path) -> None:
        llm = scripted(*([[{"text": "ok"}]] * 50))
        self.app = create_app(
            root,
            token=TOKEN,
            workspace=workspace,
            watch=False,
            llm_factory=llm,
            approval="deny-all",
            body_limit=4096,
        )

    async def __aenter__(self) -> httpx.AsyncClient:
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self._life.__aexit__(None, None, None)


def _clean(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.request.method, r.request.url, r.status_code, r.text[:300])
    assert "Traceback" not in r.text and 'File "' not in r.text
    if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
        assert set(r.json()) == {"error"} and set(r.json()["error"]) == {"code", "message"}


def _outside(tmp: Path, root: Path) -> set[Path]:
    return {p for p in tmp.rglob("*") if root not in p.parents and p != root}


async def test_hostile_requests_are_refused_cleanly(tmp_path: Path) -> None:
    root, ws = tmp_path / "root", tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    before = _outside(tmp_path, root)
    async with _App(root, ws) as c:
        sid = (await c.post("/api/sessions", json={}, headers=AUTH)).json()["id"]
        r = await c.post(
            f"/api/sessions/{sid}/tasks",
            json={"input": [{"type": "text", "text": "x"}]},
            headers=AUTH,
        )
        assert r.status_code == 202
        S = f"/api/sessions/{sid}"
        cases: list[tuple[str, str, dict[str, str], bytes | None]] = [
            ("GET", "/api/sessions", {}, None),
            ("GET", "/api/sessions", {"Authorization": "Bearer " + TOKEN + "x"}, None),
            ("GET", "/api/sessions", {"Authorization": "Basic " + TOKEN}, None),
            ("GET", "/api/sessions", {"Authorization": "Bearer \u00e9\u00e9".encode()}, None),  # type: ignore[dict-item]
            ("POST", "/api/sessions", {**AUTH, "Content-Type": "text/plain"}, b"{}"),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/x-www-form-urlencoded"},
                b"a=b",
            ),
            ("POST", "/api/sessions", {**AUTH, "Content-Type": "application/json"}, b"[" * 100_000),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json"},
                b"[" * 3000 + b"]" * 3000,
            ),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json"},
                b'{"a":' * 1000 + b"1" + b"}" * 1000,
            ),
            ("POST", "/api/sessions", {**AUTH, "Content-Type": "application/json"}, b"x" * 10_000),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json", "Content-Length": "99999999"},
                b"{}",
            ),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json"},
                b'{"workspace": "/nonexistent-dir/../x-nope"}',
            ),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json"},
                b'{"approval": "yes"}',
            ),
            (
                "POST",
                "/api/sessions",
                {**AUTH, "Content-Type": "application/json"},
                b'{"compaction": {"mode": 3}}',
            ),
            ("POST", "/api/sessions", {**AUTH, "Content-Type": "application/json"}, b"\xff\xfe"),
            ("POST", f"{S}/tasks", {**AUTH, "Content-Type": "application/json"}, b'{"input": "x"}'),
            (
                "POST",
                f"{S}/tasks",
                {**AUTH, "Content-Type": "application/json"},
                b'{"input": [{"type": "video"}]}',
            ),
            (
                "POST",
                f"{S}/tasks",
                {**AUTH, "Content-Type": "application/json"},
                b'{"input": [{"type": "image", "data_url": "file:///etc/passwd"}]}',
            ),
            (
                "POST",
                f"{S}/approvals/..%2F..",
                {**AUTH, "Content-Type": "application/json"},
                b'{"decision": "allow"}',
            ),
            (
                "POST",
                f"{S}/fork",
                {**AUTH, "Content-Type": "application/json"},
                b'{"at": {"file": -1, "ordinal": 99999999999999999999}}',
            ),
            ("GET", "/api/sessions/..%2F..%2F..%2Fetc%2Fpasswd", AUTH, None),
            ("GET", "/api/sessions/session%00x", AUTH, None),
            ("GET", "/api/sessions/%2e%2e", AUTH, None),
            ("GET", f"{S}/scratchpad/..%2F..%2F..%2F..%2Fsecret.txt", AUTH, None),
            ("GET", f"{S}/scratchpad/%2Fetc%2Fpasswd", AUTH, None),
            ("GET", f"{S}/scratchpad/a%00b.png", AUTH, None),
            ("GET", f"{S}/traces/..%2F1", AUTH, None),
            ("GET", f"{S}/traces/1%00/raw", AUTH, None),
            ("GET", f"{S}/traces/99999999999999999999999/raw", AUTH, None),
            ("GET", f"{S}/traces/1?offset=-5&limit=x", AUTH, None),
            ("GET", f"{S}/context?at=1:-1", AUTH, None),
            ("GET", f"{S}/context?at=99999999999999999999:0", AUTH, None),
            ("GET", f"{S}/messages?file=../../1", AUTH, None),
            ("GET", "/api/sessions?limit=-1&cursor=zz", AUTH, None),
            ("GET", "/api/usage?group_by=1;DROP TABLE usage", AUTH, None),
            ("GET", "/api/usage?from=' OR 1=1 --", AUTH, None),
            ("DELETE", "/api/sessions/..%2F..", AUTH, None),
            ("PUT", "/api/sessions", AUTH, b"{}"),
        ]
        for method, path, headers, body in cases:
            r = await c.request(method, path, headers=headers, content=body)
            _clean(r)
            assert r.status_code >= 400 or path == "/api/usage?from=' OR 1=1 --", (
                method,
                path,
                r.status_code,
            )
            assert "top secret" not in r.text

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(100):
                yield b" " * 100

        r = await c.post(
            "/api/sessions", headers={**AUTH, "Content-Type": "application/json"}, content=chunks()
        )
        _clean(r)
        assert r.status_code == 413
        (await c.post(f"{S}/abort", headers=AUTH))
    assert _outside(tmp_path, root) == before


def _fuzz_request(rng: random.Random, sid: str) -> tuple[str, str, dict[str, str], bytes | None]:
    segments = [
        "api",
        "sessions",
        sid,
        "tasks",
        "stream-not",
        "messages",
        "traces",
        "1",
        "raw",
        "scratchpad",
        "approvals",
        "fork",
        "title",
        "compact",
        "steer",
        "abort",
        "retry-now",
        "usage",
        "errors",
        "..",
        "%2e%2e",
        "%00",
        "\u00e9",
        "x" * 300,
        "",
        "login",
        "context",
        "openapi.json",
    ]
    path = "/" + "/".join(rng.choice(segments) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.7:
        path = "/api/" + path.lstrip("/")
    if rng.random() < 0.3:
        path += (
            "?"
            + rng.choice(["file=", "at=", "offset=", "limit=", "group_by=", "cursor="])
            + rng.choice(["-1", "1:2", "x", "99999999999999999999", "%00", "1:"])
        )
    method = rng.choice(["GET", "POST", "DELETE", "PUT", "PATCH"])
    headers: dict[str, str] = {}
    if rng.random() < 0.85:
        headers.update(AUTH)
    body: bytes | None = None
    if method in ("POST", "PUT", "PATCH") and rng.random() < 0.8:
        headers["Content-Type"] = rng.choice(
            ["application/json", "text/plain", "application/json; charset=utf-8"]
        )
        value = rng.choice(
            [
                {},
                {"input": [{"type": "text", "text": "x"}]},
                {"input": []},
                {"decision": "allow"},
                {"at": {"file": 1, "ordinal": rng.randint(-3, 30)}},
                {"token": TOKEN},
                {"input": [{"type": "image", "data_url": "data:image/png;base64,AAAA"}]},
                [1, 2],
                None,
                "s",
                {"workspace": "../.."},
                {"max_turns": -1},
                {"unknown": True},
            ]
        )
        raw = json.dumps(value).encode()
        if rng.random() < 0.2:
            cut = rng.randint(0, len(raw))
            raw = raw[:cut] + bytes([rng.randint(0, 255)]) + raw[cut:]
        body = raw
    if "/steer" not in path and "/tasks" in path and rng.random() < 0.5:
        headers.pop("Authorization", None)
    return method, path, headers, body


async def test_fuzzed_requests_never_fail_the_server(tmp_path: Path) -> None:
    root, ws = tmp_path / "root", tmp_path / "ws"
    ws.mkdir()
    before = _outside(tmp_path, root)
    rng = random.Random(19)
    async with _App(root, ws) as c:
        sid = (await c.post("/api/sessions", json={}, headers=AUTH)).json()["id"]
        for _ in range(FUZZ_REQUESTS):
            method, path, headers, body = _fuzz_request(rng, sid)
            if path.endswith("/stream") or path.endswith("/api/events"):
                continue
            r = await c.request(method, path, headers=headers, content=body)
            _clean(r)
            await c.post(f"/api/sessions/{sid}/abort", headers=AUTH)
    assert _outside(tmp_path, root) == before
    assert not any(os.path.isabs(p.name) for p in root.rglob("*"))
