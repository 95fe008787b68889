"""Which model answers, and who approves its tool calls (R-CLI-1, R-CLI-2).

Owns: turning ``--script`` / ``--llm`` / ``--model`` / ``--base-url`` / ``--api-key-env``, the
config file's defaults and, for ``resume``, the session's recorded provider and model into one
``ModelChoice``; building the ``LLM`` from it (the HTTP providers are imported only here, when a
real model is used); the default approval mode.  Does not: run anything.

Safety rules: the embedded demo script never answers by default (only ``penguin demo`` or an
explicit ``--script``); a resumed session keeps its recorded model unless ``--change-model``
says otherwise; with no model anywhere the command fails with how to set one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import anyio

from engine import LLM
from engine.llm import ScriptedLLM
from penguin.cli.config import Config
from penguin.cli.errors import CliError
from penguin.cli.terminal.safe import safe

__all__ = [
    "KEY_ENV",
    "LlmOptions",
    "ModelChoice",
    "build_llm",
    "check_same_model",
    "choose_approve",
    "choose_sandbox",
    "choose_model",
    "close_llm",
]

Provider = Literal["openai", "anthropic"]
PROVIDERS: Final[tuple[Provider, ...]] = ("openai", "anthropic")
KEY_ENV: Final[dict[str, str]] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
NO_MODEL: Final = (
    "no model chosen: pass --llm openai|anthropic --model NAME, or set a default once with "
    "`penguin config set provider openai` and `penguin config set model NAME` "
    "(`penguin demo` shows a scripted run; `--script FILE` runs a script)"
)


@dataclass(slots=True, frozen=True)
class LlmOptions:
    """The model options as given on the command line (None: not given)."""

    script: Path | None = None
    llm: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    change_model: bool = False


@dataclass(slots=True, frozen=True)
class ModelChoice:
    """A resolved model: a script file, or a provider with its model and connection."""

    script: Path | None = None
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None

    @property
    def label(self) -> str:
        return (
            f"script {self.script}" if self.script is not None else f"{self.provider}/{self.model}"
        )


def _from_config(config: Config, provider: str | None) -> dict[str, str | None]:
    """The config's connection settings, when they are for ``provider`` (or name none)."""
    configured = config.get("provider")
    if provider is not None and configured is not None and configured != provider:
        return {"model": None, "base_url": None, "api_key_env": None}
    return {
        "model": config.get("model"),
        "base_url": config.get("base_url"),
        "api_key_env": config.get("api_key_env"),
    }


def choose_model(
    opts: LlmOptions,
    *,
    config: Config,
    recorded: tuple[str, str] | None = None,
    session_id: str = "",
    endpoint: str | None = None,
) -> ModelChoice:
    """Resolve the options against the config (``run``) or the recorded model (``resume``).
    ``endpoint``: the recorded base URL of the recorded model (SPEC §23), used before the
    config's when the model is the recorded one and no ``--base-url`` is given."""
    if opts.script is not None:
        if opts.llm is not None or opts.model is not None or opts.base_url is not None:
            raise CliError("--script excludes --llm, --model and --base-url")
        return ModelChoice(script=opts.script)
    scripted = recorded is not None and recorded[0] == "scripted"
    if scripted and opts.llm is None and opts.model is None:
        raise CliError(
            f"session {safe(session_id)} was recorded with a script "
            f"({safe(recorded[1] if recorded else '')}): pass --script FILE to continue it "
            "with a script, or --llm/--model with --change-model to continue it with a model"
        )
    provider = opts.llm or (recorded[0] if recorded and recorded[0] != "scripted" else None)
    provider = provider or config.get("provider")
    if provider is None:
        if opts.model is not None:
            raise CliError("--model needs --llm openai|anthropic (or a configured provider)")
        raise CliError(NO_MODEL)
    if provider not in PROVIDERS:
        raise CliError(f"unknown provider {safe(provider)!r}: choose openai or anthropic")
    defaults = _from_config(config, provider)
    model = opts.model
    if model is None and recorded is not None and recorded[0] == provider:
        model = recorded[1]
    model = model or defaults["model"]
    if not model:
        raise CliError(f"--llm {provider} needs --model NAME (or `penguin config set model NAME`)")
    same = recorded is not None and (provider, model) == tuple(recorded)
    base_url = opts.base_url or (endpoint if same else None) or defaults["base_url"]
    return ModelChoice(
        provider=provider,
        model=model,
        base_url=base_url,
        api_key_env=opts.api_key_env or defaults["api_key_env"],
    )


def check_same_model(
    choice: ModelChoice, llm: LLM | None, *, recorded: tuple[str, str], session_id: str, allow: bool
) -> None:
    """Refuse (exit 2) to continue a session with another model than it recorded.  ``llm``
    is needed for a script (its model is in the file) and may be None for a provider."""
    if isinstance(llm, ScriptedLLM):
        now = (llm.provider, llm.model_id)
    else:
        now = (choice.provider or "", choice.model or "")
    if allow or now == recorded:
        return
    raise CliError(
        f"session {safe(session_id)} was recorded with {safe(recorded[0])}/{safe(recorded[1])}; "
        f"continuing it with {safe(now[0])}/{safe(now[1])} ({safe(choice.label)}) changes the "
        "model mid-conversation: pass --change-model to do it anyway"
    )


_told_keyless: set[str] = set()


def _note_keyless(base_url: str, env_name: str) -> None:
    """Say once per endpoint that its requests carry no key (issue 30 item 9): a server that
    needs one would otherwise answer 401 with no hint why."""
    if base_url in _told_keyless:
        return
    _told_keyless.add(base_url)
    from penguin.cli.terminal.console import warn

    warn(
        f"no API key for {base_url}: requests are sent without an Authorization header "
        f"(set ${env_name}, or name another variable with --api-key-env, if the server needs one)"
    )


def build_llm(choice: ModelChoice) -> LLM:
    """The ``LLM`` of ``choice``; a missing key or script file is an input error."""
    if choice.script is not None:
        if not choice.script.is_file():
            raise CliError(f"{safe(str(choice.script))}: no such script file")
        try:
            # A resumed session's earlier ids are taken: ScriptedLLM renames (R-RUN-20).
            return ScriptedLLM(choice.script)
        except (ValueError, OSError, TypeError) as exc:
            raise CliError(f"invalid script {safe(str(choice.script))}: {safe(str(exc))}") from None
    assert choice.provider is not None
    assert choice.model is not None
    env_name = choice.api_key_env or KEY_ENV[choice.provider]
    key = os.environ.get(env_name) or None
    # A local OpenAI-compatible server (vLLM, Ollama, llama.cpp) usually needs no key.
    keyless = choice.provider == "openai" and choice.base_url is not None
    if key is None and not (keyless and choice.api_key_env is None):
        raise CliError(
            f"set ${env_name} to your API key (or name another variable with --api-key-env "
            "or `penguin config set api_key_env NAME`)"
        )
    if key is None:
        _note_keyless(choice.base_url or "", env_name)
    try:
        if choice.provider == "openai":
            from engine.llm import OpenAICompatible

            if choice.base_url is None:
                return OpenAICompatible(choice.model, api_key=key)
            return OpenAICompatible(choice.model, base_url=choice.base_url, api_key=key)
        from engine.llm import Anthropic

        if choice.base_url is None:
            return Anthropic(choice.model, api_key=key)
        return Anthropic(choice.model, api_key=key, base_url=choice.base_url)
    except ValueError as exc:
        raise CliError(f"cannot set up the {choice.provider} provider: {safe(str(exc))}") from None


async def close_llm(llm: LLM) -> None:
    """Close a provider's HTTP client (the HTTP providers have ``aclose``; scripts do not)."""
    if isinstance(llm, ScriptedLLM):
        return
    from engine.llm import Anthropic, OpenAICompatible

    if isinstance(llm, OpenAICompatible | Anthropic):
        with anyio.CancelScope(shield=True):
            await llm.aclose()


ApproveMode = Literal["ask", "allow-all", "deny-all", "refuse"]


def choose_approve(
    explicit: str | None, *, scripted: bool, config: Config, recorded: str | None = None
) -> ApproveMode:
    """``--approve`` when given; else the session's recorded mode (R-SET-3: a resumed
    ``deny-all`` session stays ``deny-all``); a script (a test double) allows all; a real model
    asks on a terminal and, without one, refuses tool calls with a notice (``refuse``)."""
    if explicit is not None:
        return explicit  # type: ignore[return-value]
    if recorded in ("allow-all", "deny-all"):
        return recorded  # type: ignore[return-value]
    if recorded is not None:  # ask, or a library's callback the CLI cannot call: ask
        return "ask" if sys.stdin.isatty() else "refuse"
    if scripted:
        return "allow-all"
    configured = config.get("approve")
    if configured is not None:
        return configured  # type: ignore[return-value]
    return "ask" if sys.stdin.isatty() else "refuse"


def choose_sandbox(
    mode: str | None, network: bool | None, *, config: Config | None
) -> dict[str, Any]:
    """``Session.create``'s ``sandbox``/``network`` (SPEC §25): a flag wins, then config.toml
    (``config=None`` on resume: the session's recorded sandbox stands); what neither gives is
    left out, so the engine's default (workspace-write, network off) applies."""
    chosen: dict[str, Any] = {}
    configured = config.get("sandbox") if config is not None else None
    if mode is not None or configured is not None:
        chosen["sandbox"] = mode if mode is not None else configured
    net = config.get("network") if config is not None else None
    if network is not None:
        chosen["network"] = network
    elif net is not None:
        chosen["network"] = net == "true"
    return chosen
