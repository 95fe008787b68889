"""Engine loop throughput: turns per second with an instant model, a no-op tool and the real
TraceWriter; whether per-turn cost grows with history; streamed deltas per second.

Baselines measured in the same run: the raw cost of writing the same number of records with a
bare TraceWriter (what any engine must pay), so the ratio shows the loop's own overhead.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from engine import Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, TraceWriter
from eventstore import builders as b

TURNS = 1000
DELTAS = 100_000


def _tool_script(turns: int) -> dict[str, Any]:
    responses: list[Any] = [
        [{"tool_call": {"name": "noop", "arguments": {"i": i}, "result": {"output": "ok"}}}]
        for i in range(turns - 1)
    ]
    responses.append([{"text": "done"}])
    return {"responses": responses, "tools": [{"name": "noop", "description": "does nothing"}]}


class _TimedLLM(ScriptedLLM):
    """Stamps the time each request reaches the model (the driver's clock, not the consumer's)."""

    def __init__(self, script: dict[str, Any]) -> None:
        super().__init__(script)
        self.stamps: list[float] = []

    def stream(self, request: Any) -> Any:
        self.stamps.append(time.perf_counter())
        return super().stream(request)


async def _run_task(home: Path, script: dict[str, Any]) -> tuple[float, list[float], int]:
    llm = _TimedLLM(script)
    ws = home / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home / "data"),
        workspace=ws,
        compaction=None,
        max_turns=0,
        fsync="never",
    )
    count = 0
    async with session:
        start = time.perf_counter()
        async for _msg in session.run([b.user_text("go")], approve=allow_all):
            count += 1
        elapsed = time.perf_counter() - start
    return elapsed, [*llm.stamps, start + elapsed], count


def _trimmed_mean(values: list[float]) -> float:
    """Mean without the slowest 10%: scheduler and page-cache spikes are not history cost."""
    kept = sorted(values)[: max(1, len(values) * 9 // 10)]
    return sum(kept) / len(kept)


def _raw_records(path: Path, n: int) -> float:
    msgs = [
        b.request_begin(),
        b.tool_call("noop", {"i": 1}, "call_1_1"),
        b.approval_decision("allow", "call_1_1"),
        b.request_end("completed"),
        b.tool_call_output("call_1_1", "ok"),
    ]
    start = time.perf_counter()
    with TraceWriter(path, fsync="never") as writer:
        for i in range(n):
            writer.append(msgs[i % len(msgs)])
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        elapsed, begins, _ = anyio.run(_run_task, home / "a", _tool_script(TURNS))
        per_turn = [begins[i + 1] - begins[i] for i in range(len(begins) - 1)]
        early = _trimmed_mean(per_turn[:100])
        late = _trimmed_mean(per_turn[900:1000])
        records = TURNS * 7
        raw = _raw_records(home / "raw_001.jsonl", records)
        print(
            f"turns/s (1000-turn task, no-op tool): {TURNS / elapsed:,.0f}  (target >= 2,000; "
            "reference engine ~600)"
        )
        print(
            f"per-turn cost, turns 901-1000 / 1-100 (trimmed means): {late / early:.2f}  "
            "(target <= 1.2)"
        )
        print(
            f"loop vs bare writer for the same {records} records: "
            f"{raw / elapsed:.2f}x  (writer alone {records / raw:,.0f} records/s)"
        )

        script = {"responses": [[{"text": ["x"] * DELTAS}]]}
        elapsed2, _, count = anyio.run(_run_task, home / "b", script)
        print(
            f"stream throughput ({DELTAS:,} text deltas through run()): "
            f"{count / elapsed2:,.0f} messages/s  (target >= 100,000)"
        )


if __name__ == "__main__":
    main()
