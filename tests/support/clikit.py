"""Helpers for the ``penguin`` CLI tests: invoking the typer app, writing traces by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from eventstore import DataRoot, TokenCounts, encode_line
from eventstore import builders as b
from penguin.cli import app

SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"

FAST: dict[str, Any] = {
    "tools": [{"name": "shell", "description": "Run a command (scripted)."}],
    "responses": [
        [
            {"text": "Listing files."},
            {
                "tool_call": {
                    "name": "shell",
                    "arguments": {"cmd": "ls"},
                    "result": {"output": "a.txt\nb.txt\n"},
                }
            },
        ],
        [{"text": "Here are two files."}],
    ],
}


def invoke(
    *args: str | Path, input: str | None = None, env: dict[str, str] | None = None
) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args], input=input, env=env)
    # Never a traceback: every failure is a one-line message and an exit code.
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"uncaught {result.exception!r}\n{result.output}"
        ) from result.exception
    assert "Traceback" not in result.output
    return result


def write_script(tmp_path: Path, script: dict[str, Any], name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(script))
    return path


def run_script(tmp_path: Path, home: Path, script: dict[str, Any], *extra: str | Path) -> Result:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = write_script(tmp_path, script, f"script-{len(list(tmp_path.glob('script-*')))}.json")
    return invoke(
        "--home", home, "--init", "run", "-m", "What is here?", "--script", path,
        "--workspace", ws, *extra,
    )  # fmt: skip


def session_ids(home: Path) -> list[str]:
    return [s.session_id for s in DataRoot(home).sessions()]


def meta(session_id: str = SID, **overrides: str) -> Any:
    fields: dict[str, Any] = {
        "session_id": session_id,
        "provider": "scripted",
        "model_id": "demo",
        "model_context_window": "unknown",
        "system_prompt": "You are careful.",
        "agent_state": "/home/u/.penguin/data/p/agents/a/agent_state",
        "workspace": "/home/u/project",
    } | overrides
    return b.session_meta(**fields)


def trace_file(home: Path, index: int = 1, sid: str = SID, agent: str = "default_agent") -> Path:
    d = home / "default_project" / "agents" / agent / "traces" / DATE
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{sid}_{index:03d}.jsonl"


def write_records(path: Path, records: list[Any], *, raw: bytes = b"") -> Path:
    path.write_bytes(b"".join(encode_line(r) for r in records) + raw)
    return path


def turn(text: str, usage: int = 4) -> list[Any]:
    counts = TokenCounts(cache_write=usage - 1, output=1, total=usage)
    return [
        b.request_begin(),
        b.assistant_text(text),
        b.token_usage(counts),
        b.request_end("completed"),
    ]
