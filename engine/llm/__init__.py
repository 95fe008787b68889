"""LLM adapters: the deterministic ``ScriptedLLM`` (with its ``ScriptedEnvironment``) and, beside
it, the real providers.

Names load on first use (PEP 562): the HTTP adapters import httpx, so commands which never talk
to a provider (validate, inspect, the scripted demo) do not pay for it at start-up.  The public
names are listed once, in ``__init__.pyi``.
"""

from __future__ import annotations

import lazy_loader

# The names live in ``__init__.pyi`` (one list); this derives ``__all__`` and the lazy look-up.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
