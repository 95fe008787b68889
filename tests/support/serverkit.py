"""Test kit for ``penguin.server``: a real uvicorn on 127.0.0.1 (port 0) in the test's own event
loop, an SSE reader, and scripted-model factories."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

from engine import LLM
from engine.llm import ScriptedLLM
from penguin.server import create_app
from penguin.server._protocol import HEADER_TIMEOUT_S, uvicorn_config

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def scripted(*responses: Any, **top: Any) -> Callable[[str | None], LLM]:
    """A factory giving each session a fresh ScriptedLLM of ``responses``."""
    script = {"responses": list(responses), **top}
    return lambda model: ScriptedLLM(script)


@dataclass
class Served:
    base: str
    app: Any
    client: httpx.AsyncClient
    server: uvicorn.Server

    async def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        if body is None:
            return await self.client.post(path, **kw)
        return await self.client.post(path, json=body, **kw)

    async def new_session(self, **body: Any) -> str:
        r = await self.post("/api/sessions", body)
        assert r.status_code == 201, r.text
        sid: str = r.json()["id"]
        return sid


@asynccontextmanager
async def served(
    root: Path, *, header_timeout: float = HEADER_TIMEOUT_S, **options: Any
) -> AsyncIterator[Served]:
    options.setdefault("token", TOKEN)
    options.setdefault("workspace", root)
    options.setdefault("watch", False)
    app = create_app(root, **options)
    config = uvicorn_config(
        app,
        host="127.0.0.1",
        port=0,
        lifespan="on",
        log_level="warning",
        header_timeout=header_timeout,
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server._serve)
        while not server.started:
            await anyio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as client:
            try:
                yield Served(base, app, client, server)
            finally:
                server.should_exit = True


@dataclass
class SSE:
    id: str | None
    event: str | None
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Reader:
    """Reads events from an open stream response."""

    response: httpx.Response
    last_id: str | None = None
    _lines: Any = None
    comments: list[str] = field(default_factory=list)

    async def opened(self) -> None:
        """Until the first block (an event or a comment): the subscription is then live."""
        if self._lines is None:
            self._lines = self.response.aiter_lines()
        async for line in self._lines:
            if line == "":
                return
            if line.startswith(":"):
                self.comments.append(line)
        raise EOFError("stream ended")

    async def next(self) -> SSE:
        if self._lines is None:
            self._lines = self.response.aiter_lines()
        ev_id: str | None = None
        event: str | None = None
        data: list[str] = []
        async for line in self._lines:
            if line == "":
                if data:
                    if ev_id is not None:
                        self.last_id = ev_id
                    return SSE(ev_id, event, "\n".join(data))
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                ev_id = value
            elif key == "event":
                event = value
            elif key == "data":
                data.append(value)
        raise EOFError("stream ended")

    async def until(self, pred: Callable[[SSE], bool]) -> list[SSE]:
        seen: list[SSE] = []
        while True:
            ev = await self.next()
            seen.append(ev)
            if pred(ev):
                return seen


def is_server(kind: str, **match: Any) -> Callable[[SSE], bool]:
    def pred(ev: SSE) -> bool:
        if ev.event != "server":
            return False
        d = ev.json
        return bool(d.get("type") == kind and all(d.get(k) == v for k, v in match.items()))

    return pred


def payload_type(ev: SSE) -> str | None:
    if ev.event is not None:
        return None
    d = ev.json
    p = d.get("payload", {})
    return p.get("type") if isinstance(p, dict) else None


@dataclass
class Child:
    """A `penguin serve` child process on 127.0.0.1 (port 0)."""

    process: Any
    base: str


async def start_server(
    root: Path, script: Path, workspace: Path, *, approve: str = "allow-all"
) -> Any:
    """Start a `penguin serve` child (port 0); ``ready`` waits for its URL."""
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    args = [exe, "--home", str(root), "serve", "--port", "0", "--token", TOKEN]
    args += ["--script", str(script), "--approve", approve, "--workspace", str(workspace)]
    return await anyio.open_process(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def ready(proc: Any) -> Child:
    import re

    assert proc.stderr is not None
    buf = b""
    with anyio.fail_after(60):
        while True:
            try:
                chunk = await proc.stderr.receive()
            except anyio.EndOfStream:
                raise RuntimeError(
                    f"penguin serve did not start: {buf.decode(errors='replace')}"
                ) from None
            buf += chunk
            m = re.search(rb"listening on (http://127\.0\.0\.1:\d+)", buf)
            if m:
                return Child(proc, m.group(1).decode())


async def spawn_server(
    root: Path, script: Path, workspace: Path, *, approve: str = "allow-all"
) -> Child:
    return await ready(await start_server(root, script, workspace, approve=approve))
