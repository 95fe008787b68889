"""Issue 15 items 16-20: a transcript, the end-of-run summary, labels that say what happened,
tool colours on a terminal, and quiet endings (an idle ``--follow``, ``| head``, no message
printed twice)."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from clikit import (
    FAST,
    SID,
    invoke,
    meta,
    run_script,
    session_ids,
    trace_file,
    turn,
    write_records,
)
from rich.console import Console

from eventstore import builders as b
from eventstore import encode_line
from penguin.cli.views.labels import request_label, tool_end_label
from penguin.cli.views.render import StreamRenderer, coloured

PENGUIN = Path(sys.executable).parent / "penguin"
ESC = "\x1b"


def conversation(home: Path) -> Path:
    records = [
        meta(),
        b.user_text("Summarize **this** repo"),
        b.request_begin(),
        b.thinking("Let me think about the layout."),
        b.assistant_text("## Findings\n\n- **bold point**\n- a [link](https://evil.example/)"),
        b.tool_call("shell", {"cmd": "ls"}, "c1"),
        b.approval_decision("deny", "c1"),
        *turn("done")[2:],
        b.tool_call_output("c1", "Tool call denied by user.", stop_reason="aborted"),
        b.request_begin(),
        b.assistant_text(f"Out: {ESC}]52;c;cm0gLXJm{ESC}\\ and {ESC}[2J"),
        *turn("x")[2:],
    ]
    return write_records(trace_file(home), records)


# --------------------------------------------------------------------------- item 16


def test_show_prints_a_readable_transcript(tmp_path: Path) -> None:
    home = tmp_path / "home"
    conversation(home)
    result = invoke("--home", home, "show", SID[-8:])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Summarize **this** repo" in out  # the user's words as typed
    assert "Findings" in out and "## Findings" not in out  # Markdown rendered
    assert "bold point" in out and "**bold point**" not in out
    assert "Let me think about the layout." in out  # thinking
    assert 'shell {"cmd":"ls"}' in out and "denied (c1)" in out
    for internal in ("request_begin", "token_usage", "request_end", "approval_decision"):
        assert internal not in out
    assert ESC not in out and "\\x1b]52" in out  # escapes shown, never acted on
    entries = json.loads(invoke("--home", home, "show", SID, "--json").stdout)["entries"]
    assert [e["kind"] for e in entries][:4] == ["user", "thinking", "assistant", "tool_call"]


def test_inspect_prints_json_booleans(tmp_path: Path) -> None:
    home = tmp_path / "home"
    conversation(home)
    out = invoke("--home", home, "inspect", SID).stdout
    assert "task running: false" in out and "closed: false" in out
    assert "True" not in out and "False" not in out


# --------------------------------------------------------------------------- item 17


def test_every_run_ends_with_a_summary_line(tmp_path: Path) -> None:
    result = run_script(tmp_path, tmp_path / "home", FAST)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("done: "))
    assert line.startswith("done: 2 turn(s), 1 tool call(s), tokens: input ")
    assert "(cached " in line and ", output " in line and line.endswith(" s")


# --------------------------------------------------------------------------- item 18


def test_labels_say_what_happened() -> None:
    assert request_label("timeout", "openai: HTTP 500: boom") == "server error 500"
    assert request_label("timeout", "openai: HTTP 429: slow down") == "rate limited (429)"
    assert (
        request_label("timeout", "openai: cannot connect: [Errno 111] Connection refused")
        == "connection refused"
    )
    assert request_label("timeout", "idle timeout") == "timeout"
    assert tool_end_label("aborted", denied=True) == "denied"
    assert tool_end_label(None, denied=False) == "completed"


def test_the_stream_shows_server_errors_and_denials(tmp_path: Path) -> None:
    buf = io.StringIO()
    renderer = StreamRenderer(Console(file=buf, width=200, no_color=True))
    for msg in (
        b.request_begin(),
        b.request_end("timeout", error_message="openai: HTTP 503: busy", attempt=1, retry_in_ms=5),
        b.tool_call("shell", {"cmd": "rm"}, "c9"),
        b.approval_decision("deny", "c9"),
        b.tool_call_output("c9", "Tool call denied by user.", stop_reason="aborted"),
    ):
        renderer.feed(msg)
    renderer.close()
    text = buf.getvalue()
    assert "(server error 503: openai: HTTP 503: busy)" in text
    assert "[output c9 denied]" in text and "[output c9 aborted]" not in text


def test_one_name_per_token_count(tmp_path: Path) -> None:
    home = tmp_path / "home"
    conversation(home)
    stats = invoke("--home", home, "stats", SID).stdout
    inspect = invoke("--home", home, "inspect", SID).stdout
    for out in (stats, inspect):
        assert "input" in out and "cached" in out and "output" in out
        assert "cache_write" not in out and "cache_read" not in out


# --------------------------------------------------------------------------- item 19


def test_tool_colours_on_a_terminal_and_stripped_elsewhere() -> None:
    line = f"{ESC}[31mred{ESC}[0m then {ESC}]8;;https://x/{ESC}\\link{ESC}]8;;{ESC}\\ {ESC}[2J"
    on_tty = io.StringIO()
    Console(file=on_tty, force_terminal=True, color_system="standard").print(
        coloured(line, colour=True), end=""
    )
    shown = on_tty.getvalue()
    assert f"{ESC}[31m" in shown and "red" in shown  # the colour is rendered
    assert f"{ESC}]8" not in shown and f"{ESC}[2J" not in shown  # nothing else acts
    assert "\\x1b]8;;https://x/" in shown and "\\x1b[2J" in shown
    plain = coloured(line, colour=False).plain
    assert "[31m" not in plain and plain.startswith("red then ")


# --------------------------------------------------------------------------- item 20


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PENGUIN_HOME"}


def test_a_closed_pipe_ends_quietly_with_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    write_records(path, [meta(), b.user_text("x"), *[r for n in range(3000) for r in turn(str(n))]])
    cmd = f"'{PENGUIN}' --home '{home}' inspect {SID} --records | head -1"
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, env=_env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"" and proc.stdout.count(b"\n") == 1


def test_follow_on_an_idle_session_says_so_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_records(trace_file(home), [meta(), b.user_text("x"), *turn("y")])
    proc = subprocess.Popen(
        [str(PENGUIN), "--home", str(home), "inspect", SID, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    err = b""
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        while b"nobody is writing this session" not in err:
            ready, _, _ = select.select([proc.stderr], [], [], max(0, deadline - time.monotonic()))
            assert ready, err
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, err
            err += chunk
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_no_message_is_printed_twice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    write_records(path, [meta(), b.user_text("x")], raw=b"not json\n")
    with open(path, "ab") as f:  # a malformed line in the middle, then more records
        f.write(b"".join(encode_line(r) for r in turn("y")))
    for args in (("resume", SID), ("sessions",), ("show", SID), ("inspect", SID)):
        result = invoke("--home", home, *args)
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert len(lines) == len(set(lines)), (args, lines)
    assert session_ids(home) == [SID]
