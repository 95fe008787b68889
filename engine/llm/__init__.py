"""LLM adapters: the deterministic ``ScriptedLLM`` (with its ``ScriptedEnvironment``) and, beside
it, the real providers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._scripted import DEFAULT_SCRIPT, Script, ScriptedEnvironment, ScriptedLLM, load_script

if TYPE_CHECKING:
    from ._anthropic import Anthropic
    from ._openai import OpenAICompatible

__all__ = [
    "DEFAULT_SCRIPT",
    "Anthropic",
    "OpenAICompatible",
    "Script",
    "ScriptedEnvironment",
    "ScriptedLLM",
    "load_script",
]


def __getattr__(name: str) -> Any:
    # The HTTP adapters import httpx; load them on first use so that commands which never talk
    # to a provider (validate, inspect, the scripted demo) do not pay for it at startup.
    if name == "OpenAICompatible":
        from ._openai import OpenAICompatible

        return OpenAICompatible
    if name == "Anthropic":
        from ._anthropic import Anthropic

        return Anthropic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
