"""``eventstore``, ``engine``, ``replay``, ``projections`` and ``engine.llm`` load a public name's
module on first use (PEP 562, issue 18): importing the package costs nothing, and the surface is
the same as an eager one.  Each lists its public names once, in ``__init__.pyi`` (issue 28): the
lazy look-up and ``__all__`` are derived from it, never kept as a second list."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAZY = ["eventstore", "engine", "replay", "projections"]
STUBBED = [*LAZY, "engine.llm"]
REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import json, sys
import {name}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {layers!r})))
"""


@pytest.mark.parametrize("name", LAZY)
def test_importing_the_package_loads_none_of_its_modules(name: str) -> None:
    probe = _PROBE.format(name=name, layers=set(LAZY))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [name]


@pytest.mark.parametrize("name", STUBBED)
def test_every_public_name_resolves_and_is_listed(name: str) -> None:
    module = importlib.import_module(name)
    for attr in module.__all__:
        value = getattr(module, attr)
        assert getattr(module, attr) is value  # one object, cached after the first look-up
        assert attr in dir(module)
    with pytest.raises(AttributeError, match="nope"):
        module.nope  # noqa: B018


def test_a_submodule_is_reachable_as_an_attribute() -> None:
    import projections
    import replay

    assert replay.golden.__name__ == "replay.golden"
    assert projections.markers.__name__ == "projections.markers"


def _stub_names(name: str) -> list[str]:
    """Every name the package's ``__init__.pyi`` imports, in order, duplicates kept."""
    stub = REPO.joinpath(*name.split("."), "__init__.pyi")
    names: list[str] = []
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            names += [alias.name for alias in node.names]
            # `A as A` is the stub's re-export mark (mypy: no implicit re-export).
            assert all(alias.asname == alias.name for alias in node.names), node.lineno
    return names


@pytest.mark.parametrize("name", STUBBED)
def test_public_names_are_listed_once_in_the_stub(name: str) -> None:
    """Issue 28: one list per package.  ``__all__`` is exactly the stub's imports, no name is
    imported twice, and ``__init__.py`` spells no name of its own (no ``_LAZY`` map, no
    ``__all__`` literal, no ``TYPE_CHECKING`` copy)."""
    names = _stub_names(name)
    assert len(names) == len(set(names)), "a name imported twice in __init__.pyi"
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(names)
    init = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    assigned = [
        target.id
        for node in init.body
        if isinstance(node, ast.Assign)
        for target in ast.walk(node.targets[0])
        if isinstance(target, ast.Name)
    ]
    assert assigned == ["__getattr__", "__dir__", "__all__"]
    assert not [node for node in init.body if isinstance(node, ast.If)]
    assert [n.module for n in init.body if isinstance(n, ast.ImportFrom)] == ["__future__"]


def test_engine_llm_loads_a_provider_only_when_named() -> None:
    """The HTTP adapters (httpx) load on first use, as before the stub (issue 18)."""
    probe = "import json, sys, engine.llm; print(json.dumps('httpx' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False
