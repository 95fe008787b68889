"""User-facing CLI branches that the other CLI tests did not reach (issue 14 item 5: the CLI
coverage audit): every transcript entry kind of ``penguin show``; the live renderer's limits on
tool output (long output, many lines, images, a stream cut off before its stop fragment);
``stats --all`` of an empty root; ``penguin`` without a command off a terminal; the config
file's shape errors and the escaping of the values ``config set`` writes."""

from __future__ import annotations

import io
import json
from pathlib import Path

from clikit import SID, invoke, meta, trace_file, turn, write_records
from rich.console import Console

from eventstore import builders as b
from penguin.cli.views.render import StreamRenderer


def _renderer() -> tuple[StreamRenderer, io.StringIO]:
    buf = io.StringIO()
    return StreamRenderer(Console(file=buf, width=200, no_color=True)), buf


def test_show_marks_cut_answers_aborts_compactions_subagents_and_images(tmp_path: Path) -> None:
    home = tmp_path / "home"
    records = [
        meta(),
        b.user_text("first question"),
        b.image_url("https://example.test/cat.png"),
        b.request_begin(),
        b.assistant_text("half an answ", stop_reason="aborted"),
        b.request_end("aborted"),
        b.abort("aborted by user"),
        b.compaction_begin("manual", "summarize", context=10, turns=1),
        b.request_begin(),
        b.assistant_text("[summary]internal summary text[/summary]"),
        b.request_end("completed"),
        b.compaction_end("manual", "summarize", "completed", attempt=1),
        b.user_text("second question"),
        b.subagent("session-2026-07-18-11-10-23-0badc0de"),
        *turn("the answer"),
    ]
    write_records(trace_file(home), records)
    result = invoke("--home", home, "show", SID)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "half an answ" in out and "[aborted]" in out  # the cut answer and why
    assert "■ aborted: aborted by user" in out
    assert "— context compacted (summarize, completed) —" in out
    assert "internal summary text" not in out  # the compaction's own request is internal
    assert "↳ subagent 0badc0de" in out
    assert "[image]" in out
    assert out.index("first question") < out.index("second question") < out.index("the answer")


def test_live_tool_output_is_cut_after_200_lines_and_the_rest_pointed_to_the_trace() -> None:
    renderer, buf = _renderer()
    renderer.feed(b.tool_call("shell", {"cmd": "yes"}, "c1"))
    renderer.feed(b.partial_tool_call_output("start", "c1"))
    renderer.feed(b.partial_tool_call_output("delta", "c1", "".join(f"l{i}\n" for i in range(250))))
    renderer.feed(b.partial_tool_call_output("stop", "c1"))
    renderer.feed(b.tool_call_output("c1", "(all of it)"))
    renderer.close()
    lines = buf.getvalue().splitlines()
    assert "  l199" in lines and "  l200" not in lines
    assert "  … (more output from c1; see the trace)" in lines
    assert "(all of it)" not in buf.getvalue()  # streamed: the complete output is not repeated


def test_unstreamed_long_output_is_previewed_and_images_are_counted() -> None:
    renderer, buf = _renderer()
    renderer.feed(b.tool_call("read", {"path": "big"}, "c2"))
    renderer.feed(b.tool_call_output("c2", "x" * 2500, images=["data:image/png;base64,AA"]))
    renderer.close()
    out = buf.getvalue()
    assert "x" * 2000 + "… (2500 chars)" in out and "x" * 2001 not in out
    assert "  (1 image(s))" in out


def test_close_prints_a_tool_line_whose_stream_never_stopped() -> None:
    renderer, buf = _renderer()
    renderer.feed(b.tool_call("shell", {"cmd": "sleep"}, "c3"))
    renderer.feed(b.partial_tool_call_output("start", "c3"))
    renderer.feed(b.partial_tool_call_output("delta", "c3", "done\nwaiting for inp"))
    assert "waiting for inp" not in buf.getvalue()  # held until its line ends
    renderer.close()
    assert buf.getvalue().splitlines()[-2:] == ["  done", "  waiting for inp"]


def test_stats_all_of_a_root_without_sessions_prints_zero_totals(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = invoke("--home", home, "stats", "--all")
    assert result.exit_code == 0, result.output
    assert "All sessions: 0" in result.stdout
    assert "requests 0, retries 0, compactions completed 0 / failed 0 / aborted 0" in result.stdout


def test_penguin_without_a_command_off_a_terminal_prints_its_help() -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout and "inspect" in result.stdout


def test_config_file_shape_errors_name_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.toml"
    cases = {
        '[other]\nmodel = "m"\n': "expected only a [defaults] table of settings",
        '[defaults]\ncolour = "red"\n': "unknown setting 'colour' (settings: ",
        '[defaults]\nmodel = " "\n': "model must be a non-empty string",
    }
    for text, why in cases.items():
        config.write_text(text)
        result = invoke("--home", home, "config", "show")
        assert result.exit_code == 2 and f"config.toml: {why}" in result.stderr, text
    config.unlink()
    config.mkdir()
    result = invoke("--home", home, "config", "show")
    assert (
        result.exit_code == 2 and "config.toml: is a directory, not a config file" in result.stderr
    )


def test_config_set_writes_quotes_and_control_characters_as_toml_escapes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    value = 'my "model"\\v2\x7f'
    assert invoke("--home", home, "--init", "config", "set", "model", value).exit_code == 0
    assert (home / "config.toml").read_text().count('\\"model\\"\\\\v2\\u007f') == 1
    shown = json.loads(invoke("--home", home, "config", "show", "--json").stdout)
    assert shown["settings"]["model"] == value
