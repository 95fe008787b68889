"""Resume, replay, golden files, validation and trace tools: the library under ``penguin``.

Names load on first use (PEP 562): ``from replay import validate_file`` imports
``replay._validate`` alone, not the golden-file tooling (syrupy) or the trace tools, so a CLI
command pays only for what it calls (issue 18).  The public names are listed once, in
``__init__.pyi``, which mypy and IDEs read and from which the lazy look-up is derived.
"""

from __future__ import annotations

import lazy_loader

# The names live in ``__init__.pyi`` (one list); this derives ``__all__`` and the lazy look-up.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
