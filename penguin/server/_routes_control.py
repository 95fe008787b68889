"""Task and control routes (R-SRV-4, R-SRV-5).

Owns: tasks, abort, steer, approvals, retry-now, compact, fork, title: decoding the body,
turning input parts into messages, calling the host.  Does not: decide concurrency (the host's
synchronous claim does).
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

import anyio
from starlette.requests import Request
from starlette.responses import Response

from engine import GoalOptions
from eventstore import OmniMessage
from eventstore import builders as b
from replay import plan_rewind, restore_workspace

from . import _controls as controls
from ._bodies import (
    MAX_IMAGE_BYTES,
    ApprovalBody,
    ForkBody,
    Part,
    RewindBody,
    SteerBody,
    TaskBody,
    TextPart,
    read_body,
)
from ._context import ctx_of, json_response
from ._exceptions import ApiError

__all__ = ["abort", "approve", "compact", "fork", "retry_now", "rewind", "steer", "task", "title"]


_MAGIC: Final = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "gif": (b"GIF87a", b"GIF89a"),
    "webp": (b"RIFF",),
}


def check_image(url: str, where: str) -> None:
    """400 unless ``url`` is valid base64 of an image of the type it declares (issue 29: an
    image nobody can show must not be accepted and recorded)."""
    head, _, data = url.partition(",")
    kind = head[len("data:image/") :].split(";", 1)[0].strip().lower()
    kind = "jpeg" if kind == "jpg" else kind
    if kind not in _MAGIC:
        raise ApiError(
            400, "invalid_image", f"{where}: image/{kind} is not one of png, jpeg, gif, webp"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_image", f"{where}: the data URL is not valid base64") from None
    if not raw.startswith(_MAGIC[kind]) or (kind == "webp" and raw[8:12] != b"WEBP"):
        raise ApiError(400, "invalid_image", f"{where}: the data is not a {kind} image")


def to_messages(parts: list[Part]) -> list[OmniMessage]:
    out: list[OmniMessage] = []
    for i, part in enumerate(parts):
        if hasattr(part, "text"):
            out.append(b.user_text(part.text))
            continue
        url = part.data_url
        if not url.startswith("data:image/") or ";base64," not in url[:100]:
            raise ApiError(
                400, "invalid_body", f"input[{i}].data_url must be a data:image/…;base64 URL"
            )
        if len(url) > MAX_IMAGE_BYTES * 4 // 3 + 100:
            raise ApiError(413, "image_too_large", f"input[{i}] is larger than 20 MiB")
        check_image(url, f"input[{i}]")
        out.append(b.image_url(url))
    if not out:
        raise ApiError(400, "invalid_body", "input must hold at least one part (at `$.input`)")
    return out


async def task(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    body = await read_body(request, TaskBody, limit=ctx.body_limit)
    msgs = to_messages(body.input)
    goal = None
    if body.goal is not None:
        # R-GOAL-1: refused before anything is written (the run would raise it in its task).
        if body.goal.budget is not None and body.goal.budget <= 0:
            raise ApiError(400, "invalid_body", "goal.budget must be > 0 (at `$.goal.budget`)")
        if not any(isinstance(p, TextPart) and p.text.strip() for p in body.input):
            raise ApiError(400, "invalid_body", "a goal needs an objective: no text in `$.input`")
        goal = GoalOptions(budget=body.goal.budget)
    task_id = await ctx.host.start_task(h, msgs, thinking_level=body.thinking_level, goal=goal)
    return json_response({"task_id": task_id}, 202)


async def abort(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    if controls.abort(h):
        return json_response({"aborted": True}, 202)
    return Response(status_code=204)


async def steer(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    body = await read_body(request, SteerBody, limit=ctx.body_limit)
    controls.steer(h, to_messages(body.input), ctx.host.announce)
    return json_response({"queued": True}, 202)


async def approve(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    body = await read_body(request, ApprovalBody, limit=ctx.body_limit)
    controls.decide(h, request.path_params["tool_call_id"], body.decision, ctx.host.announce)
    return Response(status_code=204)


async def retry_now(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    await _no_body(request, ctx.body_limit)
    return json_response({"skipped": controls.retry_now(h)})


async def compact(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    await _no_body(request, ctx.body_limit)
    await ctx.host.start_compaction(h)
    return json_response({"compacting": True}, 202)


async def fork(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    body = await read_body(request, ForkBody, limit=ctx.body_limit)
    new_id = await ctx.host.fork(h, (body.at.file, body.at.ordinal))  # announces it
    await ctx.refresh_index(max_age=0)
    child = await ctx.host.get(new_id)
    indexed = ctx.index.session_row(new_id)
    return json_response(ctx.row(child, indexed), 201)


async def rewind(request: Request) -> Response:
    """R-SNAP-2: ``dry_run`` answers the plan (200); otherwise the workspace is restored and the
    conversation forked (201, the fork's row under ``session``)."""
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    body = await read_body(request, RewindBody, limit=ctx.body_limit)
    if (body.task is None) == (body.at is None):
        raise ApiError(400, "bad_rewind_point", "give either task or at")
    to: tuple[int, int] | int
    if body.at is not None:
        to = (body.at.file, body.at.ordinal)
    else:
        assert body.task is not None
        to = body.task
    root = ctx.host.root
    try:
        plan = await anyio.to_thread.run_sync(lambda: plan_rewind(root, h.id, to=to))
    except (ValueError, FileNotFoundError) as exc:
        raise ApiError(400, "bad_rewind_point", str(exc)) from None
    shown = {
        "task": plan.task,
        "at": {"file": plan.at[0], "ordinal": plan.at[1]},
        "snapshot": plan.snapshot,
        "create": plan.create,
        "change": plan.change,
        "delete": plan.delete,
        "outside": plan.outside,
    }
    if body.dry_run:
        return json_response({"plan": shown})
    if plan.outside and not body.force:
        raise ApiError(
            409,
            "rewind_refused",
            f"{len(plan.outside)} file(s) changed outside the session since its last snapshot; "
            "send force to overwrite them",
        )
    new_id = await ctx.host.fork(h, plan.at)  # the conversation first, as rewind_session does
    await anyio.to_thread.run_sync(lambda: restore_workspace(root, plan))
    ctx.session_created_event(new_id, "rewind")
    await ctx.refresh_index(max_age=0)
    child = await ctx.host.get(new_id)
    return json_response(
        {"plan": shown, "session": ctx.row(child, ctx.index.session_row(new_id))}, 201
    )


async def title(request: Request) -> Response:
    ctx = ctx_of(request)
    h = await ctx.host.get(request.path_params["id"])
    await _no_body(request, ctx.body_limit)
    return json_response({"title": await ctx.host.title(h)})


async def _no_body(request: Request, limit: int) -> None:
    """Routes without a body still refuse a non-JSON one (R-SRV-2)."""
    from ._bodies import read_raw

    ctype = request.headers.get("content-type")
    raw = await read_raw(request, limit=limit)
    if raw.strip() and (ctype is None or ctype.split(";")[0].strip().lower() != "application/json"):
        raise ApiError(415, "unsupported_media_type", "write bodies must be application/json")
