"""Sessions recorded with workspace snapshots on (SPEC §27), for the rewind tests of the server
and the Web App: each prompt is one task, every tool call allowed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine import LocalEnvironment, Session, SnapshotSettings, allow_all
from engine.llm import ScriptedLLM
from eventstore import DataRoot
from eventstore.builders import user_text


async def record_with_snapshots(
    home: Path, workspace: Path, script: Any, prompts: Sequence[str]
) -> str:
    """Run ``prompts`` as tasks of one new session; returns its id."""
    async with await Session.create(
        llm=ScriptedLLM(script),
        environment=LocalEnvironment(workspace),
        root=DataRoot(home),
        workspace=workspace,
        snapshots=SnapshotSettings(),
    ) as session:
        for prompt in prompts:
            async for _ in session.run([user_text(prompt)], approve=allow_all):
                pass
        return session.id
