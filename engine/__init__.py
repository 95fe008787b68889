"""The engine: the agent loop over the trace (SPEC §5–§12).

``Session`` drives Tasks against an ``LLM`` and an ``Environment``; every record goes through
the trace writer and is folded into the projections, which are the session's only state.

Names load on first use (PEP 562), so importing one module (``engine._config``, say) does not
load the session loop, anyio and the tools; the public names are listed once, in
``__init__.pyi``, which mypy and IDEs read and from which the lazy look-up is derived.
"""

from __future__ import annotations

import lazy_loader

# The names live in ``__init__.pyi`` (one list); this derives ``__all__`` and the lazy look-up.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
