"""The trace store: the OmniMessage schema, its codec, the append-only writer, the tolerant
reader and the on-disk layout.  Knows nothing of the engine.

Names load on first use (PEP 562), so ``from eventstore import TraceError`` does not load
msgspec, the schema or the writer (issue 18: the CLI's start-up); the public names are listed once,
in ``__init__.pyi``, which mypy and IDEs read and from which the lazy look-up is derived.
"""

from __future__ import annotations

import lazy_loader

# The names live in ``__init__.pyi`` (one list); this derives ``__all__`` and the lazy look-up.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
