"""``penguin serve``: sessions over HTTP with a lossless event stream (SPEC §19).

``create_app(root, *, token=None, llm_factory=None, ...)`` builds the ASGI application without
binding a port; ``serve(...)`` runs it under uvicorn.
"""

from __future__ import annotations

from ._app import create_app
from ._exceptions import ApiError, ServerError
from ._host import EnvironmentFactory, LLMFactory
from ._serve import serve

__all__ = ["ApiError", "EnvironmentFactory", "LLMFactory", "ServerError", "create_app", "serve"]
