"""A tool registered on a running Agent is sent AND counted (SPEC T1-T3, N2, L3): the tool-definitions layer of the
estimate (the gauge's "tool definitions", the request record's `tool_definitions_tokens`) follows the registry, so
the estimate is of the request really sent. Real parts: the Agent on the demo model served by the shipped test
server over HTTP through the `openai` client, a real DuckDB file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mxclaw_nb import Agent
from mxclaw_nb.context.overhead import tool_definitions_text, tool_definitions_tokens
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.settings import DEMO_MODEL, Settings
from mxclaw_nb.tools import Tool, default_registry

DESCRIPTION = "Report the weather of one city for the next days: temperature, wind, rain and a short forecast. " * 8
WEATHER = Tool("weather_report", DESCRIPTION,
               {"type": "object", "properties": {"city": {"type": "string", "description": "The city's name."},
                                                 "days": {"type": "integer"}}, "required": ["city"]},
               lambda args, ctx: f"sunny in {args['city']}")


def _extra(row: Any) -> dict[str, Any]:
    return row if isinstance(row, dict) else json.loads(row or "{}")


def _sent_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def test_t1_a_tool_registered_after_construction_is_counted_in_the_estimate_it_is_sent_with(tmp_path: Path) -> None:
    with TestServer(demo=True) as srv:
        provider = OpenAIProvider(base_url=srv.base_url, api_key="demo", model=DEMO_MODEL, is_demo=True,
                                  settings=Settings())
        agent = Agent(db=str(tmp_path / "t.duckdb"), provider=provider, approval="allow", home=tmp_path / "home")
        try:
            agent.run("hello")
            first = _extra(agent.store.requests(agent.session_id).iloc[-1]["extra"])["tool_definitions_tokens"]
            assert "weather_report" not in _sent_names(srv.requests[-1])
            assert agent.policy is agent.policy  # unchanged registry: the layer is not derived again

            agent.tools.register(WEATHER)  # the user adds a tool to the running agent
            view = agent.dry_run("What is the weather in Lyon?")  # what the gauge shows before the turn
            assert view.fixed_tokens > first + len(DESCRIPTION) // 8, (first, view.fixed_tokens)
            assert "weather_report" in agent.policy.tool_definitions

            agent.run("What is the weather in Lyon?")
            body = srv.requests[-1]
            assert "weather_report" in _sent_names(body)  # the request sent carries the new schema ...
            rec = agent.store.requests(agent.session_id).iloc[-1]
            stored = _extra(rec["extra"])["tool_definitions_tokens"]
            # ... and its record counts the definitions the body carried, the same number the dry run showed
            assert stored == view.fixed_tokens == tool_definitions_tokens(tool_definitions_text(body["tools"]))
            assert int(rec["estimate_tokens"]) >= stored
        finally:
            agent.close()


def test_t1_a_replaced_registry_or_a_fresh_policy_is_followed_too(tmp_path: Path) -> None:
    from dataclasses import replace

    from mxclaw_nb.context import ContextPolicy
    from mxclaw_nb.tools import ToolRegistry

    agent = Agent(db=str(tmp_path / "r.duckdb"), approval="allow", home=tmp_path / "home")
    try:
        builtin = agent.policy.tool_definitions
        assert "read_file" in builtin
        agent.tools = ToolRegistry([WEATHER])  # a registry of the user's own (version 1, like a fresh one)
        assert agent.policy.tool_definitions == tool_definitions_text([WEATHER.schema()])
        agent.policy = replace(agent.policy, keep_recent_tokens=123)  # the layer survives a replace ...
        assert agent.policy.keep_recent_tokens == 123 and "weather_report" in agent.policy.tool_definitions
        agent.policy = ContextPolicy(50_000)  # ... and a policy made afresh gets the registry's definitions
        assert agent.policy.tool_definitions == tool_definitions_text([WEATHER.schema()])
        assert agent.dry_run("hi").fixed_tokens == tool_definitions_tokens(agent.policy.tool_definitions)
    finally:
        agent.close()


def test_t1_the_readme_figures_of_the_tool_definitions_are_the_shipped_tools():
    """The README quotes the tool definitions' size (T1); the figures are those of the shipped registry."""
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    plain, kernel = default_registry(), default_registry(namespace=lambda: {})
    text = tool_definitions_text(plain.schemas())
    found = re.search(r"(\d+) tools, about ([\d,]+) characters of JSON, (\d+) in a kernel", readme)
    assert found, "the README's tool-definitions sentence"
    tools, chars, in_kernel = int(found[1]), int(found[2].replace(",", "")), int(found[3])
    assert (tools, in_kernel) == (len(plain.names()), len(kernel.names()))
    assert abs(chars - len(text)) <= 100, (chars, len(text))
    found = re.search(r"schemas \((\d+) tools, which the C1 estimate counts as about ([\d,]+) tokens\)", readme)
    assert found, "the README's local-models sentence on tool definitions"
    assert int(found[1]) == len(plain.names())
    assert abs(int(found[2].replace(",", "")) - tool_definitions_tokens(text)) <= 50
