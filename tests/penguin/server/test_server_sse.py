"""One SSE response over its channel (R-SRV-7/8), driven as ASGI in process: the prelude first,
heartbeats while idle, live events as published, a subscriber that falls behind gets what it
has and then its stream ends (it reconnects with its Last-Event-ID), and the subscription ends
with the connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import OmniMessage
from eventstore import builders as b
from penguin.server._channel import SUBSCRIBER_QUEUE, Channel
from penguin.server._sse import SSEResponse

pytestmark = pytest.mark.anyio


class _Client:
    def __init__(self) -> None:
        self.body = b""
        self.ended = False
        self._changed = anyio.Event()
        self.gone = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.body += message.get("body", b"")
        self._changed.set()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def until(self, pred: Callable[[bytes], bool]) -> None:
        with anyio.fail_after(10):
            while not pred(self.body):
                self._changed = anyio.Event()
                await self._changed.wait()


async def _serve(resp: SSEResponse, client: _Client) -> None:
    await resp({"type": "http"}, client.receive, client.send)
    client.ended = True


async def test_r_srv_7_prelude_heartbeats_live_events_and_disconnect() -> None:
    channel = Channel((0, 0), restored=False)
    sub, missed = channel.subscribe(None)
    assert missed == []

    async def prelude() -> list[bytes]:
        return [b'event: server\ndata: {"type":"snapshot"}\n\n']

    client = _Client()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_serve, SSEResponse(channel, sub, prelude, heartbeat_s=0.02), client)
        await client.until(lambda b: b.count(b": heartbeat\n\n") >= 2)
        assert client.body.startswith(b'event: server\ndata: {"type":"snapshot"}\n\n')
        channel.publish_server({"type": "live"})
        await client.until(lambda b: b'data: {"type":"live"}' in b)
        assert b'id: 0:0+1\nevent: server\ndata: {"type":"live"}\n\n' in client.body
        client.gone.set()
    assert sub.dropped and not sub.pending
    channel.publish_server({"type": "after"})  # nobody is subscribed any more
    assert b"after" not in client.body


async def test_r_srv_8_a_subscriber_behind_gets_what_it_has_then_ends() -> None:
    channel = Channel((0, 0), restored=False, max_events=10)
    sub, _ = channel.subscribe(None)
    for i in range(SUBSCRIBER_QUEUE + 1):  # before its writer ever ran: it is behind
        channel.publish_server({"type": "n", "i": i})
    assert sub.dropped
    channel.publish_server({"type": "late"})  # not for a dropped subscriber

    async def prelude() -> list[bytes]:
        return []

    client = _Client()
    with anyio.fail_after(10):
        await _serve(SSEResponse(channel, sub, prelude), client)
    assert client.ended
    assert client.body.count(b"\n\n") == SUBSCRIBER_QUEUE + 2  # ": connected" + every event
    assert f'"i":{SUBSCRIBER_QUEUE}}}'.encode() in client.body
    assert b"late" not in client.body


def test_r_srv_6_a_childs_complete_message_closes_its_live_fragment() -> None:
    """A subagent's messages reach the channel unrecorded (origin-tagged); its complete text
    closes the child's open segment even when no stop fragment came, while the parent's stays."""
    channel = Channel((0, 0), restored=False)

    def kid(msg: OmniMessage) -> OmniMessage:
        return msgspec.structs.replace(msg, origin=["kid"])

    parent = b.partial_text("start", "parent so far")
    channel.publish_message(parent)
    channel.publish_message(kid(b.partial_text("start", "child so far")))
    assert [m.origin for m in channel.fragments()] == [None, ["kid"]]
    channel.publish_message(kid(b.assistant_text("child so far, done")))
    assert channel.fragments() == [parent]
