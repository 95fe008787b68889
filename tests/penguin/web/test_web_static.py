"""The Web App's files without a browser (R-WEB-5, §20): served at ``/`` with the strict CSP,
every module import resolves inside the package, nothing turns strings into markup or code, and
nothing is fetched from another host."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from penguin.server import create_app
from penguin.web import CSP, STATIC_DIR

SOURCES = sorted(p for p in STATIC_DIR.rglob("*") if p.suffix in {".js", ".html", ".css"})
# Ways a string becomes markup or code in a page.
SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setTimeout\(\s*[\"'`]|srcdoc|createContextualFragment|DOMParser"
)
SVG_NS = "http://www.w3.org/2000/svg"  # a namespace name, never fetched


def test_r_web_5_no_string_ever_becomes_markup_or_code() -> None:
    assert SOURCES
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        assert not SINKS.search(text), f"{path.name}: {SINKS.search(text)}"
        assert "<script>" not in text and "style=" not in text, path.name  # CSP: no inline


def test_no_request_to_another_host() -> None:
    for path in SOURCES:
        text = path.read_text(encoding="utf-8").replace(SVG_NS, "")
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text), path.name


def test_every_module_import_and_asset_is_in_the_package() -> None:
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for ref in re.findall(
            r"""(?:from\s+|import\s+|src=|href=)["'](\.{0,2}/[^"'#]+)["']""", text
        ):
            target = (path.parent / ref) if ref.startswith(".") else STATIC_DIR / ref.lstrip("/")
            assert target.resolve().is_file(), f"{path.name} refers to missing {ref}"
            assert STATIC_DIR.resolve() in target.resolve().parents


@pytest.mark.anyio
async def test_r_web_5_served_at_root_with_the_strict_csp(tmp_path: Path) -> None:
    app = create_app(tmp_path, token="t" * 24, watch=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for url, kind in [("/", "text/html"), ("/js/app.js", "javascript"), ("/app.css", "css")]:
            r = await client.get(url)
            assert r.status_code == 200 and kind in r.headers["content-type"], url
            assert r.headers["content-security-policy"] == CSP
            assert r.headers["x-content-type-options"] == "nosniff"
        assert (await client.get("/api/sessions")).status_code == 401  # the API stays guarded
        assert (await client.get("/nope.js")).status_code == 404
    assert "default-src 'self'" in CSP and "script-src 'self';" in CSP
    assert "unsafe" not in CSP
