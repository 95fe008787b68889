"""One hosted session: what the server keeps in memory for it, and nothing more.

Owns: the ``Channel``, the loaded ``Session`` (if any) and its holder task, the one-at-a-time
flag (task or compaction), the abort signal, pending approvals, and the record queue that gives
each streamed record its trace position (records written but not yet seen on ``run()``'s
stream wait there, so the channel keeps the stream's order).  Does not: start tasks or speak
HTTP (``_host``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from engine import AbortSignal, Session
from eventstore import OmniMessage, TextPayload, ToolCallPayload, file_index
from penguin._goal import GoalRounds
from penguin._setup import Overrides

from ._channel import Channel

__all__ = ["ApprovalMode", "Hosted", "Pending", "TaskState", "Writes"]

ApprovalMode = Literal["allow-all", "ask", "deny-all"]
TaskState = Literal["idle", "running", "compacting", "awaiting_approval"]


@dataclass(slots=True)
class Pending:
    call: OmniMessage
    done: anyio.Event = field(default_factory=anyio.Event)
    decision: str | None = None

    @property
    def tool_call_id(self) -> str:
        p = self.call.payload
        assert isinstance(p, ToolCallPayload)
        return p.tool_call_id


@dataclass(slots=True)
class Writes:
    """Records this server's sessions wrote, counted up for the host's lifetime: a reader's
    index refresh is skipped while the count stands still and the watcher follows the rest."""

    count: int = 0


@dataclass(slots=True)
class Hosted:
    id: str
    project: str
    agent: str
    channel: Channel
    approval: ApprovalMode = "ask"
    # What the client said when it created the session here (SPEC §23: the rest, and all of
    # it after a restart, comes from the session's settings records).
    overrides: Overrides = field(default_factory=Overrides)
    model: str | None = None
    # SPEC §25: what the session was created with, given again when it is loaded again.
    sandbox: dict[str, Any] | None = None
    # Whether the loaded session offers run_subagent (None: not loaded here yet).
    subagents: bool | None = None
    # The session's MCP servers and approval rules (Session.create's options), kept for reloads.
    session: Session | None = None
    llm: Any = None
    closing: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    busy: Literal["task", "compaction"] | None = None
    signal: AbortSignal | None = None
    pending: dict[str, Pending] = field(default_factory=dict)
    decided: set[str] = field(default_factory=set)
    queued_steering: int = 0
    last_active: float = field(default_factory=time.time)
    task_seq: int = 0
    # Records written, with their positions, not yet published (see the module docstring).
    queue: deque[tuple[OmniMessage, int, int]] = field(default_factory=deque)
    position: tuple[int, int] = (0, 0)
    published: anyio.Event = field(default_factory=anyio.Event)
    forget_listener: Any = None
    load_lock: anyio.Lock = field(default_factory=anyio.Lock)
    idle: anyio.Event = field(default_factory=anyio.Event)  # set (and replaced) when a task ends
    title: str | None = None
    trace: Path | None = None  # the file the last record went to, and its _NNN index
    trace_index: int = 0
    writes: Writes = field(default_factory=Writes)  # the host's counter, shared by its sessions

    @property
    def state(self) -> TaskState:
        if self.busy == "compaction":
            return "compacting"
        if self.busy == "task":
            return "awaiting_approval" if self.pending else "running"
        return "idle"

    def on_record(self, msg: OmniMessage, path: Path) -> None:
        """The engine wrote ``msg`` to ``path``: note its position (R-SRV-8)."""
        if path is not self.trace and path != self.trace:
            # Parsed once per file, not per record (a path parse costs more than the rest).
            self.trace, self.trace_index = path, file_index(path) or 0
        index = self.trace_index
        self.writes.count += 1
        f, o = self.position
        self.position = (index, o + 1) if index == f else (index, 0)
        self.queue.append((msg, *self.position))

    def publish(self, msg: OmniMessage) -> None:
        """Publish one message ``run()`` yielded (or compaction reported), with the records
        written before it that the stream does not carry."""
        queue = self.queue
        if queue and msg.origin is None and not msg.is_partial:
            for i, (queued, _, _) in enumerate(queue):
                if queued is msg:
                    for _ in range(i + 1):
                        self._publish_record(*queue.popleft())
                    return
        self.channel.publish_message(msg)

    def publisher(self, rounds: GoalRounds | None) -> Callable[[OmniMessage], None]:
        """What the engine calls with each message of a task as it emits it (``observer``):
        ``publish``, plus the goal's round events when the task is a goal."""
        if rounds is None:
            return self.publish

        def publish(msg: OmniMessage) -> None:
            self.publish(msg)
            for kind, data in rounds.events(msg):
                self.server_event(kind, **data)

        return publish

    def flush(self) -> None:
        while self.queue:
            self._publish_record(*self.queue.popleft())

    def _publish_record(self, msg: OmniMessage, file: int, ordinal: int) -> None:
        self.channel.publish_record(msg, file, ordinal)
        p = msg.payload
        if self.queued_steering and isinstance(p, TextPayload) and p.role == "user":
            self.queued_steering -= 1
        event, self.published = self.published, anyio.Event()
        event.set()

    async def wait_published(self, msg: OmniMessage) -> None:
        """Until ``msg`` (a record) has been published, so an approval request follows its
        call on the stream."""
        while any(queued is msg for queued, _, _ in self.queue):
            await self.published.wait()

    def server_event(self, kind: str, **data: Any) -> None:
        self.channel.publish_server({"type": kind, **data})

    def task_state_data(self) -> dict[str, Any]:
        return {
            "type": "task_state",
            "state": self.state,
            "pending_approvals": [p.tool_call_id for p in self.pending.values()],
            "queued_steering": self.queued_steering,
        }

    def announce_state(self) -> None:
        self.last_active = time.time()
        self.channel.publish_server(self.task_state_data())
