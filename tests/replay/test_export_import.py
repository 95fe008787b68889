"""Export (SPEC R-TOOL-4) and import (R-TOOL-5).

Export: Markdown and JSONL carry the whole conversation; the HTML transcript of a hostile trace
holds no script, no event handler and no reference that a browser would fetch; ``redact``
masks a secret wherever it is.  Import: validated, id checked, placed by its first timestamp,
refused when it exists; an imported session resumes like the original.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

import anyio
import pytest

from engine import allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, ToolDefinition, TraceWriter, decode, encode, read_trace
from eventstore import builders as b
from replay import (
    ImportRefused,
    export_trace,
    import_trace,
    resume_session,
    validate_session,
)

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "fixtures" / "traces"
EVIL = (
    '<script>alert(1)</script><img src="http://evil.example/x.png" onerror="alert(2)">'
    '</pre></div><a href="javascript:alert(3)">x</a><link rel=stylesheet href=//evil.example/c>'
    "<iframe src=https://evil.example></iframe>\x1b]52;c;cHduZWQ=\x07<style>@import url(http://e)</style>"
)
SECRET = "sk-live-0123456789abcdef"
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "p", "div", "pre", "img"}


def files_of(name: str) -> list[Path]:
    return sorted((TRACES / name).rglob("*.jsonl"))


def hostile_trace(tmp_path: Path) -> Path:
    """A valid trace whose every free-text field is hostile HTML (and holds a secret)."""
    sid = "session-2026-01-01-00-00-00-0badc0de"
    path = tmp_path / f"{sid}_001.jsonl"
    calls = "c1"
    records = [
        b.session_meta(
            session_id=sid,
            provider="p<script>",
            model_id="m",
            model_context_window="unknown",
            system_prompt=EVIL + SECRET,
            agent_state="/a",
            workspace="/w",
        )
    ]
    records += [
        b.user_text(EVIL + " key " + SECRET),
        b.image_url("http://evil.example/tracking.png"),
        b.image_url("data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+"),
        b.tool_list_ready([ToolDefinition(name="t", description=EVIL)]),
        b.request_begin(),
        b.thinking(EVIL),
        b.assistant_text(EVIL),
        b.tool_call("t" + EVIL, {"q": EVIL, "key": SECRET}, calls),
        b.request_end("completed"),
        b.approval_decision("allow", calls),
        b.tool_call_output(calls, EVIL + SECRET),
        b.request_begin(),
        b.assistant_text("done " + SECRET),
        b.request_end("failed", error_message=EVIL + SECRET),
        b.abort("llm request error: " + EVIL),
    ]
    with TraceWriter(path, fsync="never") as w:
        for r in records:
            w.append(r)
    return path


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def test_markdown_and_jsonl_carry_the_conversation() -> None:
    files = files_of("multi_file")
    records = read_trace(files).records
    jsonl = export_trace(files, format="jsonl")
    assert [decode(line.encode()) for line in jsonl.splitlines()] == records
    md = export_trace(files_of("denial"), format="md")
    for text in ("### User", "### Assistant", "**Tool call ", "approval: deny", "Output of "):
        assert text in md


def test_markdown_fences_outlast_backticks_in_content(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    obj = json.loads(lines[-5])  # the tool output
    obj["payload"]["output"] = "```\n# not a heading\n````"
    lines[-5] = json.dumps(obj, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    md = export_trace(path, format="md")
    assert "`````\n```\n# not a heading\n````\n`````" in md


def test_html_of_a_hostile_trace_runs_nothing_and_fetches_nothing(tmp_path: Path) -> None:
    for source in (hostile_trace(tmp_path), TRACES / "hostile" / "escapes_content_001.jsonl"):
        page = export_trace(source, format="html")
        parser = Collect()
        parser.feed(page)
        tags = {t for t, _ in parser.tags}
        assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
        assert page.count("<style>") == 1 and page.count("<title>") == 1
        for tag, attrs in parser.tags:
            for name, value in attrs:
                assert not name.startswith("on"), (tag, name)
                if name in ("src", "href"):
                    assert value is not None and value.startswith("data:image/png"), value
        csp = [
            dict(a)
            for t, a in parser.tags
            if t == "meta" and ("http-equiv", "Content-Security-Policy") in a
        ]
        assert csp and "default-src 'none'" in (csp[0]["content"] or "")
        assert "<script" not in page.lower().replace("&lt;script", "")
        assert "\x1b" not in page and "\x07" not in page
    assert "http://evil.example/tracking.png" in export_trace(
        hostile_trace(tmp_path / "2"), format="html"
    )


def test_a_data_image_is_embedded_and_svg_is_not(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path)
    png = "data:image/png;base64,iVBORw0KGgo="
    with TraceWriter(path, fsync="never") as w:
        w.append(b.user_text("look"))
        w.append(b.image_url(png))
    page = export_trace(path, format="html")
    assert f'src="{png}"' in page
    assert "svg+xml" in page and 'src="data:image/svg' not in page


@pytest.mark.parametrize("fmt", ["md", "html", "jsonl"])
def test_redact_masks_every_string(fmt: str, tmp_path: Path) -> None:
    path = hostile_trace(tmp_path)
    assert [f for f in validate_session([path]) if f.severity == "error"] == []
    assert SECRET in export_trace(path, format=fmt)  # type: ignore[arg-type]
    out = export_trace(path, format=fmt, redact=r"sk-live-[0-9a-f]+")  # type: ignore[arg-type]
    assert SECRET not in out and "[redacted]" in out
    if fmt == "jsonl":
        redacted = tmp_path / "r" / path.name
        redacted.parent.mkdir()
        redacted.write_text(out)
        assert [f for f in validate_session([redacted]) if f.severity == "error"] == []


# --------------------------------------------------------------------------- import


async def next_request(root: DataRoot, sid: str, workspace: Path) -> list[bytes]:
    llm = ScriptedLLM(
        {"responses": [[{"text": "ok"}]], "tools": [{"name": "t", "description": "d"}]}
    )
    session = await resume_session(
        root,
        sid,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        workspace=workspace,
        compaction=None,
        fsync="never",
    )
    async with session:
        async for _ in session.run([PROMPT], approve=allow_all):
            pass
    return [encode(m) for m in llm.requests[0].messages]


PROMPT = b.user_text("and now?")


def test_import_then_resume(tmp_path: Path) -> None:
    (src,) = files_of("abort_stream")
    root = DataRoot(tmp_path / "home")
    result = import_trace(src, root)
    sid = src.name.rsplit("_", 1)[0]
    assert result.session_id == sid
    first = read_trace(src).records[0].timestamp
    date = datetime.fromisoformat(first.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d")
    assert result.path == root.trace_path(sid, 1, date=date)
    assert result.path.read_bytes() == src.read_bytes()
    assert result.path.stat().st_mode & 0o777 == 0o600
    assert root.locate(sid).date == date
    # the same session placed by hand resumes to the same next request
    other = DataRoot(tmp_path / "other")
    day = other.ensure_dir(other.traces_dir() / date)
    shutil.copyfile(src, day / src.name)
    ws = tmp_path / "ws"
    ws.mkdir()

    async def both() -> tuple[list[bytes], list[bytes]]:
        return await next_request(root, sid, ws), await next_request(other, sid, ws)

    imported, placed = anyio.run(both)
    assert imported == placed
    assert len(imported) > 1


def test_import_refusals(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "home")
    (src,) = files_of("plain")
    import_trace(src, root)
    with pytest.raises(FileExistsError, match="already exists"):
        import_trace(src, root)
    with pytest.raises(FileExistsError):  # under another agent too
        import_trace(src, root, agent="other")
    with pytest.raises(ValueError, match="invalid session id"):
        import_trace(TRACES / "hostile" / "path_ids_001.jsonl", root)
    with pytest.raises(ImportRefused) as refused:
        import_trace(TRACES / "hostile" / "duplicate_keys_001.jsonl", root)
    assert any(f.rule == "V-2" for f in refused.value.findings)
    with pytest.raises(ValueError, match="no session_meta"):
        import_trace(TRACES / "hostile" / "random_bytes_001.jsonl", root)
    assert [i.session_id for i in root.sessions()] == [src.name.rsplit("_", 1)[0]]


def test_import_of_uploaded_bytes(tmp_path: Path) -> None:
    (src,) = files_of("plain")
    root = DataRoot(tmp_path / "home")
    result = import_trace(src.read_bytes(), root)
    assert result.path.read_bytes() == src.read_bytes()
    with pytest.raises(ImportRefused) as refused:
        import_trace((TRACES / "hostile" / "duplicate_keys_001.jsonl").read_bytes(), root)
    assert all(str(f.path) == "<upload>" for f in refused.value.findings)
