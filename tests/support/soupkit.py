"""Shared helpers for the resume tests (importable as ``soupkit``): the stored sessions, a
reference ``SessionState`` fold without shortcuts, seeded random record soups, and placing a
session's files under a fresh data root."""

from __future__ import annotations

import copy
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eventstore import (
    CompactionMode,
    DataRoot,
    OmniMessage,
    StopReason,
    TokenCounts,
    ToolDefinition,
    encode_line,
    iter_trace,
)
from eventstore import builders as b
from projections import GoalState, SessionState
from projections import markers as mk
from projections._state import _HANDLERS as STATE_HANDLERS
from projections._state import _SKIPPED

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "fixtures" / "traces"
HOSTILE = FIXTURES / "hostile"
REFERENCE = ROOT.parent / "shared" / "reference-traces"
SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"
SLOTS = SessionState.__slots__


def sessions() -> dict[str, list[Path]]:
    """Every stored session as its files in index order: fixtures, then reference traces."""
    out: dict[str, list[Path]] = {}
    for base in (FIXTURES, REFERENCE):
        if not base.is_dir():
            continue
        for scenario in sorted(p for p in base.iterdir() if p.is_dir() and p != HOSTILE):
            files = sorted(scenario.rglob("*.jsonl"))
            if files:
                out[f"{base.name}/{scenario.name}"] = files
    return out


SESSIONS = sessions()
MULTI_FILE = {name: files for name, files in SESSIONS.items() if len(files) > 1}


def file_records(files: list[Path]) -> Iterator[OmniMessage]:
    """The records of ``files`` read one by one, as ``load_session`` reads them."""
    for path in files:
        yield from iter_trace(path, report=False)


def reference_apply(state: SessionState, record: OmniMessage) -> None:
    """``SessionState.apply`` without its shortcut: every record re-derives the flags."""
    if record.origin is not None:
        return
    kind = type(record.payload)
    if kind in _SKIPPED:  # partials and a host's marks are not folded
        return
    state.records += 1
    state._apply_rare(kind, record.payload, STATE_HANDLERS.get(kind))


def every_field(state: SessionState) -> dict[str, Any]:
    """Public fields and fold scratch (the goal's included): the shortcut must not even change
    the scratch."""
    fields = {name: copy.copy(getattr(state, name)) for name in SLOTS}
    fields["goal"] = {name: getattr(state.goal, name) for name in GoalState.__slots__}
    return fields


class Soup:
    """Seeded random records: engine-shaped pieces in any order, damage included."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tick = 0
        self.calls: list[str] = []
        self.session = TokenCounts()

    def ts(self) -> str:
        self.tick += 1
        return f"2026-07-18T10:{self.tick // 60 % 60:02d}:{self.tick % 60:02d}.000Z"

    def meta(self) -> OmniMessage:
        return b.session_meta(
            session_id=SID,
            provider="p",
            model_id="m",
            model_context_window=1000,
            system_prompt="s",
            agent_state="/a",
            workspace="/w",
            timestamp=self.ts(),
        )

    def record(self) -> OmniMessage:
        rng, ts = self.rng, self.ts()
        pick = rng.randrange(25)
        if pick >= 22:
            return self.goal_record(ts)
        if pick == 0:
            return self.meta()
        if pick == 1:
            return b.tool_list_ready([ToolDefinition(name="t", description="d")], timestamp=ts)
        if pick in (2, 3):
            return b.user_text(
                rng.choice(["go", "[context_summary]\nx\n[/context_summary]"]), timestamp=ts
            )
        if pick == 4:
            body = rng.choice(["done", "[summary]kept[/summary]", "[summary][/summary]", ""])
            return b.assistant_text(body, timestamp=ts)
        if pick in (5, 6):
            cid = f"c{rng.randrange(6)}"
            self.calls.append(cid)
            stop: StopReason = rng.choice(["completed", "completed", "aborted"])
            return b.tool_call("t", {"n": 1}, cid, stop_reason=stop, timestamp=ts)
        if pick in (7, 8, 9):
            cid = rng.choice(self.calls) if self.calls and rng.random() < 0.9 else "zz"
            return b.tool_call_output(cid, "out", timestamp=ts)
        if pick in (10, 11):
            return b.request_begin(timestamp=ts)
        if pick in (12, 13):
            statuses: list[StopReason] = ["completed", "completed", "aborted", "failed", "auth"]
            return b.request_end(
                rng.choice(statuses), attempt=rng.choice([None, 1, 2]), timestamp=ts
            )
        if pick == 14:
            request = TokenCounts(1, 2, 3, 6)
            self.session = self.session + request
            return b.token_usage(request, self.session, timestamp=ts)
        if pick == 15:
            reason = rng.choice([None, "user", "llm request error: boom"])
            return b.abort(reason, timestamp=ts)
        modes: list[CompactionMode] = ["summarize", "discard"]
        if pick == 16:
            return b.compaction_begin(
                "context", rng.choice(modes), context=1, turns=1, timestamp=ts
            )
        if pick == 17:
            ends: list[StopReason] = ["completed", "completed", "failed"]
            return b.compaction_end("context", rng.choice(modes), rng.choice(ends), timestamp=ts)
        if pick == 18:
            return b.partial_text("start", "x", timestamp=ts)
        if pick == 19:
            return OmniMessage(ts, "model_msg", b.assistant_text("sub").payload, ["child"])
        if pick == 20:
            return b.approval_decision("allow", rng.choice(self.calls or ["c0"]), timestamp=ts)
        return b.thinking("hmm", timestamp=ts)

    def goal_record(self, ts: str) -> OmniMessage:
        """A goal round's input (round 1 starts a goal), a plain task's input or a
        ``goal_finished`` (SPEC §18)."""
        rng = self.rng
        pick = rng.randrange(4)
        if pick == 0:
            return b.goal_finished(
                rng.choice(["complete", "aborted", "blocked"]),
                rng.randrange(1, 4),
                77,
                timestamp=ts,
            )
        if pick == 1:
            return b.user_text("a task of its own", timestamp=ts)
        round_no = rng.choice([1, 1, 2, 3])
        block = mk.goal_block(
            round_no, goal_file="/g/GOAL.yaml", goal_yaml="status: active", used=0, budget=None
        )
        return b.user_text(f"{block}\n\nobjective {rng.randrange(3)}", timestamp=ts)

    def records(self, n: int) -> list[OmniMessage]:
        return [self.meta(), *(self.record() for _ in range(n))]


def place(home: Path, files: list[bytes]) -> DataRoot:
    """``files`` (their bytes) as the files of session ``SID`` under a fresh data root."""
    if home.exists():
        shutil.rmtree(home)
    root = DataRoot(home)
    for index, data in enumerate(files, start=1):
        path = root.trace_path(SID, index, date=DATE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def cuts(files: list[bytes]) -> Iterator[list[bytes]]:
    """The session as a crash after each of its lines left it (earlier files included)."""
    for index, data in enumerate(files):
        lines = data.splitlines(keepends=True)
        for keep in range(1, len(lines) + 1):
            yield [*files[:index], b"".join(lines[:keep])]


def soup_files(seed: int) -> list[bytes]:
    """A soup split into files at its session_meta records, with a malformed line and a torn
    tail sprinkled in by the seed."""
    soup = Soup(seed)
    files: list[list[bytes]] = []
    for record in soup.records(120):
        if record.type == "session_meta" or not files:
            files.append([])
        files[-1].append(bytes(encode_line(record)))
    rng = random.Random(seed)
    for lines in files:
        if rng.random() < 0.3:
            lines.insert(rng.randrange(1, len(lines) + 1), b'{"timestamp": "x", "type\n')
    out = [b"".join(lines) for lines in files]
    if rng.random() < 0.3:
        out[-1] = out[-1][:-7]
    return out
