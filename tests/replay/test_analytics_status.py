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


def test_a_warm_cached_query_folds_no_session_for_the_status_r_set_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache keeps each session's status for a free and for a held lock, computed when the
    session's rows are (the same fold); a query then only probes the locks."""
    from fleetkit import generate_fleet

    home = tmp_path / "home"
    generate_fleet(home, 12, seed=3, damage=True)
    query = "SELECT session_id, status FROM sessions ORDER BY session_id"
    with open_fleet(home=home) as fleet:
        expected = fleet.sql(query).rows
    with open_fleet(home=home, cache=True) as fleet:
        assert fleet.sql(query).rows == expected

    def no_fold(paths: list[Path]) -> SessionState:
        raise AssertionError(f"folded at query time: {paths}")

    monkeypatch.setattr("replay._resume.folded_state", no_fold)
    with open_fleet(home=home, cache=True, read_only=True) as fleet:
        assert fleet.cache is not None and fleet.cache.sessions_rebuilt == 0
        assert fleet.sql(query).rows == expected
