"""Library code reports through ``logging``; the CLI shows those reports on stderr (issue 14).

The texts are the SPEC's stderr lines (here R-READ-3's skipped-lines report)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from eventstore import builders as b
from eventstore import encode_line
from penguin.cli import app

SID = "session-logs"


def test_a_reader_report_reaches_the_terminal_through_the_cli(tmp_path: Path) -> None:
    day = tmp_path / "default_project" / "agents" / "default_agent" / "traces" / "2026-07-18"
    day.mkdir(parents=True)
    meta = b.session_meta(
        session_id=SID,
        provider="p",
        model_id="m",
        model_context_window=1,
        system_prompt="",
        agent_state="/a",
        workspace=str(tmp_path),
    )
    path = day / f"{SID}_001.jsonl"
    path.write_bytes(encode_line(meta) + b"garbage\n" + encode_line(b.user_text("hi")))
    result = CliRunner().invoke(app, ["--home", str(tmp_path), "resume", SID])
    assert result.exit_code == 0, result.output
    assert f"[trace] skipped 1 malformed line(s) [2] in {path}\n" in result.stderr
