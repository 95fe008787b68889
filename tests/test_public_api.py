"""The public surface, pinned against API.md (in the manner of httpx's exported-members test).

Every name API.md imports from a package must be exported by it, and every exported name must
exist; private modules stay private.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

API_MD = Path(__file__).resolve().parents[1].parent / "shared" / "API.md"
PACKAGES = ["eventstore", "eventstore.builders", "projections", "engine", "engine.llm", "replay"]

# Names API.md "Additions" documents whose issue has not landed yet, each with that issue.
# Remove a name when its issue lands: the test then pins it like every other name.
PENDING: dict[str, str] = {}

# Names API.md shows that live in a sibling module rather than the package root.
ELSEWHERE = {"OpenAICompatible", "Anthropic", "ScriptedLLM", "ScriptedEnvironment"}


def _documented() -> dict[str, set[str]]:
    text = re.sub(r"#[^\n]*", "", API_MD.read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    pattern = r"from ([\w.]+) import (\([^)]*\)|[^\n]*)"
    for module, body in re.findall(pattern, text):
        names = re.findall(r"[A-Za-z_]\w*", body)
        found.setdefault(module, set()).update(names)
    return found


@pytest.mark.parametrize("name", PACKAGES)
def test_all_exports_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr!r}, which does not exist"
        assert not attr.startswith("_")


@pytest.mark.needs_shared(API_MD)
def test_api_md_names_are_exported() -> None:
    missing: list[str] = []
    for module_name, names in _documented().items():
        if module_name not in PACKAGES:
            continue
        module = importlib.import_module(module_name)
        exported = set(getattr(module, "__all__", ()))
        for n in sorted(names):
            if n in ELSEWHERE and not hasattr(module, n):
                continue
            if n not in exported and f"{module_name}.{n}" not in PENDING:
                missing.append(f"{module_name}.{n}")
    assert missing == []


def test_pending_names_are_not_yet_exported() -> None:
    """A name that has landed must leave PENDING, so the list cannot go stale."""
    landed = [
        name
        for name in PENDING
        if name.rpartition(".")[2]
        in getattr(importlib.import_module(name.rpartition(".")[0]), "__all__", ())
    ]
    assert landed == []


def test_engine_llm_and_replay_doubles() -> None:
    """The test doubles ship in the package (ScriptedLLM beside the real adapters)."""
    llm = importlib.import_module("engine.llm")
    assert {"ScriptedLLM", "ScriptedEnvironment", "DEFAULT_SCRIPT"} <= set(llm.__all__)
