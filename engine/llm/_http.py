"""The part every HTTP model adapter shares.

Owns: the adapter's identity attributes, the API key (kept out of reprs and errors), the shared
``httpx.AsyncClient`` and its lifetime, the POST request shape, and the ``stream`` template that
hands a parser to the SSE driver.  Does not: map contexts to a wire format or parse a stream
(the ``_openai`` and ``_anthropic`` adapters do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Set
from typing import Any, Self

import httpx
import msgspec

from engine._protocols import LLMOutcome, LLMRequest
from eventstore import OmniMessage

from ._errors import redact
from ._ids import ToolCallIds
from ._sse import DEFAULT_TIMEOUT, HTTP2, display_url, run_sse, single_outcome

__all__ = ["HttpProvider"]


class HttpProvider:
    """Base of the HTTP adapters; subclasses supply ``_url``, ``_key_headers``, ``body`` and
    ``_parser`` (and may add ``_protocol_headers``)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        client: httpx.AsyncClient | None,
        context_window: int | None,
        timeout: httpx.Timeout | float | None,
        extra_body: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        vision: bool,
        provider: str,
    ) -> None:
        self.model_id = model
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.context_window = context_window
        self.vision = vision
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        self._api_key = api_key
        self._headers = dict(headers or {})
        self._client = client
        self._owns_client = client is None
        self._timeout: httpx.Timeout | float | None = (
            timeout if timeout is not None else (DEFAULT_TIMEOUT if client is None else None)
        )
        self._ids = ToolCallIds()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_id!r}, "
            f"base_url={display_url(self.base_url)!r}, provider={self.provider!r})"
        )

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared client (created on first use)."""
        if self._client is None:
            self._client = httpx.AsyncClient(http2=HTTP2, timeout=DEFAULT_TIMEOUT)
        return self._client

    async def aclose(self) -> None:
        """Close the client this adapter opened (a client passed in is the caller's)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def seed_tool_call_ids(self, ids: Set[str]) -> None:
        """``SeedsToolCallIds``: the ids a resumed session's trace records are taken."""
        self._ids.take(ids)

    # ------------------------------------------------------------------ subclass hooks

    @property
    def _url(self) -> str:
        raise NotImplementedError

    def _protocol_headers(self) -> dict[str, str]:
        """Headers the protocol needs (a caller's ``headers=`` may override them)."""
        return {}

    def _key_headers(self) -> dict[str, str]:
        """Headers that carry the API key (they win over a caller's ``headers=``)."""
        raise NotImplementedError

    def body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request``."""
        raise NotImplementedError

    def _parser(self) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ the request

    def _build(self, client: httpx.AsyncClient, request: LLMRequest) -> httpx.Request:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            **self._protocol_headers(),
            **self._headers,
            **(self._key_headers() if self._api_key else {}),
        }
        return client.build_request(
            "POST",
            self._url,
            content=msgspec.json.encode(self.body(request)),
            headers=headers,
            timeout=self._timeout if self._timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )

    def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        self._ids.seed(request.messages)
        parser = self._parser()
        try:
            client = self.client
        except Exception as exc:  # e.g. an SSL setup failure
            return single_outcome(
                LLMOutcome("failed", redact(f"{self.provider}: {exc}", self._api_key))
            )
        return run_sse(
            client=client,
            build=lambda: self._build(client, request),
            signal=request.signal,
            parser=parser,
            provider=self.provider,
            secret=self._api_key,
        )
