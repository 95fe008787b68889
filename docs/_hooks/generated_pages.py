"""MkDocs hook: pages generated at build time, so they cannot drift from their source.

Owns: the HTTP API reference (rendered from the OpenAPI document that ``penguin serve``
itself serves at ``/api/openapi.json``), ``openapi.json`` beside it, and the changelog page
(``CHANGELOG.md`` at the repository root).  Does not: write into ``docs/``; everything is
generated in memory for the build.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def openapi_document() -> dict[str, Any]:
    """The document exactly as a running server answers ``GET /api/openapi.json``."""
    import anyio
    import httpx
    from penguin.server import create_app

    async def fetch(home: str) -> dict[str, Any]:
        app = create_app(home, token="docs", watch=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://docs") as client:
            response = await client.get(
                "/api/openapi.json", headers={"Authorization": "Bearer docs"}
            )
            response.raise_for_status()
            doc: dict[str, Any] = response.json()
            return doc

    with tempfile.TemporaryDirectory() as home:
        return anyio.run(fetch, home)


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else ""


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = _schema_name(prop)
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        return " or ".join(_type_of(p) for p in prop["anyOf"])
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"array of {_type_of(prop.get('items', {}))}"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind)


def render_api(doc: dict[str, Any]) -> str:
    """The OpenAPI document as a readable page: one section per route, then the bodies."""
    lines = [
        "# HTTP API reference",
        "",
        "<!-- generated at build time from GET /api/openapi.json; do not edit -->",
        "",
        "This page is generated from the OpenAPI document that `penguin serve` serves",
        f"at `/api/openapi.json` (OpenAPI {doc['openapi']}).",
        "The raw document is [openapi.json](openapi.json).",
        "",
        "Every route needs the server's token: `Authorization: Bearer <token>`,",
        "or a browser login (see [Security](server-security.md)).",
        "Every error is `{\"error\": {\"code\": \"...\", \"message\": \"...\"}}`.",
        "See [The HTTP server](server.md) for how to start and use the server.",
        "",
        "| Method | Path | What it does |",
        "|---|---|---|",
    ]
    ops = [
        (path, method, op)
        for path, methods in doc["paths"].items()
        for method, op in methods.items()
    ]
    for path, method, op in ops:
        anchor = f"{method}-{path}".lower().strip("/")
        anchor = "".join(c if c.isalnum() else "-" for c in anchor)
        lines.append(f"| `{method.upper()}` | [`{path}`](#{anchor}) | {op.get('summary', '')} |")
    lines.append("")
    for path, method, op in ops:
        anchor = f"{method}-{path}".lower().strip("/")
        anchor = "".join(c if c.isalnum() else "-" for c in anchor)
        lines += [f"## `{method.upper()} {path}` {{#{anchor}}}", "", op.get("summary", ""), ""]
        params = op.get("parameters", [])
        if params:
            names = ", ".join(f"`{p['name']}`" for p in params)
            lines += [f"Path parameters: {names}.", ""]
        body = op.get("requestBody")
        if body is not None:
            schema = body["content"]["application/json"]["schema"]
            name = _schema_name(schema)
            lines += [f"Request body: [{name}](#{name.lower()}) (JSON).", ""]
        statuses = []
        for status, resp in op["responses"].items():
            kinds = ", ".join(resp.get("content", {}))
            statuses.append(f"`{status}`" + (f" ({kinds})" if kinds else ""))
        lines += ["Responses: " + ", ".join(statuses) + ".", ""]
    lines += ["## Bodies", ""]
    for name, schema in sorted(doc["components"]["schemas"].items()):
        lines += [f"### {name} {{#{name.lower()}}}", ""]
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            lines += ["| Field | Type | Required |", "|---|---|---|"]
            for field, prop in props.items():
                needed = "yes" if field in required else "no"
                lines.append(f"| `{field}` | {_type_of(prop)} | {needed} |")
            lines.append("")
        elif "enum" in schema:
            lines += ["One of: " + _type_of(schema) + ".", ""]
        else:
            lines += ["```json", json.dumps(schema, indent=2), "```", ""]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    doc = openapi_document()
    generated = {
        "http-api.md": render_api(doc),
        "openapi.json": json.dumps(doc, indent=2) + "\n",
        "changelog.md": (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    return files
