"""Library code reports through ``logging``; the CLI shows those reports on stderr (issue 14).

The texts are the SPEC's stderr lines (e.g. R-READ-3's skipped-lines report)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eventstore import builders as b
from eventstore import encode_line, read_trace
from penguin.cli import app
from penguin.cli.terminal.logs import LIBRARY_LOGGERS, route_library_logs


def test_every_command_routes_the_library_loggers_to_stderr(tmp_path: Path) -> None:
    for name in LIBRARY_LOGGERS:
        for handler in list(logging.getLogger(name).handlers):
            logging.getLogger(name).removeHandler(handler)
    result = CliRunner().invoke(app, ["--home", str(tmp_path), "sessions"])
    assert result.exit_code == 0, result.output
    for name in LIBRARY_LOGGERS:
        assert logging.getLogger(name).handlers, name


def test_a_reader_report_is_printed_as_its_spec_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    route_library_logs()
    route_library_logs()  # idempotent: one line per report, not two
    path = tmp_path / "s_001.jsonl"
    meta = b.session_meta(
        session_id="s",
        provider="p",
        model_id="m",
        model_context_window=1,
        system_prompt="",
        agent_state="/a",
        workspace="/w",
    )
    path.write_bytes(encode_line(meta) + b"garbage\n" + encode_line(b.user_text("hi")))
    read_trace(path)
    assert capsys.readouterr().err == f"[trace] skipped 1 malformed line(s) [2] in {path}\n"
