"""Options shared by several ``penguin`` commands, as typed ``Annotated`` aliases.

Owns: option names, help texts and choice enums.  Does not: interpret the values.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final

import typer

__all__ = [
    "ApproveChoice",
    "ApproveOpt",
    "BaseUrlOpt",
    "ChangeModelOpt",
    "JsonOpt",
    "KeyEnvOpt",
    "LlmChoice",
    "LlmOpt",
    "MaxContextOpt",
    "MaxSessionTurnsOpt",
    "MaxTurnsOpt",
    "ModeChoice",
    "ModeOpt",
    "ModelOpt",
    "NetworkOpt",
    "SandboxChoice",
    "SandboxOpt",
    "ScriptOpt",
    "SessionOrPathArg",
    "SubagentsOpt",
    "THINKING_LEVELS",
    "ThinkingOpt",
    "checked_thinking",
]


class ApproveChoice(StrEnum):
    ask = "ask"
    allow_all = "allow-all"
    deny_all = "deny-all"


class SandboxChoice(StrEnum):
    workspace_write = "workspace-write"
    read_only = "read-only"
    off = "off"


class FsyncChoice(StrEnum):
    turn = "turn"
    always = "always"
    rotate = "rotate"
    never = "never"


class ModeChoice(StrEnum):
    summarize = "summarize"
    discard = "discard"


class LlmChoice(StrEnum):
    openai = "openai"
    anthropic = "anthropic"


ScriptOpt = Annotated[
    Path | None,
    typer.Option(
        "--script",
        help='A ScriptedLLM script (JSON, README "Script files") answers instead of a model: '
        "a deterministic test double.  A script that declares its own `tools` gets them served "
        "from the script; otherwise the built-in tools run in the workspace.",
        show_default=False,
    ),
]
LlmOpt = Annotated[
    LlmChoice | None,
    typer.Option(
        "--llm",
        help="A real model provider [default: the session's (resume), else config.toml's].",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model name [default: the session's (resume), else config.toml's].",
        show_default=False,
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="API base URL for --llm (e.g. a local OpenAI-compatible server).",
        show_default=False,
    ),
]
KeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env",
        help="Environment variable holding the API key "
        "[default: OPENAI_API_KEY / ANTHROPIC_API_KEY].",
        show_default=False,
    ),
]
ApproveOpt = Annotated[
    ApproveChoice | None,
    typer.Option(
        "--approve",
        help="Tool approval: allow-all, deny-all, or ask (prompt y/n/a for each call) "
        "[default: allow-all with --script; with a model, config.toml's, else ask on a "
        "terminal and refuse tool calls without one].",
        case_sensitive=False,
        show_default=False,
    ),
]
SandboxOpt = Annotated[
    SandboxChoice | None,
    typer.Option(
        "--sandbox",
        help="Confine the tools (docs/sandbox.md): workspace-write (write only the workspace), "
        "read-only, or off (unconfined) [default: the session's (resume), else config.toml's, "
        "else workspace-write].",
        case_sensitive=False,
        show_default=False,
    ),
]
NetworkOpt = Annotated[
    bool | None,
    typer.Option(
        "--network/--no-network",
        help="Let the tools open TCP connections [default: the session's (resume), else "
        "config.toml's, else off in a sandbox and on with --sandbox off].",
        show_default=False,
    ),
]
ChangeModelOpt = Annotated[
    bool,
    typer.Option(
        "--change-model",
        help="Continue the session with another model than the one it recorded.",
    ),
]
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-turns",
        help="Stop the task after N model turns (exit 1 when reached) [default: 100].",
        show_default=False,
    ),
]
MaxContextOpt = Annotated[
    int | None,
    typer.Option(
        "--max-context-length",
        help="Compact when the context reaches N tokens (<= 0 disables) [default: 128000].",
        show_default=False,
    ),
]
MaxSessionTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-session-turns",
        help="Compact after N turns in context (<= 0 disables) [default: -1].",
        show_default=False,
    ),
]
ModeOpt = Annotated[
    ModeChoice | None,
    typer.Option(
        "--compaction-mode", help="How to compact [default: summarize].", show_default=False
    ),
]
THINKING_LEVELS: Final = ("none", "minimal", "low", "medium", "high")
ThinkingOpt = Annotated[
    str | None,
    typer.Option(
        "--thinking",
        help="How much the model thinks before it answers: none, minimal, low, medium or high "
        "(OpenAI-compatible: reasoning_effort; Anthropic: a thinking budget) [default: "
        "config.toml's `thinking`, else the provider's].",
        show_default=False,
        metavar="LEVEL",
    ),
]


def checked_thinking(level: str | None, *, where: str = "--thinking") -> str | None:
    """``level`` when it is one of ``THINKING_LEVELS`` (``off`` reads as ``none``)."""
    if level is None:
        return None
    value = level.strip().lower()
    value = "none" if value == "off" else value
    if value not in THINKING_LEVELS:
        from .errors import CliError

        raise CliError(
            f"{where}: unknown thinking level {level!r} (choose {', '.join(THINKING_LEVELS)})"
        )
    return value


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of text.")]
SubagentsOpt = Annotated[
    bool | None,
    typer.Option(
        "--subagents/--no-subagents",
        help="Offer the run_subagent tool: the agent can delegate a task to a child session "
        "(same model, workspace and approval policy; its own trace, pointed to from this "
        "one).  A scripted run's children answer from the script's `subagent` key, else "
        "with one fixed line.  Recorded: a resumed session keeps it unless told otherwise "
        "[default: off for a new session].",
        show_default=False,
    ),
]

# A session id, a trace file or a directory: what ``targets.resolve_target`` takes.
SessionOrPathArg = Annotated[
    str,
    typer.Argument(
        help="A session id, a trace file, or a directory holding one session's files.",
        show_default=False,
        metavar="SESSION_OR_PATH",
    ),
]
