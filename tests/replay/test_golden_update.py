"""Re-recording goldens (``--golden-update``, SPEC R-GOLD-6): every shape the replay compares is
re-recorded from a live run of the same inputs with the recorded user events re-created at the
same place (R-GOLD-1..3: steering, aborts at every point, a crash cut and its resume), and the
new golden replays back to "match"."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from enginekit import collect

from engine import (
    AbortSignal,
    CompactionSettings,
    LocalEnvironment,
    RetryPolicy,
    Session,
    SessionSubagentRunner,
    allow_all,
)
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, OmniMessage, ToolCallPayload
from eventstore import builders as b
from replay._rerecord import GoldenUpdateError, _events, record_live
from replay.golden import _plan, _recorded, _segments, normalize, replay_trace

pytest_plugins = ["pytester"]

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "fixtures" / "traces"
_spec = importlib.util.spec_from_file_location(
    "make_fixtures", REPO / "fixtures" / "make_fixtures.py"
)
assert _spec is not None and _spec.loader is not None
mf = sys.modules.setdefault("make_fixtures", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(mf)
TOOLS, call = mf.TOOLS, mf.call
NO_COMPACTION = CompactionSettings(max_context_length=0)


def scripted(
    responses: list[Any],
    *,
    compaction: CompactionSettings = NO_COMPACTION,
    max_turns: int = 100,
    tools: list[Any] | None = TOOLS,
    **extra: Any,
) -> Any:
    """An agent answering with ``responses`` (the fixture's script, without its scripted
    interrupts: the re-recording re-creates those)."""

    def agent(workspace: Path) -> dict[str, Any]:
        llm = ScriptedLLM(
            {"tools": tools, "responses": responses} if tools else {"responses": responses}
        )
        return {
            "llm": llm,
            "environment": ScriptedEnvironment.from_llm(llm),
            "system_prompt": mf.SYSTEM,
            "compaction": compaction,
            "retry": mf.RETRY,
            "max_turns": max_turns,
            "fsync": "never",
            **extra,
        }

    return agent


def denial_approve(msg: OmniMessage) -> Any:
    p = msg.payload
    assert isinstance(p, ToolCallPayload)
    if "rm -rf" in p.arguments:
        return "deny"
    return "forbidden" if "curl" in p.arguments else "allow"


def goal_agent(workspace: Path) -> dict[str, Any]:
    return {
        "llm": ScriptedLLM(REPO / "fixtures" / "goal_script.json"),
        "environment": LocalEnvironment(workspace),
        "system_prompt": mf.SYSTEM,
        "compaction": NO_COMPACTION,
        "retry": mf.RETRY,
        "fsync": "never",
        "approve": allow_all,
    }


def subagents_agent(child_scripts: list[Any], parent: list[Any], *, nested: bool = False) -> Any:
    def agent(workspace: Path) -> dict[str, Any]:
        made: list[ScriptedLLM] = []
        home = workspace.parent / "home"

        def environment_factory(runner: Any) -> Any:
            llm = ScriptedLLM(child_scripts[len(made)])
            made.append(llm)
            if nested and len(made) == 1:
                return LocalEnvironment(workspace, tools=[], subagents=runner)
            return ScriptedEnvironment.from_llm(llm)

        runner = SessionSubagentRunner(
            lambda: made[-1],
            root=home,
            workspace=workspace,
            environment_factory=environment_factory,
            system_prompt="You are a subagent.",
            compaction=NO_COMPACTION,
            retry=mf.RETRY,
            fsync="never",
            max_depth=2 if nested else 1,
        )
        return {
            "llm": ScriptedLLM({"responses": parent}),
            "environment": LocalEnvironment(workspace, tools=[], subagents=runner),
            "system_prompt": mf.SYSTEM,
            "compaction": NO_COMPACTION,
            "retry": mf.RETRY,
            "fsync": "never",
            "approve": allow_all,
            "subagents": runner,
        }

    return agent


READ_NOTES = {
    "tools": TOOLS,
    "responses": [
        [call("read_file", {"file_path": "notes.txt"}, "ship on friday")],
        [{"text": "notes.txt says: ship on friday."}],
    ],
}


def spawn(prompt: str) -> dict[str, Any]:
    return {"tool_call": {"name": "run_subagent", "arguments": {"prompt": prompt}}}


HELLO = [{"text": "Hello! What shall we do?"}]
AGENTS: dict[str, Any] = {
    "plain": scripted(
        [
            [
                {"thinking": "Simple arithmetic.", "fidelity": {"signature": "sig-0001"}},
                {"text": "2 + 2 = 4.", "chunks": 2},
            ],
            [{"text": "3 + 3 = 6."}],
        ],
        approve=allow_all,
    ),
    "tools_out_of_order": scripted(
        [
            [
                {"text": "I'll list the files and read b.txt."},
                call("exec_command", {"cmd": "sleep 1; ls"}, "a.txt\nb.txt\n", delay_ms=80),
                call("read_file", {"file_path": "b.txt"}, "contents of b.txt"),
            ],
            [{"text": "There are two files; b.txt says: contents of b.txt."}],
        ],
        approve=allow_all,
    ),
    "denial": scripted(
        [
            [
                {"text": "Cleaning up, then reading the notes."},
                call("exec_command", {"cmd": "rm -rf build"}, "removed"),
                call("read_file", {"file_path": "notes.txt"}, "ship on Friday"),
                call("exec_command", {"cmd": "curl https://example.com"}, "<html>"),
            ],
            [{"text": "I did not delete build/ or fetch the page; the notes say ship on Friday."}],
        ],
        approve=denial_approve,
    ),
    "abort_tool": scripted(
        [
            HELLO,
            [
                {"text": "Running the test suite."},
                call("exec_command", {"cmd": "make test"}, "all green", delay_ms=60000),
            ],
            [{"text": "The test run was interrupted; start it again when you are ready."}],
        ],
        approve=allow_all,
    ),
    "abort_stream": scripted(
        [
            HELLO,
            [{"text": ["Here is a long ", "essay about ", "penguins."]}],
            [{"text": "Short version: penguins are flightless birds."}],
        ],
        approve=allow_all,
    ),
    "retry": scripted(
        [
            [{"text": "half an ans"}, {"fail": {"status": "timeout", "message": "idle timeout"}}],
            [{"fail": {"status": "malformed", "message": "truncated JSON in the stream"}}],
            [{"text": "The full answer: 42."}],
        ],
        approve=allow_all,
    ),
    "auth": scripted(
        [
            HELLO,
            [{"fail": {"status": "auth", "message": "invalid api key"}}],
            [{"text": "Credentials work again; the summary is ready."}],
        ],
        approve=allow_all,
    ),
    "compaction_summarize": scripted(
        [
            [
                {"text": "Reading notes."},
                call("read_file", {"file_path": "notes.txt"}, "ship on Friday"),
            ],
            [{"text": "Notes say: ship on Friday."}, {"usage": {"cache_write": 1200, "output": 8}}],
            [{"text": "[summary]User asked to read notes.txt; it says ship on Friday.[/summary]"}],
            [{"text": "Yes, still Friday."}],
        ],
        compaction=CompactionSettings(max_context_length=1000, mode="summarize"),
        approve=allow_all,
    ),
    "compaction_discard": scripted(
        [
            [{"text": "Listing."}, call("exec_command", {"cmd": "ls"}, "a.txt\nb.txt\n")],
            [{"text": "Two files: a.txt and b.txt."}],
            [{"text": "Starting fresh: which file?"}],
        ],
        compaction=CompactionSettings(max_context_length=0, max_session_turns=2, mode="discard"),
        approve=allow_all,
    ),
    "compaction_mid_task": scripted(
        [
            [
                {"text": "Reading the big log."},
                call("read_file", {"file_path": "big.log"}, "ERROR at line 7: disk full"),
                {"usage": {"cache_write": 1500, "output": 20}},
            ],
            [
                {
                    "text": "[summary]Reading big.log for the user; it says: ERROR at line 7: "
                    "disk full.[/summary]"
                }
            ],
            [{"text": "The log's only error: disk full at line 7."}],
        ],
        compaction=CompactionSettings(max_context_length=1000, mode="summarize"),
        approve=allow_all,
    ),
    "compaction_manual": scripted(
        [
            [{"text": "The build uses make; `make test` runs the suite."}],
            [{"text": "[summary]User asked how to build: make; tests: make test.[/summary]"}],
            [{"text": "Run `make test`."}],
        ],
        compaction=CompactionSettings(max_context_length=0, mode="summarize"),
        approve=allow_all,
    ),
    "steering": scripted(
        [HELLO, [{"text": "Summary: all good."}], [{"text": "Summary: all good, as of Monday."}]],
        approve=allow_all,
    ),
    "max_turns": scripted(
        [
            [{"text": "Step 1."}, call("exec_command", {"cmd": "step 1"}, "ok 1")],
            [{"text": "Step 2."}, call("exec_command", {"cmd": "step 2"}, "ok 2")],
            [{"text": "All steps done."}],
        ],
        max_turns=2,
        approve=allow_all,
    ),
    "multi_file": scripted(
        [
            [{"text": "Part one done."}, {"usage": {"cache_write": 1100, "output": 4}}],
            [{"text": "[summary]Part one is done.[/summary]"}],
            [{"text": "Part two done."}, {"usage": {"cache_write": 1100, "output": 4}}],
            [{"text": "[summary]Parts one and two are done.[/summary]"}],
            [{"text": "Part three done; everything is finished."}],
        ],
        compaction=CompactionSettings(max_context_length=1000, mode="summarize"),
        approve=allow_all,
    ),
    "resumed": scripted(
        [
            [{"text": "Checking."}, call("exec_command", {"cmd": "git status"}, "clean")],
            [{"text": "The tree is clean."}],
            [{"text": "Still clean after the restart."}],
        ],
        approve=allow_all,
    ),
    "goal": goal_agent,
    "subagent": subagents_agent(
        [READ_NOTES],
        [
            [{"text": "I'll ask a subagent."}, spawn("Read notes.txt")],
            [{"text": "The notes say to ship on friday."}],
        ],
    ),
    "abort_backoff": scripted(
        [
            HELLO,
            [{"text": "Let me th"}, {"fail": {"status": "timeout", "message": "idle timeout"}}],
            [{"text": "Here is the plan: tests first, then the fix."}],
        ],
        approve=allow_all,
    ),
    "abort_compaction": scripted(
        [
            [
                {"text": "Reading the big log."},
                call("read_file", {"file_path": "big.log"}, "ERROR at line 7: disk full"),
                {"usage": {"cache_write": 1500, "output": 20}},
            ],
            [{"text": ["[summary]Reading big.log ", "for the user", "[/summary]"]}],
            [{"text": "Starting over: the log says the disk is full."}],
        ],
        compaction=CompactionSettings(max_context_length=1000, mode="summarize"),
        approve=allow_all,
    ),
    "steering_after_tool": scripted(
        [
            [
                {"text": "Listing the files."},
                call("exec_command", {"cmd": "ls"}, "a.txt\nb.md\nc.txt\n", delay_ms=20),
            ],
            [{"text": "The .txt files are a.txt and c.txt."}],
        ],
        approve=allow_all,
    ),
    "crash_tool": scripted(
        [
            [
                {"text": "Running the migration."},
                call("exec_command", {"cmd": "make migrate"}, "migrated", delay_ms=60000),
            ],
            [{"text": "The migration was cut off; run it again?"}],
        ],
        approve=allow_all,
    ),
    "subagents_concurrent": subagents_agent(
        [
            {
                "tools": TOOLS,
                "responses": [
                    [call("exec_command", {"cmd": "du -sh"}, "12M", delay_ms=60)],
                    [{"text": "The repository takes 12M."}],
                ],
            },
            READ_NOTES,
        ],
        [
            [
                {"text": "I'll ask two subagents."},
                spawn("How big is the repository?"),
                spawn("Read notes.txt"),
            ],
            [{"text": "12M, and the notes say to ship on friday."}],
        ],
    ),
    "subagent_nested": subagents_agent(
        [
            {
                "responses": [
                    [spawn("Read notes.txt")],
                    [{"text": "My helper says: ship on friday."}],
                ]
            },
            READ_NOTES,
        ],
        [
            [{"text": "I'll delegate."}, spawn("Find the ship date")],
            [{"text": "We ship on friday."}],
        ],
        nested=True,
    ),
}


# The recorded user events of each fixture (none for the others).
EVENTS = {
    "steering": ["steer"],
    "steering_after_tool": ["steer"],
    "abort_tool": ["fire"],
    "abort_stream": ["stream"],
    "abort_compaction": ["stream"],
    "abort_backoff": ["backoff"],
    "crash_tool": ["crash"],
}


def rerecord_into(source: Path, agent: Any, tmp: Path) -> Path:
    """``record_live`` on the golden at ``source``; the new golden's directory."""
    work = tmp / "work"
    work.mkdir()
    written = anyio.run(record_live, source, agent, work)
    dest = tmp / "new"
    for f in written:
        (dest / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest / f.parent.name / f.name)
    return dest


def shape(golden: Path) -> tuple[Any, ...]:
    """The recorded user events by place (run, record kind and ordinal), the runs and the
    resumed session objects."""
    from replay._replay_subagents import parent_files

    trace, _ = parent_files(golden)
    located = _recorded(trace)
    steps = _plan(located)
    segments, cuts = _segments(located, steps, full=True)
    ev = _events(located, steps, cuts)
    steer = {m: [[normalize(e)] for e in entries] for m, entries in ev.steer.items()}
    return steer, ev.fire, ev.stream, ev.backoff, ev.crash, len(steps), len(segments)


def parent_records(golden: Path) -> list[OmniMessage]:
    from replay._replay_llm import load_located
    from replay._replay_subagents import parent_files

    trace, _ = parent_files(golden)
    from replay.golden import _uncounted

    # Settings records and workspace snapshots are newer than the corpus (not replayed).
    return [loc.record for loc in load_located(trace) if not _uncounted(loc.record)]


@pytest.mark.parametrize("scenario", sorted(AGENTS))
def test_every_fixture_shape_rerecords_with_its_user_events(scenario: str, tmp_path: Path) -> None:
    """R-GOLD-6 with R-GOLD-1..4: the re-recorded golden keeps the recorded steering, aborts,
    crash cut and resume at the same place, replays back to "match" with every run compared,
    and (the same scripted model) is the recorded golden record for record."""
    source = FIXTURES / scenario
    new = rerecord_into(source, AGENTS[scenario], tmp_path)
    assert shape(new) == shape(source)
    steer, fire, stream, backoff, crash, _runs, sessions = shape(new)
    events = {"steer": steer, "fire": fire, "stream": stream, "backoff": backoff, "crash": crash}
    assert [k for k, v in events.items() if v] == EVENTS.get(scenario, [])
    assert sessions == (2 if scenario in ("resumed", "crash_tool") else 1)
    result = replay_trace(new)
    assert str(result) == "match", result
    old, fresh = parent_records(source), parent_records(new)
    same = normalize(fresh, like=old), normalize(old, like=fresh)
    if scenario == "subagents_concurrent":
        # Children that run at once write their pointers and outputs as they get there: a live
        # run may interleave them otherwise (the replay keeps whichever order was recorded).
        same = sorted(same[0]), sorted(same[1])
    assert same[0] == same[1]
    children = lambda d: sorted(p.name.rsplit("_", 1)[0] for p in d.rglob("*.jsonl"))  # noqa: E731
    assert len(set(children(new))) == len(set(children(source)))


def assert_rerecorded(source: Path, agent: Any, tmp: Path) -> Path:
    new = rerecord_into(source, agent, tmp)
    assert shape(new) == shape(source)
    assert str(replay_trace(new)) == "match"
    old, fresh = parent_records(source), parent_records(new)
    assert normalize(fresh, like=old) == normalize(old, like=fresh)
    return new


def test_manual_compactions_aborted_mid_stream_and_in_backoff_rerecord(tmp_path: Path) -> None:
    """R-GOLD-2, R-GOLD-4: a manual compaction aborted while its summary streams and one
    aborted in its backoff wait are aborted again at those points in the re-recording."""
    responses = [
        [{"text": "Hi there."}],
        [{"text": ["[summary]Greet", "ing so far"]}],
        [{"text": "half"}, {"fail": {"status": "timeout", "message": "slow"}}],
        [{"text": "Next."}],
    ]
    settings = CompactionSettings(max_context_length=0)
    agent = scripted(responses, tools=None, compaction=settings, approve=allow_all)
    session_id = anyio.run(record_compactions, agent, tmp_path)
    source = tmp_path / "golden"
    for f in DataRoot(tmp_path / "home").trace_files(session_id):
        (source / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, source / f.parent.name / f.name)
    (tmp_path / "again").mkdir()
    assert_rerecorded(source, agent, tmp_path / "again")


async def record_compactions(agent: Any, tmp_path: Path) -> str:
    options = agent(tmp_path / "ws")
    (tmp_path / "ws").mkdir()
    session = await Session.create(
        root=tmp_path / "home",
        workspace=tmp_path / "ws",
        **{k: v for k, v in options.items() if k != "approve"},
    )
    async with session:
        await collect(session.run([b.user_text("hello")], approve=allow_all))
        streamed = AbortSignal()
        seen: list[OmniMessage] = []

        def on_message(msg: OmniMessage) -> None:
            seen.append(msg)
            if len(seen) == 2:  # the summary's start and first delta
                streamed.abort()

        assert await session.compact(signal=streamed, on_message=on_message) == "aborted"
        waiting = AbortSignal()
        session.add_backoff_listener(lambda _ms: waiting.abort())
        assert await session.compact(signal=waiting) == "aborted"
        await collect(session.run([b.user_text("again")], approve=allow_all))
    return session.id


def test_a_crash_inside_a_request_rerecords_with_its_cut_and_resume(tmp_path: Path) -> None:
    """R-GOLD-3: a session that crashed right after a ``request_begin`` and was resumed is
    re-recorded by stopping the live session at the same record, leaving its files as they
    stood, and resuming it: the resume writes the same closure record."""
    home = tmp_path / "home"
    traces = home / "default_project" / "agents" / "default_agent" / "traces"
    shutil.copytree(FIXTURES / "damaged_dangling_request", traces)
    session_id = next(traces.rglob("*.jsonl")).name.rsplit("_", 1)[0]
    anyio.run(resume_once, home, session_id)
    responses = [
        [
            {"text": "I'll list the files and read b.txt."},
            call("exec_command", {"cmd": "sleep 1; ls"}, "a.txt\nb.txt\n", delay_ms=80),
            call("read_file", {"file_path": "b.txt"}, "contents of b.txt"),
        ],
        [{"text": "never streamed: the crash comes first"}],
        [{"text": "resumed fine"}],
    ]
    (tmp_path / "again").mkdir()
    new = assert_rerecorded(traces, scripted(responses, approve=allow_all), tmp_path / "again")
    assert "never streamed" not in "".join(p.read_text() for p in new.rglob("*.jsonl"))


async def resume_once(home: Path, session_id: str) -> None:
    from replay import resume_session

    llm = ScriptedLLM({"tools": TOOLS, "responses": [[{"text": "resumed fine"}]]})
    session = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        workspace=home.parent,
        compaction=NO_COMPACTION,
        retry=mf.RETRY,
        fsync="never",
    )
    async with session:
        await collect(session.run([b.user_text("are you there?")], approve=allow_all))


def test_an_event_the_live_run_never_reaches_is_an_error_naming_its_line(tmp_path: Path) -> None:
    """A recorded abort in a backoff wait cannot be re-created when the live model never
    fails there: the re-recording stops with the recorded line instead of dropping it."""
    calm = scripted([HELLO, [{"text": "A plan."}], [{"text": "The plan."}]], approve=allow_all)
    with pytest.raises(
        GoldenUpdateError, match=r"a user abort in a backoff wait after .*jsonl:\d+"
    ):
        rerecord_into(FIXTURES / "abort_backoff", calm, tmp_path)


def test_golden_update_rerecords_aborts_crashes_and_subagents(pytester: pytest.Pytester) -> None:
    """R-GOLD-6 through the plugin: ``--golden-update`` re-records a golden holding a mid-tool
    abort, one holding a crash and its resume, and one with concurrent subagents (the agent
    names its ``SessionSubagentRunner`` as ``subagents``); each new golden then replays."""
    for scenario in ("abort_tool", "crash_tool", "subagents_concurrent"):
        shutil.copytree(FIXTURES / scenario, pytester.path / "goldens" / scenario)
    # This module's agents, its repository named (the copy lies elsewhere).
    source = Path(__file__).read_text()
    here = "Path(__file__).parents[2]"
    assert here in source
    (pytester.path / "agents_for_goldens.py").write_text(
        source.replace(here, f"Path({str(REPO)!r})", 1)
    )
    pytester.makepyfile(
        test_update=textwrap.dedent(
            """
            import pytest
            from agents_for_goldens import AGENTS

            @pytest.mark.parametrize("name", ["abort_tool", "crash_tool", "subagents_concurrent"])
            def test_golden(golden, name):
                result = golden.check(f"goldens/{name}", agent=AGENTS[name])
                assert result.complete
            """
        )
    )
    args = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--rootdir", str(pytester.path))
    before = {p.name for p in (pytester.path / "goldens").rglob("*.jsonl")}
    pytester.runpytest_inprocess(*args, "--golden-update").assert_outcomes(passed=3)
    after = {p.name for p in (pytester.path / "goldens").rglob("*.jsonl")}
    assert len(after) == len(before) and not after & before  # every file re-recorded
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=3)


def test_an_abort_at_an_approval_rerecords_there(tmp_path: Path) -> None:
    """R-GOLD-2: the user aborted while a call waited for approval (no decision recorded):
    the re-recording aborts right after the same call is written, before its approval."""
    responses = [
        [{"text": "Deleting."}, call("exec_command", {"cmd": "rm -rf build"}, "removed")],
        [{"text": "Not deleted."}],
    ]
    signal = AbortSignal()

    def approve(_call: OmniMessage) -> str:
        signal.abort()  # the user gave up instead of answering
        return "allow"

    async def record() -> str:
        options = scripted(responses, approve=None)(tmp_path / "ws")
        options.pop("approve")
        session = await Session.create(root=tmp_path / "home", workspace=tmp_path / "ws", **options)
        async with session:
            await collect(session.run([b.user_text("clean")], approve=approve, signal=signal))
            await collect(session.run([b.user_text("well?")], approve=allow_all))
        return session.id

    (tmp_path / "ws").mkdir()
    session_id = anyio.run(record)
    source = tmp_path / "golden"
    for f in DataRoot(tmp_path / "home").trace_files(session_id):
        (source / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, source / f.parent.name / f.name)
    text = "".join(p.read_text() for p in source.rglob("*.jsonl"))
    assert '"approval_decision"' not in text.split('"type":"abort"')[0]
    assert shape(source)[1]  # a fired abort, placed at the call
    (tmp_path / "again").mkdir()
    assert_rerecorded(source, scripted(responses, approve=allow_all), tmp_path / "again")


def test_settings_changed_between_runs_are_rerecorded_unless_the_agent_sets_them(
    tmp_path: Path,
) -> None:
    """SPEC §23 with R-GOLD-6: a session resumed with a turn limit of 1 (run 2 stops at it) is
    re-recorded with the settings each run recorded, for the keys the agent leaves open; a
    key the agent sets is the agent's."""
    tool = call("exec_command", {"cmd": "ls"}, "a.txt")
    responses = [[tool], [{"text": "done"}], [tool], [{"text": "after the limit"}]]

    async def record() -> str:
        from replay import resume_session

        options = scripted(responses, approve=None, max_turns=5)(tmp_path / "ws")
        del options["approve"], options["max_turns"]
        session = await Session.create(
            root=tmp_path / "home", workspace=tmp_path / "ws", max_turns=5, **options
        )
        async with session:
            await collect(session.run([b.user_text("one")], approve=allow_all))
        del options["system_prompt"]
        resumed = await resume_session(
            DataRoot(tmp_path / "home"), session.id, max_turns=1, **options
        )
        async with resumed:
            await collect(resumed.run([b.user_text("two")], approve=allow_all))
        return session.id

    (tmp_path / "ws").mkdir()
    session_id = anyio.run(record)
    source = tmp_path / "golden"
    for f in DataRoot(tmp_path / "home").trace_files(session_id):
        (source / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, source / f.parent.name / f.name)
    notice = "[reached max turns (1); stopping]"
    assert notice in "".join(p.read_text() for p in source.rglob("*.jsonl"))

    def open_agent(workspace: Path) -> dict[str, Any]:
        options = scripted(responses, approve=allow_all)(workspace)
        del options["max_turns"]  # left open: each run's recorded limit
        return options

    (tmp_path / "open").mkdir()
    new = assert_rerecorded(source, open_agent, tmp_path / "open")
    assert notice in "".join(p.read_text() for p in new.rglob("*.jsonl"))
    (tmp_path / "set").mkdir()
    own = rerecord_into(source, scripted(responses, approve=allow_all), tmp_path / "set")
    text = "".join(p.read_text() for p in own.rglob("*.jsonl"))
    assert notice not in text and "after the limit" in text  # the agent's max_turns=100
    assert str(replay_trace(own)) == "match"


def test_an_aborted_goal_and_its_continuation_rerecord(tmp_path: Path) -> None:
    """R-GOLD-4, R-GOAL-7: a goal whose round 2 ended by an auth failure and its continuation
    (``GoalOptions(resume=True)``) are re-recorded as two goal runs, the same ones."""
    from engine import GoalOptions, LocalEnvironment

    edit = {"path": "${GOAL_FILE}", "old": "\nstatus: active", "new": "\nstatus: complete"}
    responses = [
        [{"text": "Round 1: working."}],
        [{"fail": {"status": "auth", "message": "key revoked"}}],
        [{"tool_call": {"name": "edit_file", "arguments": edit}}],
        [{"text": "Done."}],
    ]

    def agent(workspace: Path) -> dict[str, Any]:
        return {
            "llm": ScriptedLLM({"responses": responses}),
            "environment": LocalEnvironment(workspace),
            "retry": RetryPolicy(base_ms=1, cap_ms=2),
            "approve": allow_all,
        }

    async def record() -> str:
        options = agent(tmp_path / "ws")
        del options["approve"]
        session = await Session.create(root=tmp_path / "home", workspace=tmp_path / "ws", **options)
        async with session:
            goal = GoalOptions(budget=50_000)
            await collect(session.run([b.user_text("Ship it")], approve=allow_all, goal=goal))
            goal = GoalOptions(resume=True, budget=50_000)
            await collect(session.run(None, approve=allow_all, goal=goal))
        return session.id

    (tmp_path / "ws").mkdir()
    session_id = anyio.run(record)
    source = tmp_path / "golden"
    for f in DataRoot(tmp_path / "home").trace_files(session_id):
        (source / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, source / f.parent.name / f.name)
    (tmp_path / "again").mkdir()
    new = assert_rerecorded(source, agent, tmp_path / "again")
    assert shape(new)[5] == 2  # two goal runs
    text = "".join(p.read_text() for p in new.rglob("*.jsonl"))
    assert '"outcome":"aborted"' in text and '"outcome":"complete"' in text
