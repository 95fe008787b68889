"""Subagents in the CLI (issue "Subagents", item 4; SPEC §11 R-SUB-1…5, §16 R-CLI-1/4).

`penguin run` shows a child's messages (``origin``) indented under the `run_subagent` call that
spawned them and offers subagents with `--subagents`; `penguin inspect --children` follows the
parent trace's `subagent` pointers to the children's own views.  The parent/child sessions are
real ones, made by the engine with ScriptedLLMs; the renderer is fed the recorded parent stream.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from enginekit import Env, check_trace, collect, make_env, make_session
from rich.console import Console
from typer.testing import CliRunner, Result

from engine import (
    AbortSignal,
    ApproveFn,
    LocalEnvironment,
    SessionSubagentRunner,
    SubagentOutcome,
    SubagentRunner,
    allow_all,
)
from engine.llm import ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    SubagentPayload,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from penguin.cli import app
from penguin.cli.terminal.console import out_console
from penguin.cli.views.inspect import MAX_CHILD_DEPTH
from penguin.cli.views.render import StreamRenderer, short_id
from replay._validate import validate_session

ESC_2J = "\x1b[2J"
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
BIDI = "\u202egnp.exe"
C1_CSI = "\x9b31m"
HOSTILE = f"{ESC_2J}{OSC52}{BIDI}{C1_CSI}[bold]markup[/]"
FORBIDDEN = (b"\x1b", b"\x07", b"\xc2\x9b", "\u202e".encode())
WIDTH = 120


def spawn(prompt: str, cid: str) -> dict[str, Any]:
    return {"tool_call": {"name": "run_subagent", "arguments": {"prompt": prompt}, "id": cid}}


def call(name: str, arguments: dict[str, Any], cid: str) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments, "id": cid}}


# The child writes a file and reads one with a hostile name, concurrently, in one turn.
CHILD = [
    [
        {"text": f"Child {HOSTILE}\nsecond line"},
        call("write_file", {"path": "a.txt", "content": "A\nB\n"}, "c1"),
        call("read_file", {"path": HOSTILE}, "c2"),
    ],
    [{"text": "child answer"}],
]
PARENT = [[{"text": "Delegating."}, spawn("write a.txt", "p1")], [{"text": "All done."}]]


@dataclass
class Family:
    env: Env
    parent: str
    children: list[str]
    stream: list[OmniMessage]


class InOrderRunner:
    """Starts the children of concurrent ``run_subagent`` calls in call order: each waits until
    the previous child's first message (its ``session_meta``) has been taken by the parent."""

    def __init__(self, inner: SessionSubagentRunner) -> None:
        self._inner = inner
        self._started: list[anyio.Event] = []

    async def run(
        self, prompt: str, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage | SubagentOutcome]:
        turn = len(self._started)
        started = anyio.Event()
        self._started.append(started)
        if turn:
            await self._started[turn - 1].wait()
        try:
            async for item in self._inner.run(prompt, signal=signal, approve=approve):
                yield item
                # The parent asked for the next item: it has pushed this one.
                started.set()
        finally:
            started.set()


def make_family(
    tmp_path: Path, parent_script: Any = PARENT, *child_scripts: Any, in_order: bool = False
) -> Family:
    """A parent session whose run_subagent calls spawn real child sessions (engine + runner)."""
    env = make_env(tmp_path)
    scripts = list(child_scripts) or [CHILD]
    llms: list[ScriptedLLM] = []

    def child_llm() -> ScriptedLLM:
        llms.append(ScriptedLLM(scripts[len(llms) % len(scripts)]))
        return llms[-1]

    async def go() -> Family:
        runner = SessionSubagentRunner(
            child_llm,
            root=env.root,
            workspace=env.workspace,
            compaction=None,
            system_prompt="You are a subagent.",
        )
        spawner: SubagentRunner = InOrderRunner(runner) if in_order else runner
        parent, _ = await make_session(
            env, parent_script, environment=LocalEnvironment(env.workspace, subagents=spawner)
        )
        async with runner, parent:
            with anyio.fail_after(20):  # a deadlock guard, not a timing assertion
                stream = await collect(parent.run([b.user_text("go")], approve=allow_all))
            check_trace(parent, stream)
        metas = [
            m.payload.session_id
            for m in stream
            if isinstance(m.payload, SessionMetaPayload) and m.origin
        ]
        return Family(env=env, parent=parent.id, children=metas, stream=stream)

    return anyio.run(go)


def invoke(*args: str | Path, input: str | None = None) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args], input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"uncaught {result.exception!r}\n{result.output}"
        ) from result.exception
    assert "Traceback" not in result.output
    return result


def assert_terminal_safe(data: bytes) -> None:
    for bad in FORBIDDEN:
        assert bad not in data, f"raw {bad!r} reached the terminal: {data[:400]!r}"


def pointer_coords(home: Path, session_id: str) -> list[str]:
    data = json.loads(invoke("--home", home, "inspect", session_id, "--records", "--json").stdout)
    return [row["coord"] for row in data["records"] if row["type"] == "subagent"]


def render(stream: list[OmniMessage], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], bytes]:
    """The stream through the CLI's own stdout console, with NO_COLOR and a fixed width."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    buffer = io.BytesIO()
    console = out_console()
    console.file = io.TextIOWrapper(buffer, encoding="utf-8", write_through=True)
    renderer = StreamRenderer(console)
    for msg in stream:
        renderer.feed(msg)
    renderer.close()
    data = buffer.getvalue()
    return data.decode("utf-8").splitlines(), data


def record_console() -> Console:
    return Console(
        record=True,
        width=WIDTH,
        no_color=True,
        color_system=None,
        highlight=False,
        markup=False,
        emoji=False,
    )


def tagged(msg: OmniMessage, *origin: str) -> OmniMessage:
    return msgspec.structs.replace(msg, origin=list(origin))


def child_meta(session_id: str) -> OmniMessage:
    return b.session_meta(
        session_id=session_id,
        provider="scripted",
        model_id="m",
        model_context_window="unknown",
        system_prompt="s",
        agent_state="/x",
        workspace="/w",
        source="subagent",
    )


# --------------------------------------------------------------------------- run: rendering


def test_renderer_nests_child_messages_under_the_spawning_call_r_sub_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-SUB-1: the recorded parent stream renders each child message indented, led by the
    child's short id, between the parent's run_subagent line and its output line."""
    fam = make_family(tmp_path)
    (child,) = fam.children
    short = short_id(child)
    lines, data = render(fam.stream, monkeypatch)
    lead = f"  {short} │ "

    call_at = lines.index('[tool] run_subagent {"prompt":"write a.txt"}  (p1)')
    header_at = lines.index(f"  ↳ subagent {child} for call p1")
    out_at = lines.index("[output p1 completed]")
    assert call_at < header_at < out_at
    child_lines = [i for i, line in enumerate(lines) if line.startswith(lead)]
    assert child_lines and all(header_at < i < out_at for i in child_lines)
    # Everything between the header and the parent's output is the child's (nothing else runs).
    assert all(
        lines[i].startswith(lead)
        for i in range(header_at + 1, out_at)
        if not lines[i].startswith("  [p1]") and lines[i] != "  child answer"
    )
    # The child's tool calls, approvals and outputs are the child's lines, not top-level ones.
    write_call = f'{lead}[tool] write_file {{"path":"a.txt","content":"A\\nB\\n"}}  (c1)'
    assert write_call in lines
    assert f"{lead}[approval] allow c1" in lines and f"{lead}[output c1 completed]" in lines
    assert f"{lead}[output c2 failed]" in lines
    assert not any(line.startswith(("[tool] write_file", "[output c1")) for line in lines)
    # A child's text is printed a whole line at a time, each line led by the child's id.
    assert f"{lead}second line" in lines
    assert lines.index(f"{lead}second line") < lines.index(write_call)
    assert f"{lead}child answer" in lines
    assert lines[-1] == "All done."
    # Hostile child strings are shown escaped, never raw (and NO_COLOR: no ANSI at all).
    assert_terminal_safe(data)
    assert (
        f"{lead}Child \\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\u202egnp.exe\\x9b31m[bold]markup[/]"
        in lines
    )
    read_call = next(line for line in lines if line.startswith(f"{lead}[tool] read_file"))
    assert "\\u202egnp.exe\\x9b31m" in read_call  # JSON leaves these raw; safe() does not
    assert f"{lead}  [c2] [tool error] file not found: \\x1b[2J" in "\n".join(lines)


def test_concurrent_spawns_started_in_call_order_are_each_attributed_to_their_own_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two run_subagent calls of one turn whose children start in call order (the second child
    is held until the first has started): each child goes to its own call, once."""
    parent = [[spawn("one", "p1"), spawn("two", "p2")], [{"text": "Both done."}]]
    fam = make_family(
        tmp_path, parent, [[{"text": "first"}]], [[{"text": "second"}]], in_order=True
    )
    assert len(fam.children) == 2
    lines, _ = render(fam.stream, monkeypatch)
    headers = [line for line in lines if "↳ subagent" in line]
    attributed = {}
    for header in headers:
        _, _, rest = header.partition("↳ subagent ")
        sid, _, cid = rest.removesuffix(" (guessed by start order)").partition(" for call ")
        attributed[sid] = cid
    first, second = fam.children  # in stream order, which the gate makes call order
    assert attributed == {first: "p1", second: "p2"}
    for sid in fam.children:
        # Its tool list and its answer, each led by its own id.
        assert sum(line.startswith(f"  {short_id(sid)} │ ") for line in lines) == 2


def test_a_call_that_ends_without_a_child_frees_the_call_a_guess_gave_its_child() -> None:
    """Children started out of call order: the second call's child arrives first and is guessed
    for p1; p2 then ends without a child, which proves the guess wrong, so p1 is free again
    and the next child is attributed to it (before the fix it got no call at all)."""
    kid2, kid1 = "session-kid2-22222222", "session-kid1-11111111"
    msgs = [
        b.tool_call("run_subagent", '{"prompt":"x"}', "p1"),
        b.tool_call("run_subagent", '{"prompt":"y"}', "p2"),
        b.approval_decision("allow", "p1"),
        b.approval_decision("allow", "p2"),
        b.partial_tool_call_output("start", "p1"),
        b.partial_tool_call_output("start", "p2"),
        tagged(child_meta(kid2), kid2),
        b.tool_call_output("p2", "second done"),
        tagged(child_meta(kid1), kid1),
        b.tool_call_output("p1", "first done"),
    ]
    console = record_console()
    renderer = StreamRenderer(console)
    for m in msgs:
        renderer.feed(m)
    renderer.close()
    lines = console.export_text().splitlines()
    assert f"  ↳ subagent {kid2} for call p1 (guessed by start order)" in lines
    assert f"  ↳ subagent {kid1} for call p1" in lines


def test_renderer_attribution_rules_and_per_origin_text() -> None:
    """The heuristic on a synthetic stream: a denied call never gets a child, a lone running
    call is certain, a grandchild (origin of length 2) nests one level deeper under the child's
    own run_subagent call, and a child's streamed text never splits the parent's line."""
    kid, grandkid = "session-kid-aaaaaaaa", "session-gkid-bbbbbbbb"
    msgs = [
        b.tool_call("run_subagent", '{"prompt":"x"}', "p1"),
        b.tool_call("run_subagent", '{"prompt":"y"}', "p2"),
        b.approval_decision("deny", "p1"),
        b.approval_decision("allow", "p2"),
        b.tool_call_output("p1", "Tool call denied by user.", stop_reason="aborted"),
        b.partial_tool_call_output("start", "p2"),
        tagged(child_meta(kid), kid),
        b.partial_text("start", ""),
        b.partial_text("delta", "Parent says hel"),
        tagged(b.partial_text("start", ""), kid),
        tagged(b.partial_text("delta", "kid line one\nkid "), kid),
        b.partial_text("delta", "lo."),
        tagged(b.partial_text("delta", "line two"), kid),
        tagged(b.partial_text("stop", ""), kid),
        b.partial_text("stop", ""),
        tagged(b.tool_call("run_subagent", '{"prompt":"z"}', "k1"), kid),
        tagged(b.partial_tool_call_output("start", "k1"), kid),
        tagged(child_meta(grandkid), kid, grandkid),
        tagged(b.tool_call("read_file", '{"path":"q"}', "g1"), kid, grandkid),
        tagged(b.tool_call_output("k1", "gk done"), kid),
        tagged(b.user_text("steer " + HOSTILE), "session-orphan-cccccccc"),
    ]
    console = record_console()
    renderer = StreamRenderer(console)
    for m in msgs:
        renderer.feed(m)
    renderer.close()
    lines = console.export_text().splitlines()
    assert f"  ↳ subagent {kid} for call p2" in lines  # not p1 (denied); certain: no "guessed"
    assert f"    ↳ subagent {grandkid} for call k1" in lines
    assert '    bbbbbbbb │ [tool] read_file {"path":"q"}  (g1)' in lines
    assert "  aaaaaaaa │ kid line one" in lines and "  aaaaaaaa │ kid line two" in lines
    assert "Parent says hel" in lines and "lo." in lines  # the parent's line was ended, not mixed
    assert "  aaaaaaaa │ [output k1 completed]" in lines
    assert (
        "  cccccccc │ > steer \\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\u202egnp.exe\\x9b31m[bold]markup[/]"
        in lines
    )
    assert_terminal_safe(console.export_text().encode())


# --------------------------------------------------------------------------- run --subagents


SUB_SCRIPT: dict[str, Any] = {
    "responses": [[{"text": "Delegating."}, spawn("write a.txt", "p1")], [{"text": "All done."}]],
    "subagent": [
        [{"text": "On it."}, call("write_file", {"path": "a.txt", "content": "A"}, "c1")],
        [{"text": "Wrote a.txt."}],
    ],
}


def run_cli(
    tmp_path: Path, script: dict[str, Any], *extra: str, input: str | None = None
) -> tuple[Path, Result]:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    result = invoke(
        "--home",
        home,
        "--init",
        "run",
        "-m",
        "go",
        "--script",
        path,
        "--workspace",
        ws,
        *extra,
        input=input,
    )
    return home, result


def test_run_with_subagents_spawns_a_child_session_r_cli_1(tmp_path: Path) -> None:
    """`run --subagents`: the child answers from the script's `subagent` key, in its own valid
    trace (source subagent) that the parent's pointer names; the run shows it nested."""
    home, result = run_cli(tmp_path, SUB_SCRIPT, "--subagents")
    assert result.exit_code == 0, result.output
    infos = {i.session_id: i for i in DataRoot(home).sessions()}
    assert len(infos) == 2
    metas = {sid: read_trace(info.files).records[0].payload for sid, info in infos.items()}
    (child,) = [sid for sid, m in metas.items() if m.source == "subagent"]  # type: ignore[union-attr]
    (parent,) = set(infos) - {child}
    records = read_trace(infos[parent].files).records
    assert [r.payload.session_id for r in records if isinstance(r.payload, SubagentPayload)] == [
        child
    ]
    for info in infos.values():
        assert [f for f in validate_session(info.files) if f.severity == "error"] == []
    assert (tmp_path / "ws" / "a.txt").read_text() == "A"
    out = result.stdout.splitlines()
    lead = f"  {short_id(child)} │ "
    assert f"  ↳ subagent {child} for call p1" in out
    assert f'{lead}[tool] write_file {{"path":"a.txt","content":"A"}}  (c1)' in out
    assert out.index(f"{lead}Wrote a.txt.") < out.index("[output p1 completed]")
    assert f"session: {parent}" in out


def test_run_without_subagents_does_not_offer_the_tool(tmp_path: Path) -> None:
    """Default off: the parent is not offered run_subagent, and a call to it fails."""
    home, result = run_cli(tmp_path, SUB_SCRIPT)
    assert result.exit_code == 0, result.output
    tools_line = next(line for line in result.stdout.splitlines() if line.startswith("[tools]"))
    assert "run_subagent" not in tools_line
    assert "Unknown tool: run_subagent" in result.stdout
    assert len(DataRoot(home).sessions()) == 1


def test_run_subagents_default_child_script_and_input_errors(tmp_path: Path) -> None:
    """Without a `subagent` key children answer with one fixed line; a bad `subagent` script,
    or a script serving its own tools, is an input error (exit 2)."""
    script = {"responses": SUB_SCRIPT["responses"]}
    _, result = run_cli(tmp_path, script, "--subagents")
    assert result.exit_code == 0, result.output
    assert "(scripted subagent) Nothing to do" in result.stdout
    _, bad = run_cli(tmp_path, {**script, "subagent": {"responses": "nope"}}, "--subagents")
    assert bad.exit_code == 2 and "invalid `subagent` script" in bad.stderr
    own = {**script, "tools": [{"name": "shell", "description": "scripted"}]}
    _, refused = run_cli(tmp_path, own, "--subagents")
    assert refused.exit_code == 2 and "--subagents needs the built-in tools" in refused.stderr


def test_run_subagents_approve_ask_names_the_child_r_sub_5(tmp_path: Path) -> None:
    """R-SUB-5: with --approve ask the child's calls are asked about too, naming the child."""
    home, result = run_cli(tmp_path, SUB_SCRIPT, "--subagents", "--approve", "ask", input="y\ny\n")
    assert result.exit_code == 0, result.output
    (child,) = [
        i.session_id
        for i in DataRoot(home).sessions()
        if read_trace(i.files).records[0].payload.source == "subagent"
    ]  # type: ignore[union-attr]
    assert "[approve] run_subagent" in result.stderr
    assert f"[approve] [subagent {short_id(child)}] write_file" in result.stderr
    assert (tmp_path / "ws" / "a.txt").read_text() == "A"


# --------------------------------------------------------------------------- inspect --children


def test_inspect_children_shows_the_child_under_its_pointer_r_cli_4(tmp_path: Path) -> None:
    """R-SUB-3 + R-CLI-4: the parent's view, then the child's view indented under a heading
    naming the pointer's file:ordinal."""
    fam = make_family(tmp_path)
    (child,) = fam.children
    (coord,) = pointer_coords(fam.env.home, fam.parent)
    result = invoke("--home", fam.env.home, "inspect", fam.parent, "--children")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    head = lines.index(f"── subagent at {coord}: {child}")
    assert lines.index(f"Session {fam.parent}") < lines.index("Subagents") < head
    assert lines[head + 1] == f"    Session {child}"
    below = lines[head + 1 :]
    assert "      started as: subagent" in below
    assert any(line.startswith("    Timeline") for line in below)
    assert any("tool write_file" in line and line.startswith("    ") for line in below)
    assert_terminal_safe(result.stdout_bytes)
    # Without --children nothing of the child is shown.
    plain = invoke("--home", fam.env.home, "inspect", fam.parent).stdout
    assert f"Session {child}" not in plain and "Subagents" not in plain


def test_inspect_children_json_nests_the_child_inspection(tmp_path: Path) -> None:
    fam = make_family(tmp_path)
    (child,) = fam.children
    (coord,) = pointer_coords(fam.env.home, fam.parent)
    data = json.loads(
        invoke("--home", fam.env.home, "inspect", fam.parent, "--children", "--json").stdout
    )
    assert data["session_id"] == fam.parent
    (view,) = data["children"]
    assert (view["at"], view["session_id"], view["error"]) == (coord, child, None)
    inner = view["inspection"]
    assert inner["session_id"] == child and inner["meta"]["source"] == "subagent"
    assert sorted(c["name"] for c in inner["tool_calls"]) == ["read_file", "write_file"]
    assert inner["children"] == []
    assert view["source"].endswith(".jsonl")
    plain = json.loads(invoke("--home", fam.env.home, "inspect", fam.parent, "--json").stdout)
    assert "children" not in plain  # the shape without --children is unchanged


def test_inspect_children_of_a_trace_path_finds_the_child_beside_it(tmp_path: Path) -> None:
    """A parent given as a file: the child is looked up next to it (same traces directory),
    whatever --home says."""
    fam = make_family(tmp_path)
    (child,) = fam.children
    (parent_file,) = fam.env.root.trace_files(fam.parent)
    data = json.loads(
        invoke(
            "--home", tmp_path / "elsewhere", "inspect", parent_file, "--children", "--json"
        ).stdout
    )
    assert data["children"][0]["inspection"]["session_id"] == child


def test_inspect_children_missing_child_is_a_diagnostic(tmp_path: Path) -> None:
    """A pointer to a session whose files are gone: one line saying so, exit 0."""
    fam = make_family(tmp_path)
    (child,) = fam.children
    (coord,) = pointer_coords(fam.env.home, fam.parent)
    for f in fam.env.root.trace_files(child):
        f.unlink()
    result = invoke("--home", fam.env.home, "inspect", fam.parent, "--children")
    assert result.exit_code == 0, result.output
    assert f"── subagent at {coord}: {child}: not found: no trace files for this session" in (
        result.stdout.splitlines()
    )
    data = json.loads(
        invoke("--home", fam.env.home, "inspect", fam.parent, "--children", "--json").stdout
    )
    (view,) = data["children"]
    assert view["inspection"] is None and view["error"].startswith("not found")


def write_session(home: Path, sid: str, pointers: list[str]) -> Path:
    folder = home / "default_project" / "agents" / "default_agent" / "traces" / "2026-07-18"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sid}_001.jsonl"
    records = [child_meta(sid), b.user_text("task")] + [b.subagent(p) for p in pointers]
    path.write_bytes(b"".join(encode_line(r) for r in records))
    return path


def test_inspect_children_guards_cycles_bad_ids_and_depth(tmp_path: Path) -> None:
    """Pointers are untrusted: a cycle, an id that is not a file name (hostile) and a chain
    deeper than the guard are each reported on the pointer, never followed, never a crash."""
    home = tmp_path / "home"
    evil = "../" + HOSTILE
    write_session(home, "session-a", ["session-b", evil])
    write_session(home, "session-b", ["session-a", "session-b"])
    result = invoke("--home", home, "inspect", "session-a", "--children")
    assert result.exit_code == 0, result.output
    assert_terminal_safe(result.stdout_bytes)
    out = result.stdout
    assert "── subagent at 1:2: session-b\n" in out
    assert "── subagent at 1:3: ../\\x1b[2J" in out and "invalid session id" in out
    assert out.count("already shown above") == 2  # b → a (a cycle) and b → b
    data = json.loads(invoke("--home", home, "inspect", "session-a", "--children", "--json").stdout)
    b_view, evil_view = data["children"]
    assert evil_view["session_id"] == evil and evil_view["inspection"] is None
    assert [v["error"].startswith("already shown") for v in b_view["inspection"]["children"]] == [
        True,
        True,
    ]

    chain = [f"session-c{i}" for i in range(MAX_CHILD_DEPTH + 2)]
    for sid, nxt in zip(chain, [*chain[1:], None], strict=True):
        write_session(home, sid, [nxt] if nxt else [])
    node = json.loads(invoke("--home", home, "inspect", chain[0], "--children", "--json").stdout)
    depth = 0
    while node["children"] and node["children"][0]["inspection"] is not None:
        node = node["children"][0]["inspection"]
        depth += 1
    assert depth == MAX_CHILD_DEPTH
    assert "nested deeper than" in node["children"][0]["error"]


def test_inspect_children_usage_errors(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_session(home, "session-a", [])
    assert invoke("--home", home, "inspect", "session-a", "--children", "--records").exit_code == 2
    result = invoke("--home", home, "inspect", "session-a", "--children")
    assert result.exit_code == 0 and "none (no subagent pointers in this trace)" in result.stdout
    shutil.rmtree(home)
    assert invoke("--home", home, "inspect", "session-a", "--children").exit_code == 2
