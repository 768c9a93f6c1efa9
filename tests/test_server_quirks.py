"""OpenAI-compatible servers that are not OpenAI: every wire quirk of the shipped test server (SPEC L2, L7, T3).

Each quirk of `mxclaw_nb.demo.quirks.QUIRKS` (what vLLM, llama.cpp, Ollama, OpenRouter, TGI, strict gateways
send) is served over real HTTP to the real `openai` client, through the provider adapter (both streamed and
plain), then through whole `Agent` turns on a real DuckDB file, and, for a few, through `%agent` in a real
IPython shell. What is asserted is what the user gets: the stored assistant message (text, tool calls with
their parsed arguments, reasoning kept apart from the answer), the request record's reported usage (or its
honest absence: NULL, the estimate only, T3), a clean end (the answer, or `turn.failed` with one paragraph,
L7), and nothing stored lost. `test_each_quirk_is_on_the_wire` checks the server really sends the quirk, so
a test here cannot pass because the quirk silently did nothing.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from IPython.utils.capture import capture_output

from mxclaw_nb.demo.quirks import PROFILES, QUIRKS
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider import OpenAIProvider, ProviderError
from mxclaw_nb.provider.quirks import NORMALISERS, Normaliser, read_report
from tests.helpers.shell import agent_shell
from tests.test_provider_faults import assert_no_dangling_calls, assert_one_paragraph, drive, stored_rows

USER = [{"role": "user", "content": "what is in a.txt and b.txt?"}]
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
ANSWER = "a.txt says alpha, b.txt says beta."
REASONING = "Both files are small; read them, then answer."
CALLS = [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
LOOKING = "Reading both files."
TEXT_USAGE, CALL_USAGE = (1_900, 7), (1_800, 20)  # T3: about what a turn's requests hold (far under: a cut)

# What the user gets where it is not the reported figures: the usage each quirk leaves (None: no report, T3).
NO_USAGE = {"usage_zeros", "usage_total_only"}
NO_USAGE_STREAMED = {"strict_params"}  # it refuses stream_options: a stream carries no usage afterwards
FAILS_STREAMED = {"error_midstream": "server"}
FAILS = {"finish_error": "server"}  # streamed or plain


def failure(quirks: frozenset[str], stream: bool) -> str | None:
    """The ProviderError kind the user gets from a server with these quirks, or None (an answer)."""
    return next((kind for q, kind in (*FAILS.items(), *(FAILS_STREAMED.items() if stream else ())) if q in quirks),
                None)


def expected_usage(quirks: frozenset[str], stream: bool, figures: tuple[int, int]) -> tuple[int, int] | None:
    if quirks & NO_USAGE or (stream and quirks & NO_USAGE_STREAMED):
        return None
    return figures


def provider(srv: TestServer, stream: bool) -> OpenAIProvider:
    return OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model", stream=stream, max_retries=0,
                          timeout=5, call_deadline=10)


def script(srv: TestServer, *, answer: bool = True) -> None:
    """Two read_file calls, then (`answer`) the final answer with reasoning."""
    srv.enqueue_tool_calls(CALLS, text=LOOKING, usage=CALL_USAGE)
    if answer:
        srv.enqueue_text(ANSWER, usage=TEXT_USAGE, reasoning=REASONING)


def parsed(message: dict) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]


def check_calls(message: dict) -> None:
    """Whole calls with string arguments that parse, and ids that are set and unique (C4 pairs results by id)."""
    assert parsed(message) == CALLS, message
    ids = [c["id"] for c in message["tool_calls"]]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids), ids
    assert all(isinstance(c["function"]["arguments"], str) for c in message["tool_calls"])


# tool calls written as text are read by their own reader (tests/test_text_calls.py): a different answer shape
TEXT_CALL_QUIRKS = {name for name in QUIRKS if name.startswith("text_calls_")}
CASES = [(frozenset({name}), name) for name in QUIRKS if name not in TEXT_CALL_QUIRKS] + [
    (quirks, f"profile:{name}") for name, quirks in PROFILES.items()]
EXTRA = [  # quirks that only bite together: no ids and no index, each call streamed in pieces or whole
    (frozenset({"tool_no_index", "tool_id_empty"}), "no index, no ids"),
    (frozenset({"tool_same_index", "tool_id_empty"}), "all at index 0, no ids"),
    (frozenset({"tool_whole", "tool_no_index", "tool_id_empty"}), "whole calls, no index, no ids"),
    (frozenset({"tool_args_object", "tool_no_index"}), "object arguments without index"),
]


# -- the server really sends each quirk ------------------------------------------------------------------------------

def _post(srv: TestServer, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(srv.base_url + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
        elif block.startswith(":"):
            out.append(block)
    return out


def _deltas(events: list[Any]) -> list[dict]:
    return [c.get("delta") or {} for e in events if isinstance(e, dict) for c in e.get("choices") or []]


def _calls(events: list[Any]) -> list[dict]:
    return [tc for d in _deltas(events) for tc in d.get("tool_calls") or []]


def _finishes(events: list[Any]) -> list[Any]:
    return [c.get("finish_reason", "absent") for e in events if isinstance(e, dict) for c in e.get("choices") or []]


def _usages(events: list[Any]) -> list[Any]:
    return [e.get("usage") for e in events if isinstance(e, dict) and "usage" in e]


def _plain_message(body: dict) -> dict:
    return body["choices"][0]["message"]


def _text_marked(mark: str) -> Any:
    def check(ev: list[Any], pl: dict) -> bool:
        streamed = "".join(d.get("content") or "" for d in _deltas(ev))
        return not _calls(ev) and "tool_calls" not in _plain_message(pl) and mark in streamed \
            and mark in _plain_message(pl)["content"]
    return check


def _cut_at_num_ctx() -> bool:
    """The prompt_truncated quirk: counted usage of a prompt over num_ctx reports num_ctx, one under it its count."""
    with TestServer(quirks={"prompt_truncated"}) as srv:
        srv.num_ctx = 50
        long = {"model": "m", "messages": [{"role": "user", "content": "word " * 400}]}
        short = {"model": "m", "messages": USER}
        return (json.loads(_post(srv, long)[1])["usage"]["prompt_tokens"] == 50
                and 0 < json.loads(_post(srv, short)[1])["usage"]["prompt_tokens"] < 50)


ON_THE_WIRE = {  # quirk -> (streamed events, plain body) -> True when the quirk is there
    "usage_every_chunk": lambda ev, pl: len(_usages(ev)) > 3,
    "usage_on_finish_chunk": lambda ev, pl: not any(isinstance(e, dict) and e.get("choices") == [] for e in ev)
    and any(isinstance(e, dict) and e.get("usage") and e["choices"][0]["finish_reason"] for e in ev),
    "usage_zeros": lambda ev, pl: _usages(ev)[-1]["prompt_tokens"] == 0 and pl["usage"]["prompt_tokens"] == 0,
    "usage_prompt_null": lambda ev, pl: _usages(ev)[-1]["prompt_tokens"] is None and pl["usage"]["prompt_tokens"]
    is None,
    "usage_total_only": lambda ev, pl: set(_usages(ev)[-1]) == {"total_tokens"} == set(pl["usage"]),
    "usage_x_groq": lambda ev, pl: not _usages(ev) and any(
        isinstance(e, dict) and e["x_groq"]["usage"]["prompt_tokens"] and e["choices"][0]["finish_reason"]
        for e in ev if isinstance(e, dict) and "x_groq" in e),
    "tool_whole": lambda ev, pl: [json.loads(tc["function"]["arguments"]) for tc in _calls(ev)] == [a for _, a in
                                                                                                 CALLS],
    "tool_same_index": lambda ev, pl: {tc["index"] for tc in _calls(ev)} == {0} and len(_calls(ev)) == 2,
    "tool_args_object": lambda ev, pl: all(isinstance(tc["function"]["arguments"], dict) for tc in _calls(ev))
    and all(isinstance(tc["function"]["arguments"], dict) for tc in _plain_message(pl)["tool_calls"]),
    "tool_id_every_chunk": lambda ev, pl: all(tc.get("id") for tc in _calls(ev)) and len(_calls(ev)) > 2,
    "tool_name_every_chunk": lambda ev, pl: all(tc["function"].get("name") for tc in _calls(ev))
    and len(_calls(ev)) > 2,
    "tool_id_empty": lambda ev, pl: all(tc.get("id", "") == "" for tc in _calls(ev))
    and all(tc["id"] == "" for tc in _plain_message(pl)["tool_calls"]),
    "tool_no_index": lambda ev, pl: _calls(ev) and all("index" not in tc for tc in _calls(ev)),
    "finish_stop_with_tools": lambda ev, pl: "stop" in _finishes(ev) and pl["choices"][0]["finish_reason"] == "stop",
    "finish_eos": lambda ev, pl: "eos" in _finishes(ev) and pl["choices"][0]["finish_reason"] == "eos",
    "finish_null": lambda ev, pl: set(_finishes(ev)) == {None} and pl["choices"][0]["finish_reason"] is None,
    "finish_missing": lambda ev, pl: set(_finishes(ev)) == {"absent"} and "finish_reason" not in pl["choices"][0],
    "finish_error": lambda ev, pl: "error" in _finishes(ev) and pl["choices"][0]["finish_reason"] == "error",
    "content_null": lambda ev, pl: any("content" in d and d["content"] is None for d in _deltas(ev)),
    "no_role": lambda ev, pl: not any("role" in d for d in _deltas(ev)),
    "no_meta": lambda ev, pl: not any("id" in e or "model" in e for e in ev if isinstance(e, dict))
    and "model" not in pl,
    "reasoning_field": lambda ev, pl: any("reasoning" in d and "reasoning_content" not in d for d in _deltas(ev)),
    "reasoning_both": lambda ev, pl: any("reasoning" in d and "reasoning_content" in d for d in _deltas(ev)),
    "think_tags": lambda ev, pl: "<think>" in "".join(d.get("content") or "" for d in _deltas(ev))
    and _plain_message(pl)["content"].startswith("<think>"),
    "content_parts": lambda ev, pl: isinstance(_plain_message(pl)["content"], list),
    "comments": lambda ev, pl: ": OPENROUTER PROCESSING" in ev and ": keep-alive" in ev,
    "error_midstream": lambda ev, pl: "error" in ev[-2] and ev[-1] == "[DONE]",
    "strict_params": lambda ev, pl: ev == [] and bool(pl.get("choices")),  # only the unknown field is refused
    # only a historical call whose arguments are not JSON is refused (test_loop shows the refusal and the cure)
    "history_args_parsed": lambda ev, pl: bool(ev) and bool(pl.get("choices")),
    # only the shapes OpenAI refuses are refused (tests/test_sent_shape.py shows the refusal and the cure)
    "openai_history_rules": lambda ev, pl: bool(ev) and bool(pl.get("choices")),
    # a prompt under num_ctx is reported whole; one over it as num_ctx tokens (tests/test_prompt_truncation.py)
    "prompt_truncated": lambda ev, pl: _cut_at_num_ctx(),
    # E1: the plain request repeats the streamed one, so the prefix cache served all of it
    "cache_timings": lambda ev, pl: pl["timings"]["cache_n"] > 0 and "prompt_tokens_details" not in pl["usage"],
    "cache_unreported": lambda ev, pl: "prompt_tokens_details" not in pl["usage"] and "timings" not in pl,
    # L2: the calls are in the text, in the format's own markers, and not in tool_calls
    **{f"text_calls_{fmt}": _text_marked(mark) for fmt, mark in (
        ("fenced", "```json"), ("bare", '{"name": "read_file", "arguments"'), ("hermes", "<tool_call>"),
        ("mistral", "[TOOL_CALLS]"), ("llama3", '"parameters": {"path": "a.txt"}'))},
}


def test_the_wire_table_covers_every_quirk() -> None:
    assert set(ON_THE_WIRE) == set(QUIRKS)
    assert all(q.seen_in for q in QUIRKS.values()), "every quirk says which servers do it"
    assert set().union(*PROFILES.values()) <= set(QUIRKS)
    with pytest.raises(ValueError, match="unknown server quirk"):
        TestServer(quirks={"tool_no_idnex"})


def test_every_server_quirk_has_a_normaliser() -> None:
    """L2: the adapter's table of normalisers mirrors the test server's table of quirks, name for name, so a quirk
    the server learns to play cannot go without the adapter saying how it reads it back."""
    assert set(NORMALISERS) == set(QUIRKS)
    assert all(n.how for n in NORMALISERS.values()), "every normaliser says what the adapter does"
    # the fixes of a point run in the table's order: a null prompt is first derived (total - completion), and a
    # derived 0 is then no count (T3), exactly as for a reported 0
    derived = read_report(SimpleNamespace(usage={"prompt_tokens": None, "completion_tokens": 5, "total_tokens": 5}))
    assert derived is not None and (derived["prompt_tokens"], derived["completion_tokens"]) == (None, 5)
    assert list(NORMALISERS).index("usage_prompt_null") < list(NORMALISERS).index("usage_zeros")
    assert read_report(SimpleNamespace(usage={"prompt_tokens": 0, "completion_tokens": 0})) is None
    with pytest.raises(ValueError, match="needs a fix"):
        Normaliser("text", "a value point without its fix")
    with pytest.raises(ValueError, match="needs a fix"):
        Normaliser("calls", "handled in code, yet given a fix", lambda value, _source: value)


@pytest.mark.parametrize("name", list(QUIRKS))
def test_each_quirk_is_on_the_wire(name: str) -> None:
    """The server sends what the quirk says (so the adapter tests below test something)."""
    with TestServer(quirks={name}) as srv:
        body = {"model": "m", "messages": USER}
        for _ in ("stream", "plain"):
            if name.startswith(("tool_", "text_calls_")) or name == "finish_stop_with_tools":
                srv.enqueue_tool_calls(CALLS, text=LOOKING, usage=CALL_USAGE)
            else:
                srv.enqueue_text(ANSWER, usage=TEXT_USAGE, reasoning=REASONING)
        status, raw = _post(srv, {**body, "stream": True, "stream_options": {"include_usage": True}})
        events = _events(raw) if status == 200 else []
        status, raw = _post(srv, body)
        plain = json.loads(raw) if status == 200 else {}
        assert ON_THE_WIRE[name](events, plain), (events, plain)


# -- the provider adapter --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize(("quirks", "name"), CASES + EXTRA, ids=[n for _, n in CASES + EXTRA])
def test_the_adapter_gives_one_shape_whatever_the_server_sends(quirks: frozenset[str], name: str,
                                                                stream: bool) -> None:
    """L2: text, reasoning apart, whole tool calls with parsed arguments, usage only when it is a count."""
    with TestServer(quirks=quirks) as srv:
        script(srv)
        p = provider(srv, stream)
        failing = failure(quirks, stream)
        if failing:
            with pytest.raises(ProviderError) as err:
                p.complete(USER, TOOLS)
            assert err.value.kind == failing
            assert_one_paragraph(err.value.message)
            return
        pieces: list[str] = []
        calls = p.complete(USER, TOOLS, on_delta=pieces.append)
        check_calls(calls.message)
        assert calls.message["content"] == LOOKING and "reasoning" not in calls.message
        assert calls.finish_reason  # a stream without one but with [DONE] is named for what it carries
        usage = expected_usage(quirks, stream, CALL_USAGE)
        assert (calls.usage and (calls.usage.prompt_tokens, calls.usage.completion_tokens)) == usage
        live: list[str] = []
        text = p.complete(USER, TOOLS, on_delta=live.append)
        assert text.message == {"role": "assistant", "content": ANSWER, "reasoning": REASONING}
        usage = expected_usage(quirks, stream, TEXT_USAGE)
        assert (text.usage and (text.usage.prompt_tokens, text.usage.completion_tokens)) == usage
        if stream and "strict_params" in quirks:  # asked again without stream_options, once, and said so
            assert ["stream_options" in b for b in srv.requests] == [True, False, False]
            assert len(calls.notes) == 1 and "stream_options" in calls.notes[0] and "est." in calls.notes[0]
            assert text.notes == []
        else:
            assert calls.notes == text.notes == []
        if stream:  # what was shown live is the answer text, nothing else (no <think> block, no reasoning)
            assert "".join(pieces) == LOOKING and "".join(live) == ANSWER, (pieces, live)


def test_a_refused_field_that_is_not_stream_options_is_not_hidden() -> None:
    """A strict server refusing something else: the retry without stream_options fails too; its 400 is shown,
    and stream_options is still asked for next time (only a retry that works turns it off)."""
    with TestServer() as srv:
        p = provider(srv, True)
        srv.enqueue_error(400, "Unrecognized request argument supplied: tools")
        srv.enqueue_error(400, "Unrecognized request argument supplied: tools")
        with pytest.raises(ProviderError) as err:
            p.complete(USER, TOOLS)
        assert err.value.kind == "bad_request" and "tools" in err.value.message
        assert ["stream_options" in b for b in srv.requests] == [True, False]
        srv.enqueue_text(ANSWER, usage=TEXT_USAGE)
        assert p.complete(USER, None).usage is not None and "stream_options" in srv.requests[-1]


def test_a_genuine_bad_request_is_asked_once() -> None:
    """A 400 that is not about a refused field (a bad value) is not retried at all."""
    with TestServer() as srv:
        srv.enqueue_error(400, "Invalid value for 'temperature': must be <= 2")
        with pytest.raises(ProviderError):
            provider(srv, True).complete(USER, None)
        assert len(srv.requests) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_a_server_that_counts_nothing_is_no_report_but_a_running_count_keeps_the_last(stream: bool) -> None:
    """T3: zeros are not a count (calibration must not anchor on 0); vLLM's running count ends on the full one."""
    with TestServer(quirks={"usage_every_chunk"}) as srv:
        srv.enqueue_text(ANSWER, usage=(321, 12))
        usage = provider(srv, stream).complete(USER, None).usage
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (321, 12)


def test_a_stream_cut_without_done_is_still_a_cut_when_finish_reason_is_never_sent() -> None:
    """finish_null accepts an answer because [DONE] came; the same answer without [DONE] is asked again (L7)."""
    from tests.test_provider_faults import SSE_HEAD, RawServer, chunk, event

    raw = RawServer()
    try:
        body = SSE_HEAD + event(chunk({"role": "assistant", "content": "partial"}))
        raw.push(lambda conn, _r: conn.sendall(body), lambda conn, _r: conn.sendall(body + event("[DONE]")))
        p = OpenAIProvider(base_url=raw.base_url, api_key="k", model="test-model", max_retries=0, timeout=5)
        pieces: list[str] = []
        c = p.complete(USER, None, on_delta=pieces.append)
        assert c.message["content"] == "partial" and c.finish_reason == "stop" and len(raw.requests) == 2
        assert "asking the provider again" in "".join(pieces)
    finally:
        raw.close()


# -- whole turns: Agent on a real DuckDB file ----------------------------------------------------------------------

TURN_CASES = [
    "tool_no_index", "tool_same_index", "tool_args_object", "tool_id_empty", "finish_null", "usage_zeros",
    "think_tags", "strict_params", "error_midstream", "finish_error", "profile:ollama", "profile:llama.cpp",
    "profile:vllm", "profile:openrouter", "profile:strict gateway", "profile:bare",
]


def _quirks(name: str) -> frozenset[str]:
    return PROFILES[name.removeprefix("profile:")] if name.startswith("profile:") else frozenset({name})


@pytest.fixture
def quirky_server() -> Iterator[TestServer]:
    with TestServer() as srv:
        yield srv


def _agent(srv: TestServer, tmp_path: Path) -> Any:
    from mxclaw_nb import Agent

    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\n", encoding="utf-8")
    (ws / "b.txt").write_text("beta\n", encoding="utf-8")
    return Agent(workspace=ws, db=str(tmp_path / "quirks.duckdb"), provider=provider(srv, True), approval="allow",
                 home=tmp_path / "home")


@pytest.mark.parametrize("name", TURN_CASES)
def test_a_whole_turn_against_a_quirky_server(name: str, quirky_server: TestServer, tmp_path: Path) -> None:
    """L1, L7, T3 end to end: the stored messages, the request records' usage, a clean end, nothing lost."""
    srv, quirks = quirky_server, _quirks(name)
    agent = _agent(srv, tmp_path)
    srv.enqueue_text("ready", usage=(1_700, 1))
    assert agent.run("warm up").text == "ready"
    before = stored_rows(agent)
    srv.quirks = quirks
    failing = failure(quirks, True)
    script(srv, answer=not failing)
    kind, text, error = drive(agent, "what is in a.txt and b.txt?")
    stored = agent.transcript()
    events = agent.store.events(agent.session_id)
    turn = int(events["turn"].max())
    records = agent.store.sql("SELECT prompt_tokens_reported, completion_tokens_reported, estimate_tokens, error "
                              "FROM requests WHERE session_id = ? AND turn = ? ORDER BY seq",
                              [agent.session_id, turn])
    assert before <= stored_rows(agent), "a stored row was lost"
    users = [m for m in stored if m["role"] == "user"]
    assert users[-1]["content"] == "what is in a.txt and b.txt?"
    if failing:
        assert kind == "failed" and error is not None and error.kind == failing
        assert_one_paragraph(text)
        failed = events[(events["type"] == "turn.failed") & (events["turn"] == turn)]
        assert len(failed) == 1 and records["error"].notna().any()
    else:
        assert kind == "answer" and text == ANSWER, text
        this_turn = stored[stored.index(users[-1]) + 1:]
        first, r1, r2, final = this_turn
        check_calls(first)
        assert first["content"] == LOOKING
        assert [r1["tool_call_id"], r2["tool_call_id"]] == [c["id"] for c in first["tool_calls"]]
        assert (r1["content"].strip(), r2["content"].strip()) == ("alpha", "beta") or (
            "alpha" in r1["content"] and "beta" in r2["content"]), (r1, r2)
        assert final["content"] == ANSWER and final.get("reasoning") == REASONING  # kept, not shown as the answer
        assert records["error"].isna().all() and records["estimate_tokens"].notna().all()
        reported = [None if pd.isna(v) else int(v) for v in records["prompt_tokens_reported"]]
        want = [expected_usage(quirks, True, CALL_USAGE), expected_usage(quirks, True, TEXT_USAGE)]
        assert reported == [w and w[0] for w in want], reported
        notes = events[events["type"] == "provider.note"]
        assert len(notes) == (1 if "strict_params" in quirks else 0)
    srv.quirks = ()
    srv.enqueue_text("next turn works")
    assert agent.run("are you there?").text == "next turn works"
    assert_no_dangling_calls(srv.requests[-1]["messages"])
    sent = json.dumps(srv.requests[-1]["messages"])
    assert "<think>" not in sent and REASONING not in sent  # reasoning is stored, never sent back


def test_usage_that_is_no_count_leaves_the_session_on_the_estimate(quirky_server: TestServer,
                                                                    tmp_path: Path) -> None:
    """T3: a server that reports zeros never switches the loop to the calibrated counter (est. only)."""
    srv = quirky_server
    srv.quirks = {"usage_zeros"}
    agent = _agent(srv, tmp_path)
    for n in range(3):
        srv.enqueue_text(f"answer {n}")
        agent.run(f"question {n}")
    records = agent.store.sql("SELECT prompt_tokens_reported, calibrated_tokens, estimate_tokens FROM requests "
                              "WHERE session_id = ?", [agent.session_id])
    assert records["prompt_tokens_reported"].isna().all() and records["calibrated_tokens"].isna().all()
    assert records["estimate_tokens"].notna().all()


# -- %agent in a real IPython shell ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _shell_on(srv: TestServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, off: str) -> Iterator[Any]:
    """A real IPython shell with %agent pointed at the quirky server (two files to read; AgentMagics.<off> False)."""
    (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("beta\n", encoding="utf-8")
    with agent_shell(monkeypatch, tmp_path) as shell:
        shell.run_line_magic("config", f"AgentMagics.base_url = '{srv.base_url}'")
        shell.run_line_magic("config", "AgentMagics.model = 'test-model'")
        shell.run_line_magic("config", f"AgentMagics.{off} = False")
        yield shell


@pytest.mark.parametrize("name", ["profile:ollama", "strict_params", "error_midstream"])
def test_the_magic_against_a_quirky_server(name: str, quirky_server: TestServer, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """What a notebook user sees: the answer (no <think> block), or one paragraph; the note is an event."""
    srv = quirky_server
    with _shell_on(srv, monkeypatch, tmp_path, "live") as shell:
        with capture_output():
            shell.run_line_magic("agent", "config approval=allow")
        srv.quirks = _quirks(name)
        script(srv, answer=name != "error_midstream")
        with capture_output() as cap:
            shell.run_line_magic("agent", "what is in a.txt and b.txt?")
        agent = shell.magics_manager.registry["AgentMagics"].get_agent()
        events = agent.store.events(agent.session_id)
        if name == "error_midstream":
            err = cap.stderr.strip()
            assert_one_paragraph(err)
            assert "overloaded" in err and "Your message is stored" in err and cap.stdout.strip() == ""
            assert (events["type"] == "turn.failed").sum() == 1
        else:
            assert cap.stdout.strip() == ANSWER and cap.stderr.strip() == "", (cap.stdout, cap.stderr)
            final = agent.transcript()[-1]
            assert final["content"] == ANSWER and final["reasoning"] == REASONING
            assert (events["type"] == "provider.note").sum() == (1 if name == "strict_params" else 0)
        srv.quirks = ()
        srv.enqueue_text("next turn works")
        with capture_output() as cap:
            shell.run_line_magic("agent", "are you there?")
        assert cap.stdout.strip() == "next turn works"


def test_the_live_log_says_what_the_adapter_did_and_hides_inline_reasoning(
        quirky_server: TestServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The printed live log: one ⓘ line for the refused stream_options, no <think> block or reasoning as text;
    `%agent events --type provider.note` shows the note."""
    srv = quirky_server
    with _shell_on(srv, monkeypatch, tmp_path, "widgets") as shell:
        srv.quirks = {"strict_params", "think_tags"}
        script(srv)
        with capture_output() as cap:
            shell.run_line_magic("agent", "what is in a.txt and b.txt?")
        out = cap.stdout
        notes = [line for line in out.splitlines() if line.strip().startswith("ⓘ")]
        assert len(notes) == 1 and "stream_options" in notes[0] and "est." in notes[0], out
        assert ANSWER in out and "<think>" not in out and REASONING not in out and "think>" not in out, out
        with capture_output():
            frame = shell.run_line_magic("agent", "events --type provider.note")
        assert len(frame) == 1 and "stream_options" in frame.iloc[0]["detail"]
