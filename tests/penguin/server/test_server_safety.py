"""`penguin serve` safe by construction (issue 29; R-SRV-1, R-SRV-2, R-SRV-10, R-SRV-14):
browser logins that another app on another port cannot use, bad inputs refused, a client's
disconnect not logged as a fault, header and body timeouts, a clean end of streams."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from serverkit import TOKEN, Reader, is_server, scripted, served

from penguin.server._logins import Logins

pytestmark = pytest.mark.anyio

TEXT = {"input": [{"type": "text", "text": "hi"}]}
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


# ---------------------------------------------------------------------------- item 1: logins


@asynccontextmanager
async def _third_app() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """Another web app on the same host, on a third port: it records what browsers send it."""
    received: list[dict[str, str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        received.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(server._serve)
        while not server.started:
            await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", received
        finally:
            server.should_exit = True


async def test_r_srv_1_a_login_on_one_port_is_useless_to_an_app_on_another(
    tmp_path: Path,
) -> None:
    """Issue 29 acceptance: a browser (one cookie jar, which like every browser ignores ports)
    logs in to two servers on two ports; a third app on a third port receives their cookies and
    cannot authenticate to either with anything it received; both logins keep working."""
    llm = scripted([{"text": "ok"}])
    async with (
        served(tmp_path / "a", llm_factory=llm) as a,
        served(tmp_path / "b", llm_factory=llm, token=TOKEN + "-b") as b,
        _third_app() as (third, received),
    ):
        assert len({a.base, b.base, third}) == 3
        async with httpx.AsyncClient(timeout=30) as browser:
            keys = {}
            for srv, token in ((a, TOKEN), (b, TOKEN + "-b")):
                r = await browser.post(f"{srv.base}/api/login", json={"token": token})
                assert r.status_code == 200, r.text
                keys[srv.base] = r.json()["key"]
                port = srv.base.rsplit(":", 1)[1]
                cookie = r.headers["set-cookie"]
                assert cookie.startswith(f"penguin_session_{port}=")
                assert "HttpOnly" in cookie and "SameSite=strict" in cookie
                assert "Max-Age=" in cookie
                # The master token never leaves the Authorization header.
                assert token not in cookie and token not in r.text
            assert len(browser.cookies.jar) == 2  # one per server: neither overwrote the other
            for srv in (a, b):
                r = await browser.get(
                    f"{srv.base}/api/sessions", headers={"X-Penguin-Key": keys[srv.base]}
                )
                assert r.status_code == 200, r.text
            # The browser visits the third app: it receives both servers' cookies.
            assert (await browser.get(f"{third}/")).status_code == 200
        got = received[-1]
        assert "penguin_session_" in got.get("cookie", "")
        assert TOKEN not in json.dumps(received)
        values = [v for part in got["cookie"].split(";") for v in [part.split("=", 1)[1]]]
        async with httpx.AsyncClient(timeout=30) as thief:
            for srv in (a, b):
                attempts: list[dict[str, str]] = [{"Cookie": got["cookie"]}]
                attempts += [{"Authorization": f"Bearer {v}"} for v in values]
                attempts += [{"Cookie": got["cookie"], "X-Penguin-Key": v} for v in values]
                for headers in attempts:
                    r = await thief.get(f"{srv.base}/api/sessions", headers=headers)
                    assert r.status_code == 401, (srv.base, headers)


async def test_r_srv_1_logout_revokes_the_login_and_the_cookie_alone_is_not_enough(
    tmp_path: Path,
) -> None:
    async with (
        served(tmp_path, llm_factory=scripted([{"text": "ok"}])) as srv,
        httpx.AsyncClient(base_url=srv.base, timeout=30) as browser,
    ):
        r = await browser.post("/api/login", json={"token": TOKEN})
        key = {"X-Penguin-Key": r.json()["key"]}
        name = f"penguin_session_{srv.base.rsplit(':', 1)[1]}"
        session = browser.cookies[name]
        assert session != TOKEN
        assert (await browser.get("/api/sessions")).status_code == 401  # cookie alone
        assert (await browser.get("/api/sessions", headers=key)).status_code == 200
        origin = {**key, "Origin": srv.base}
        assert (await browser.post("/api/logout", headers=origin)).status_code == 204
        # The old cookie and key, replayed, are refused: the login is gone server-side.
        replay = {**key, "Cookie": f"{name}={session}"}
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as again:
            assert (await again.get("/api/sessions", headers=replay)).status_code == 401


def test_r_srv_1_logins_expire_and_a_token_change_revokes_them() -> None:
    now = [1000.0]
    logins = Logins(ttl=60, clock=lambda: now[0])
    grant = logins.create("token-one-0123456789")
    assert logins.check(grant.session, grant.key, "token-one-0123456789")
    assert not logins.check(grant.session, "wrong", "token-one-0123456789")
    assert not logins.check(grant.session, grant.key, "token-two-0123456789")  # token changed
    assert not logins.check(grant.session, grant.key, "token-one-0123456789")  # and stays gone
    other = logins.create("token-one-0123456789")
    now[0] += 61
    assert not logins.check(other.session, other.key, "token-one-0123456789")  # expired
    assert len(logins) == 0
    bounded = Logins(limit=3)
    grants = [bounded.create("t" * 20) for _ in range(5)]
    assert len(bounded) == 3 and not bounded.check(grants[0].session, grants[0].key, "t" * 20)


# ---------------------------------------------------------------------------- item 3: logs, timeouts


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _captured() -> Iterator[_Records]:
    handler = _Records()
    loggers = [logging.getLogger(n) for n in ("penguin.server", "uvicorn.error", "uvicorn")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
    logging.getLogger("penguin.server").setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


async def _until_closed(stream: Any) -> None:
    """Reads until the server closes the connection (``fail_after`` bounds the wait)."""
    with anyio.fail_after(10):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def test_a_client_hanging_up_mid_body_is_one_debug_line(tmp_path: Path) -> None:
    # Captured once the server runs: uvicorn's logging setup replaces its loggers' handlers.
    async with served(tmp_path, llm_factory=scripted([{"text": "ok"}])) as srv:
        with _captured() as logs:
            sid = await srv.new_session()
            for _ in range(3):
                stream = await anyio.connect_tcp("127.0.0.1", _port(srv.base))
                head = (
                    f"POST /api/sessions/{sid}/tasks HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                    "Content-Length: 1000\r\n\r\n"
                )
                await stream.send(head.encode() + b'{"input": [')
                await stream.aclose()  # hangs up mid-body
            with anyio.fail_after(20):
                while len(logs.records) < 3:
                    await anyio.sleep(0.01)  # waits for the server's handling, orders nothing
            assert (await srv.client.get("/api/sessions")).status_code == 200
    assert [r.levelno for r in logs.records] == [logging.DEBUG] * 3, [
        r.getMessage() for r in logs.records
    ]
    assert all(r.exc_info is None for r in logs.records)


async def test_r_srv_2_a_real_fault_is_logged_once_with_its_request_id(tmp_path: Path) -> None:
    """A server fault is one log entry (with its traceback), not two (issue 29: Starlette's
    handler re-raised it and uvicorn logged it again)."""

    def broken(model: str | None) -> Any:
        raise RuntimeError("the model factory broke")

    async with served(tmp_path, llm_factory=broken) as srv:
        with _captured() as logs:
            r = await srv.post("/api/sessions", {})
            assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
            rid = r.json()["error"]["message"].split("request id ")[1].rstrip(")")
            assert (await srv.client.get("/api/sessions")).status_code == 200
    errors = [rec for rec in logs.records if rec.levelno >= logging.WARNING]
    assert len(errors) == 1, [rec.getMessage() for rec in errors]
    assert rid in errors[0].getMessage() and errors[0].exc_info is not None


async def test_request_headers_must_arrive_in_time(tmp_path: Path) -> None:
    async with served(tmp_path, header_timeout=0.3) as srv:
        async with await anyio.connect_tcp("127.0.0.1", _port(srv.base)) as stream:
            await stream.send(b"GET /api/sessions HTTP/1.1\r\nHost: x\r\n")  # never finished
            await _until_closed(stream)
        # A kept-alive connection gets a new deadline for its next request.
        async with await anyio.connect_tcp("127.0.0.1", _port(srv.base)) as stream:
            req = f"GET /api/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            await stream.send(req.encode())
            first = await stream.receive()
            assert first.startswith(b"HTTP/1.1 200")
            await stream.send(b"GET /api/sessions HTTP/1.1\r\n")
            await _until_closed(stream)


async def test_a_stalled_body_is_answered_408(tmp_path: Path) -> None:
    async with served(tmp_path, body_timeout=0.3, llm_factory=scripted([{"text": "ok"}])) as srv:
        stream = await anyio.connect_tcp("127.0.0.1", _port(srv.base))
        head = (
            f"POST /api/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await stream.send(head.encode())
        data = b""
        with anyio.fail_after(10):
            try:
                while b"request_timeout" not in data:
                    data += await stream.receive()
            except anyio.EndOfStream:
                pass
        await stream.aclose()
        assert data.startswith(b"HTTP/1.1 408"), data
        assert b"request_timeout" in data


# ---------------------------------------------------------------------------- item 4: bad inputs


async def test_r_srv_4_an_invalid_image_is_refused_and_nothing_recorded(tmp_path: Path) -> None:
    async with served(tmp_path, llm_factory=scripted([{"text": "ok"}])) as srv:
        sid = await srv.new_session()
        bad = [
            "data:image/png;base64,!!!!",
            "data:image/png;base64,AAAA",  # valid base64, not a PNG
            "data:image/svg+xml;base64,PHN2Zy8+",
            f"data:image/jpeg;base64,{PNG_1PX}",  # a PNG declared as JPEG
        ]
        for url in bad:
            body = {"input": [{"type": "text", "text": "x"}, {"type": "image", "data_url": url}]}
            r = await srv.post(f"/api/sessions/{sid}/tasks", body)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_image", url
            assert "input[1]" in r.json()["error"]["message"]
        traces = list(tmp_path.rglob(f"{sid}_*.jsonl"))
        assert not any("image" in p.read_text() for p in traces)
        assert not [p for p in tmp_path.rglob("*") if p.suffix in (".png", ".jpg", ".jpeg")]
        good = {"input": [{"type": "image", "data_url": f"data:image/png;base64,{PNG_1PX}"}]}
        assert (await srv.post(f"/api/sessions/{sid}/tasks", good)).status_code == 202


async def test_r_srv_10_bad_dates_are_refused(tmp_path: Path) -> None:
    async with served(tmp_path) as srv:
        for path in ("/api/usage", "/api/usage/errors"):
            for query in ("from=notadate", "to=2026-13-45", "from=2026-01-01&to=yesterday"):
                r = await srv.client.get(f"{path}?{query}")
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"
            r = await srv.client.get(f"{path}?from=2026-01-01&to=2026-02-01T10:00:00%2B00:00")
            assert r.status_code == 200, r.text


def _penguin(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    script = home / "s.json"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps({"responses": [[{"text": "x"}]]}))
    env = {k: v for k, v in os.environ.items() if k != "PENGUIN_SERVER_TOKEN"}
    return subprocess.run(
        [exe, "--home", str(home), "serve", *args, "--script", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_r_srv_1_a_weak_token_is_refused_for_a_public_bind(tmp_path: Path) -> None:
    r = _penguin(tmp_path, "--host", "0.0.0.0", "--port", "0", "--token", "x")
    assert r.returncode == 2, r.stderr
    assert "1-character token" in r.stderr and "16" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_busy_port_is_named_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = _penguin(tmp_path, "--port", str(port), "--token", TOKEN)
    assert r.returncode == 2, r.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


async def test_r_srv_14_shutdown_ends_streams_with_a_complete_response(tmp_path: Path) -> None:
    """SIGTERM's path (``begin_shutdown``): every open stream ends with the chunked body's
    terminator, so clients see a clean end, not a broken response."""
    async with served(tmp_path, llm_factory=scripted([{"text": "ok"}])) as srv:
        sid = await srv.new_session()
        async with (
            srv.client.stream("GET", f"/api/sessions/{sid}/stream") as one,
            srv.client.stream("GET", "/api/events") as users,
        ):
            r1, r2 = Reader(one), Reader(users)
            await r1.until(is_server("task_state"))
            await r2.opened()
            srv.app.state.penguin.begin_shutdown()
            with anyio.fail_after(15):
                for reader in (r1, r2):
                    await _until_eof(reader)


async def _until_eof(reader: Reader) -> None:
    """Reads to the end: a clean end is ``EOFError``; a broken chunked body raises
    ``httpx.RemoteProtocolError`` instead, failing the test."""
    try:
        while True:
            await reader.next()
    except EOFError:
        return


# ---------------------------------------------------------------------------- item 5: resources


def _lock_is_free(lock: Path) -> bool:
    """flock is per open file: this process's own server holding it still conflicts."""
    import fcntl

    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


async def test_an_idle_session_lets_a_cli_resume_run_and_streams_it_live(tmp_path: Path) -> None:
    """Issue 29: a session the server used is released when idle, so ``penguin resume -m``
    works while the server runs; the Web App's stream shows that CLI run's records as they are
    written; the server's next task takes the session again and sees them."""
    root = tmp_path / "home"
    script = tmp_path / "cli.json"
    script.write_text(json.dumps({"responses": [[{"text": "from the cli"}]] * 3}))
    llm = scripted([{"text": "from the server"}], [{"text": "server again"}], [{"text": "x"}])
    async with served(root, llm_factory=llm, idle_release=0.2, watch=True) as srv:
        sid = await srv.new_session()
        async with srv.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
            rd = Reader(resp)
            await rd.until(is_server("task_state"))
            assert (await srv.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
            await rd.until(lambda e: e.event is None and "from the server" in e.data)
            await rd.until(is_server("task_state", state="idle"))
            (lock,) = root.rglob(f"{sid}.lock")
            with anyio.fail_after(20):
                while not _lock_is_free(lock):
                    await anyio.sleep(0.05)  # waits for the idle release; orders nothing
            exe = os.path.join(os.path.dirname(sys.executable), "penguin")
            args = ["--home", str(root), "resume", sid, "-m", "go on", "--change-model"]
            cli = await anyio.run_process([exe, *args, "--script", str(script)], check=False)
            assert cli.returncode == 0, cli.stderr.decode()
            with anyio.fail_after(20):
                seen = await rd.until(lambda e: e.event is None and "from the cli" in e.data)
            assert any(e.event is None and '"go on"' in e.data for e in seen)
            ids = [e.id for e in seen if e.event is None]
            assert all(i is not None and "+" not in i for i in ids)  # recorded positions
        # The server takes the session again on use, after the CLI's records.
        assert (await srv.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
        msgs = await _messages_when_idle(srv, sid)
        texts = [m["message"]["payload"].get("text") for m in msgs]
        texts = [t for t in texts if t]
        assert texts[:4] == ["hi", "from the server", "go on", "from the cli"], texts
        assert texts[4] == "hi" and len(texts) == 6, texts


async def test_a_session_with_nothing_written_yet_is_never_released(tmp_path: Path) -> None:
    """It exists only in memory until its first record: releasing it would lose it (found by
    the server bench: a 500 on the first task of sessions created and left idle)."""
    llm = scripted([{"text": "ok"}])
    async with served(tmp_path, llm_factory=llm, idle_release=0.05) as srv:
        empty = await srv.new_session()
        used = await srv.new_session()
        assert (await srv.post(f"/api/sessions/{used}/tasks", TEXT)).status_code == 202
        await _messages_when_idle(srv, used)
        (lock,) = tmp_path.rglob(f"{used}.lock")
        with anyio.fail_after(20):
            while not _lock_is_free(lock):
                await anyio.sleep(0.05)  # waits for the idle release; orders nothing
        # The releaser has passed over ``empty`` several times by now.
        assert (await srv.post(f"/api/sessions/{empty}/tasks", TEXT)).status_code == 202
        msgs = await _messages_when_idle(srv, empty)
        assert "ok" in [m["message"]["payload"].get("text") for m in msgs]


async def _messages_when_idle(srv: Any, sid: str) -> list[dict[str, Any]]:
    with anyio.fail_after(20):
        while True:
            r = await srv.client.get(f"/api/sessions/{sid}/messages")
            body = r.json()
            if body.get("live") is None:
                return list(body["messages"])
            await anyio.sleep(0.05)  # waits for the task's end; orders nothing


def test_r_srv_8_replay_buffers_are_bounded_together_least_recently_used_first() -> None:
    """Issue 29: every session's replay buffer was kept forever (8 MiB each).  Together they
    now hold at most the pool's bytes; the least recently published-to channel is emptied
    first, and a reconnect to it is planned from the trace (nothing lost, R-SRV-8)."""
    from eventstore import builders as b
    from penguin.server._channel import BufferPool, Channel, ReplayPlan

    pool = BufferPool(4096)
    a, b_, c = (Channel((1, 0), restored=False, pool=pool) for _ in range(3))
    for i in range(1, 6):
        a.publish_record(b.user_text("a" * 300), 1, i)
    a_sub, missed = a.subscribe((1, 1, 0))
    assert isinstance(missed, list) and len(missed) == 4  # served from a's buffer
    a.unsubscribe(a_sub)
    for i in range(1, 6):
        b_.publish_record(b.user_text("b" * 300), 1, i)
    for i in range(1, 6):
        c.publish_record(b.user_text("c" * 300), 1, i)
    assert pool.total <= 4096
    assert a.buffered_bytes == 0 and c.buffered_bytes > 0  # a was least recently used
    assert pool.total == a.buffered_bytes + b_.buffered_bytes + c.buffered_bytes
    _, plan = a.subscribe((1, 1, 0))
    assert isinstance(plan, ReplayPlan) and plan.after == (1, 1) and plan.upto == (1, 5)
    for i in range(6, 9):  # a is used again: now b or c gives way
        a.publish_record(b.user_text("a" * 300), 1, i)
    assert a.buffered_bytes > 0 and pool.total <= 4096
    c.close()
    assert pool.total == a.buffered_bytes + b_.buffered_bytes


async def test_forking_a_session_with_no_records_yet_is_400_not_500(tmp_path: Path) -> None:
    """Found by the stateful fuzzer (test_server_fuzz.py): a session created and not yet
    written has no trace to fork."""
    async with served(tmp_path, llm_factory=scripted([{"text": "ok"}])) as srv:
        sid = await srv.new_session()
        r = await srv.post(f"/api/sessions/{sid}/fork", {"at": {"file": 1, "ordinal": 0}})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_fork_point"
        # And the refused fork leaves it hosted as it was: it still compacts (nothing yet),
        # runs and answers, instead of a 500 for a session whose trace does not exist.
        r = await srv.post(f"/api/sessions/{sid}/compact")
        assert r.status_code == 409 and r.json()["error"]["code"] == "empty"
        r = await srv.post(
            f"/api/sessions/{sid}/tasks", {"input": [{"type": "text", "text": "hi"}]}
        )
        assert r.status_code == 202, r.text
