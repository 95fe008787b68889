"""MCP pieces that need no server: results, approval rules, server records (SPEC §26)."""

from __future__ import annotations

import base64

import mcp_types as t
import pytest

from engine import McpServer
from engine._approval import apply_rules, check_rules, rule_for
from engine._mcp import convert_result, mcp_rules, redact_url, tool_name
from eventstore import builders as b

PNG = base64.b64encode(b"\x89PNG fake").decode()


def test_r_mcp_2_text_image_resources_and_links_become_the_output() -> None:
    result = t.CallToolResult(
        content=[
            t.TextContent(type="text", text="caption"),
            t.ImageContent(type="image", data=PNG, mime_type="image/png"),
            t.EmbeddedResource(
                type="resource",
                resource=t.TextResourceContents(uri="file:///a.txt", text="alpha"),
            ),
            t.EmbeddedResource(
                type="resource",
                resource=t.BlobResourceContents(uri="file:///b.bin", blob="AAAA", mime_type="x/y"),
            ),
            t.EmbeddedResource(
                type="resource",
                resource=t.BlobResourceContents(
                    uri="file:///c.gif", blob=PNG, mime_type="image/gif"
                ),
            ),
            t.ResourceLink(type="resource_link", uri="file:///d.md", name="d"),
        ]
    )
    text, images = convert_result(result)
    assert text.split("\n") == [
        "caption",
        "[resource: file:///a.txt]",
        "alpha",
        "[resource: file:///b.bin (x/y, 3 bytes, not shown)]",
        "[resource: file:///c.gif (image/gif), shown as an image]",
        "[resource link: file:///d.md d]",
    ]
    assert images == [f"data:image/png;base64,{PNG}", f"data:image/gif;base64,{PNG}"]


def test_r_mcp_2_structured_content_is_shown_only_without_other_content() -> None:
    alone = t.CallToolResult(content=[], structured_content={"b": 1, "a": "x"})
    assert convert_result(alone) == ('{"a": "x", "b": 1}', [])
    mirrored = t.CallToolResult(
        content=[t.TextContent(type="text", text="a is x")], structured_content={"a": "x"}
    )
    assert convert_result(mirrored) == ("a is x", [])


def test_r_mcp_3_exact_names_beat_globs_and_longer_globs_beat_shorter() -> None:
    rules = check_rules(
        {"*": "ask", "fs__*": "allow", "fs__write*": "deny", "fs__write_log": "ask"}
    )
    assert rule_for(rules, "fs__read") == "allow"
    assert rule_for(rules, "fs__write_file") == "deny"
    assert rule_for(rules, "fs__write_log") == "ask"
    assert rule_for(rules, "exec_command") == "ask"
    assert rule_for({}, "exec_command") is None


def test_r_mcp_3_rules_wrap_the_approve_callback() -> None:
    asked: list[str] = []

    def approve(call: object) -> str:
        asked.append("asked")
        return "allow"

    decide = apply_rules({"fs__*": "allow", "fs__rm": "deny", "x": "ask"}, approve)  # type: ignore[arg-type]
    assert decide is not None
    assert decide(b.tool_call("fs__cat", "{}", "c1")) == "allow"
    assert decide(b.tool_call("fs__rm", "{}", "c2")) == "forbidden"
    assert asked == []
    assert decide(b.tool_call("x", "{}", "c3")) == "allow"
    assert decide(b.tool_call("other", "{}", "c4")) == "allow"
    assert asked == ["asked", "asked"]
    # No callback: what the rules leave open is denied (R-RUN-2).
    none = apply_rules({"fs__*": "allow"}, None)
    assert none is not None
    assert none(b.tool_call("other", "{}", "c5")) == "deny"


@pytest.mark.parametrize(
    ("rules", "error"),
    [({"fs__*": "maybe"}, "not one of allow, ask, deny"), ({"a b": "allow"}, "use a tool name")],
)
def test_bad_rules_are_refused_with_their_key(rules: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        check_rules(rules)


def test_r_mcp_3_server_rules_become_tool_rules() -> None:
    servers = {
        "fs": McpServer(command=["fs-server"], approval="allow", tools={"write": "deny"}),
        "web": McpServer(url="http://127.0.0.1:9/mcp"),
    }
    assert mcp_rules(servers) == {"fs__*": "allow", "fs__write": "deny"}


def test_r_set_4_a_server_record_holds_no_secret() -> None:
    http = McpServer(
        url="https://user:pw@example.com:8443/mcp?token=abc#frag",
        headers={"Authorization": "Bearer s3cret"},
    )
    assert http.record() == {"transport": "http", "url": "https://example.com:8443/mcp"}
    stdio = McpServer(command=["srv", "--flag"], env={"API_KEY": "s3cret"}, timeout_ms=5)
    assert stdio.record() == {"transport": "stdio", "command": ["srv", "--flag"], "timeout_ms": 5}
    assert "s3cret" not in repr(McpServer.from_record(stdio.record()))
    assert redact_url("http://[::1]:8/x?y") == "http://[::1]:8/x"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, "exactly one of command"),
        ({"command": ["a"], "url": "http://h/"}, "exactly one of command"),
        ({"command": []}, "empty"),
        ({"url": "ftp://h/"}, "http"),
        ({"url": "http://h/", "env": {"A": "1"}}, "env applies"),
        ({"command": ["a"], "headers": {"A": "1"}}, "headers apply"),
        ({"command": ["a"], "approval": "sometimes"}, "not one of"),
    ],
)
def test_bad_server_definitions_are_refused(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        McpServer(**kwargs)  # type: ignore[arg-type]


def test_r_mcp_1_tool_names_are_server__tool_and_safe() -> None:
    assert tool_name("fs", "read_file") == "fs__read_file"
    assert tool_name("fs", "dir.list/all") == "fs__dir_list_all"
    assert len(tool_name("s", "x" * 100)) == 64
