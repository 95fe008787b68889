"""The API fuzzed from its own OpenAPI document with schemathesis (issue 29; R-SRV-2, R-SRV-15):
every route, valid and invalid inputs, stateful sequences that follow the document's links (a
created session's id into every session route), with the token and without: never a 5xx, and
every response matches the document (status, media type, error shape).

Bounded to about a minute; ``PENGUIN_EXTENDED=1`` runs many more examples.  The streams (SSE)
never end, so they are fuzzed by the hostile-HTTP suite instead (test_server_hostile.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from serverkit import AUTH, TOKEN, scripted

from penguin.server import create_app
from penguin.server._protocol import uvicorn_config

schemathesis = pytest.importorskip("schemathesis")
from schemathesis import checks as st_checks  # noqa: E402
from schemathesis.specs.openapi import checks as oa_checks  # noqa: E402

EXTENDED = os.environ.get("PENGUIN_EXTENDED") == "1"
EXAMPLES = 200 if EXTENDED else 12
STATEFUL_EXAMPLES = 60 if EXTENDED else 6
STREAMS = r".*/(stream|events)$"
CHECKS = [
    st_checks.not_a_server_error,
    oa_checks.status_code_conformance,
    oa_checks.content_type_conformance,
    oa_checks.response_schema_conformance,
]
TOOL_TURN = [
    {"text": "hello"},
    {"tool_call": {"name": "echo", "arguments": {"x": 1}, "result": {"output": "ok"}}},
]
TOOLS = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]


class _Thread:
    """A real ``penguin serve`` app under uvicorn in a thread of its own (schemathesis calls
    it synchronously over HTTP)."""

    def __init__(self, root: Path) -> None:
        (root / "ws").mkdir(parents=True, exist_ok=True)
        app = create_app(
            root,
            token=TOKEN,
            workspace=root / "ws",
            watch=False,
            approval="allow-all",
            llm_factory=scripted(TOOL_TURN, [{"text": "done"}], tools=TOOLS),
        )
        config = uvicorn_config(app, host="127.0.0.1", port=0, lifespan="on", log_level="critical")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        started = threading.Event()
        while not self.server.started:
            started.wait(0.01)  # waits for the bind; orders nothing
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _Thread(tmp_path_factory.mktemp("fuzz")) as url:
        yield url


@pytest.fixture(scope="module")
def api(base: str) -> Any:
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json", headers=AUTH)
    return schema.exclude(path_regex=STREAMS)


_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not EXTENDED,
    suppress_health_check=list(HealthCheck),
    database=None,
)


def test_every_route_is_fuzzed(api: Any) -> None:
    """The document names every route the app serves but the streams (R-SRV-15)."""
    ops = {(op.method.upper(), op.path) for op in (r.ok() for r in api.get_all_operations())}
    assert len(ops) >= 20 and ("POST", "/api/sessions/{id}/tasks") in ops


@pytest.mark.parametrize("auth", [True, False], ids=["token", "no-token"])
def test_fuzz_every_route_no_5xx_and_responses_match_the_document(
    api: Any, base: str, auth: bool
) -> None:
    failures: list[str] = []
    for result in api.get_all_operations():
        operation = result.ok()
        try:
            _fuzz(operation, base, auth)()
        except Exception as exc:  # collect every operation's failure, then fail once
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def _fuzz(operation: Any, base: str, auth: bool) -> Any:
    """One operation's property: any generated request, valid or not."""

    @_settings
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        headers = dict(AUTH) if auth else {"Authorization": ""}
        response = case.call(base_url=base, headers=headers, timeout=30)
        if not auth and operation.path != "/api/login":
            assert response.status_code == 401, (case.method, case.formatted_path)
        case.validate_response(response, checks=CHECKS)

    return run


def test_stateful_sequences_follow_the_documents_links(api: Any, base: str) -> None:
    machine = api.as_state_machine()

    class Stateful(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": base, "headers": dict(AUTH), "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kw: Any) -> None:
            case.validate_response(response, checks=CHECKS)

    Stateful.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=8,
            deadline=None,
            derandomize=not EXTENDED,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
    )
