"""``eventstore``, ``engine``, ``replay`` and ``projections`` load a public name's module on first
use (PEP 562, issue 18): importing the package costs nothing, and the surface is the same as an
eager one."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

LAZY = ["eventstore", "engine", "replay", "projections"]

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


@pytest.mark.parametrize("name", LAZY)
def test_every_public_name_resolves_and_is_listed(name: str) -> None:
    module = importlib.import_module(name)
    for attr in module.__all__:
        value = getattr(module, attr)
        assert getattr(module, attr) is value  # one object, cached after the first look-up
        assert attr in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_a_submodule_is_reachable_as_an_attribute() -> None:
    import projections
    import replay

    assert replay.golden.__name__ == "replay.golden"
    assert projections.markers.__name__ == "projections.markers"
