"""Session's public surface after the split (issue 14, item 2): the record path and the turn
runner are not Session methods, and the optional LLM/Environment capabilities are protocols."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import (
    BindsScratchpad,
    DeclaresContextWindow,
    NamesModel,
    NamesProvider,
    Session,
    llm_identity,
)
from engine.llm import ScriptedLLM


@pytest.mark.parametrize("name", ["record", "emit", "request", "backoff", "resolve_tools"])
def test_the_loop_internals_are_not_session_methods(name: str) -> None:
    """A caller cannot write past the loop's invariants through the Session."""
    assert not hasattr(Session, name)


class _Bare:
    vision = False


class _Declared:
    vision = False
    provider = "acme"
    model_id = "m-1"
    context_window = 8192


class _Binds:
    def __init__(self) -> None:
        self.bound: Path | None = None

    def bind_scratchpad(self, path: Path) -> None:
        self.bound = path


def test_llm_identity_reads_only_declared_capabilities() -> None:
    assert llm_identity(_Bare()) == ("custom", "_Bare", None)
    assert llm_identity(_Declared()) == ("acme", "m-1", 8192)
    assert isinstance(_Declared(), NamesProvider | NamesModel | DeclaresContextWindow)
    assert not isinstance(_Bare(), NamesProvider | NamesModel | DeclaresContextWindow)


def test_a_window_that_is_not_an_int_reads_as_undeclared() -> None:
    odd = _Declared()
    odd.context_window = True  # type: ignore[assignment]
    assert llm_identity(odd)[2] is None


def test_scratchpad_binding_is_a_protocol() -> None:
    assert isinstance(_Binds(), BindsScratchpad)
    assert not isinstance(_Bare(), BindsScratchpad)


def test_the_scripted_llm_names_itself() -> None:
    provider, model_id, _ = llm_identity(ScriptedLLM([[{"text": "hi"}]]))
    assert provider and model_id
