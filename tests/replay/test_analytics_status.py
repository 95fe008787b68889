"""The ``status`` column of the analytics ``sessions`` view is the one status (R-SET-5): the
projections' rule over the session's records, with the lock probed by the lock itself — a run
left open reads ``running`` while its writer holds the lock and ``interrupted`` once it is gone,
as in ``penguin sessions`` and the server."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from eventstore import TraceWriter, read_trace
from eventstore import builders as b
from projections import SessionState

duckdb = pytest.importorskip("duckdb")

from replay.analytics import open_fleet  # noqa: E402

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
_NAME = re.compile(r"^(.+)_(\d{3,})\.jsonl\Z")
SID = "session-2026-07-01-10-00-00-0000abcd"


def test_the_status_of_every_fixture_is_the_projections_r_set_5() -> None:
    grouped: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        m = _NAME.match(path.name)
        grouped[m.group(1) if m else path.stem].append(path)
    with open_fleet(traces=str(FIXTURES / "**" / "*.jsonl")) as fleet:
        found = dict(fleet.sql("SELECT session_id, status FROM sessions").rows)
    expected = {
        sid: SessionState.from_records(read_trace(files, report=False).records).status
        for sid, files in grouped.items()
    }
    assert found == expected
    assert {"completed", "interrupted"} <= set(found.values())


@pytest.mark.parametrize("cache", [False, True], ids=["direct", "parquet-cache"])
def test_an_open_run_is_running_while_locked_then_interrupted_r_set_5(
    tmp_path: Path, cache: bool
) -> None:
    home = tmp_path / "home"
    folder = home / "default_project" / "agents" / "default_agent" / "traces" / "2026-07-01"
    folder.mkdir(parents=True)
    writer = TraceWriter(folder / f"{SID}_001.jsonl", session_id=SID)
    meta = b.session_meta(
        session_id=SID,
        provider="scripted",
        model_id="m",
        model_context_window=1000,
        system_prompt="",
        agent_state="agent_state",
        workspace=str(tmp_path),
    )
    for record in (meta, b.user_text("go"), b.request_begin()):
        writer.append(record)
    query = "SELECT status FROM sessions"
    try:
        # As `penguin query` opens it; a cached fleet keeps no status (it asks the lock).
        with open_fleet(home=home, read_only=True, cache=cache) as fleet:
            assert fleet.sql(query).rows == [("running",)]
    finally:
        writer.close()
    with open_fleet(home=home, read_only=True, cache=cache) as fleet:
        assert fleet.sql(query).rows == [("interrupted",)]
