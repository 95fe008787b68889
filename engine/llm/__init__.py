"""LLM adapters: the deterministic ``ScriptedLLM`` (with its ``ScriptedEnvironment``) and, beside
it, the real providers."""

from __future__ import annotations

from ._anthropic import Anthropic
from ._openai import OpenAICompatible
from ._scripted import DEFAULT_SCRIPT, Script, ScriptedEnvironment, ScriptedLLM, load_script

__all__ = [
    "DEFAULT_SCRIPT",
    "Anthropic",
    "OpenAICompatible",
    "Script",
    "ScriptedEnvironment",
    "ScriptedLLM",
    "load_script",
]
