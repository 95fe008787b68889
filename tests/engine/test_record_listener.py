"""``Session.add_record_listener``: every written record, in trace order, with its file —
the seam ``penguin serve`` uses to give streamed records their trace positions."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import CompactionSettings, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import OmniMessage, encode, iter_trace
from eventstore.builders import user_text

pytestmark = pytest.mark.anyio


async def test_listener_sees_every_record_in_trace_order_across_rotation(tmp_path: Path) -> None:
    script = {
        "responses": [
            [{"text": "one"}, {"usage": {"cache_write": 900, "output": 1}}],
            [{"text": "[summary]s[/summary]"}],
            [{"text": "two"}],
        ]
    }
    llm = ScriptedLLM(script)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=tmp_path / "root",
        workspace=tmp_path,
        compaction=CompactionSettings(max_context_length=500),
    )
    seen: list[tuple[OmniMessage, Path]] = []
    forget = session.add_record_listener(lambda msg, path: seen.append((msg, path)))
    async with session:
        for text in ("a", "b"):
            async for _ in session.run([user_text(text)], approve=allow_all):
                pass
        forget()
        async for _ in session.run([user_text("c")], approve=allow_all):
            pass
    files = sorted((tmp_path / "root").rglob("*.jsonl"))
    assert len(files) >= 2  # the boundary compaction rotated the trace
    on_disk = [(encode(r), p.name) for p in files for r in iter_trace(p)]
    heard = [(encode(m), p.name) for m, p in seen]
    assert heard == on_disk[: len(heard)] and len(heard) < len(on_disk)
