"""OpenAIProvider over real HTTP with the real openai client (SPEC L2, C9, T3), and the demo model.

Every test talks to mxclaw_nb.demo.server on 127.0.0.1; nothing is mocked between the provider and
the socket. The demo turn is driven by a tiny hand-written tool runner here (the real loop and tools
are tested elsewhere), on a fresh copy of the sample workspace, with real subprocesses.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxclaw_nb.connect import demo_provider, resolve_provider
from mxclaw_nb.demo.model import DEMO_MODEL, MAX_TOOL_CALLS, copy_demo_workspace, next_reply
from mxclaw_nb.demo.server import TestServer, count_prompt_tokens
from mxclaw_nb.provider import (
    DEFAULT_CONTEXT_WINDOW,
    OpenAIProvider,
    ProviderError,
    context_window_for,
    is_prompt_too_long,
)

USER = [{"role": "user", "content": "hi"}]


def provider(srv: TestServer, **kw) -> OpenAIProvider:
    kw.setdefault("api_key", "k")
    return OpenAIProvider(base_url=srv.base_url, model="test-model", **kw)


@pytest.mark.parametrize("stream", [True, False])
def test_text_reply_with_usage(test_server, stream):
    """L2: text answer, provider-reported usage, finish reason, model and latency."""
    test_server.enqueue_text("Hello 你好, here is a longer answer in several chunks.", usage=(120, 9))
    pieces: list[str] = []
    c = provider(test_server, stream=stream).complete(USER, None, on_delta=pieces.append)
    assert c.message == {"role": "assistant", "content": "Hello 你好, here is a longer answer in several chunks."}
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (120, 9)
    assert c.finish_reason == "stop" and c.model == "test-model" and c.latency_ms > 0
    if stream:
        assert len(pieces) >= 2 and "".join(pieces) == c.message["content"]
        assert test_server.requests[0]["stream_options"] == {"include_usage": True}
    else:
        assert pieces == [] and "stream" not in test_server.requests[0]


@pytest.mark.parametrize("stream", [True, False])
def test_tool_calls_are_assembled_and_malformed_json_passes_raw(test_server, stream):
    """Streamed tool-call deltas become whole calls; invalid argument JSON is kept verbatim for the loop."""
    ids = test_server.enqueue_tool_calls([("read_file", {"path": "a.py"}), ("grep", {"pattern": "x", "path": "."})],
                                         text="Looking around.")
    bad = test_server.enqueue_raw_tool_call("edit_file", '{"path": bro')
    p = provider(test_server, stream=stream)
    c = p.complete(USER, [{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
    calls = c.message["tool_calls"]
    assert [tc["id"] for tc in calls] == ids and c.finish_reason == "tool_calls"
    assert [(tc["function"]["name"], json.loads(tc["function"]["arguments"])) for tc in calls] == [
        ("read_file", {"path": "a.py"}), ("grep", {"pattern": "x", "path": "."})]
    assert c.message["content"] == "Looking around."
    assert test_server.requests[0]["tools"][0]["function"]["name"] == "read_file"
    c = p.complete(USER, None)
    assert c.message["tool_calls"] == [{"id": bad, "type": "function",
                                        "function": {"name": "edit_file", "arguments": '{"path": bro'}}]
    assert c.message["content"] is None and "tools" not in test_server.requests[1]


def test_reasoning_is_returned_but_stored_only_keys_are_never_sent(test_server):
    """L1: reasoning fields come back as message['reasoning']; reasoning/is_error/attachments are not sent."""
    test_server.enqueue_text("answer", reasoning="thinking about it")
    test_server.enqueue_text("answer", reasoning="more thoughts")
    sent = [{"role": "user", "content": "q", "attachments": ["a.png"]},
            {"role": "assistant", "content": "a", "reasoning": "old thoughts"},
            {"role": "tool", "tool_call_id": "c", "content": "Tool failed: x", "is_error": True}]
    for stream in (True, False):
        c = provider(test_server, stream=stream).complete(sent, None)
        assert c.message["reasoning"] in ("thinking about it", "more thoughts")
    for body in test_server.requests:
        assert body["messages"] == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                    {"role": "tool", "tool_call_id": "c", "content": "Tool failed: x"}]
    assert sent[1]["reasoning"] == "old thoughts"  # the caller's messages are not modified


def test_servers_without_usage_give_none_and_rejected_stream_options_are_dropped():
    """T3: no usage reported -> Completion.usage is None; a server refusing stream_options still streams."""
    with TestServer(report_usage=False) as srv:
        assert provider(srv).complete(USER, None).usage is None
        assert provider(srv, stream=False).complete(USER, None).usage is None
    with TestServer(accept_stream_options=False) as srv:
        p = provider(srv)
        srv.enqueue_text("first")
        srv.enqueue_text("second")
        assert p.complete(USER, None).message["content"] == "first"
        assert p.complete(USER, None).message["content"] == "second"
        assert ["stream_options" in b for b in srv.requests] == [True, False, False]


def test_usage_scale_reports_scaled_counts(test_server):
    """T2/T3: with usage_scale 1.3 the reported prompt tokens are 1.3x the server's count."""
    test_server.usage_counter = "estimate"
    messages = [{"role": "user", "content": "x" * 400}]
    base = provider(test_server).complete(messages, None).usage.prompt_tokens
    test_server.usage_scale = 1.3
    assert base == count_prompt_tokens(messages, "estimate")[0] == 100
    assert provider(test_server).complete(messages, None).usage.prompt_tokens == 130


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "prompt too long: 40000 tokens > 32768", "Too many tokens in request", "the request exceeds the available "
    "context size, try increasing it"])
def test_prompt_too_long_is_classified_and_not_retried(test_server, message):
    """C9: a 400 whose text says the prompt is over the window -> kind 'prompt_too_long', one request only."""
    test_server.enqueue_error(400, message)
    with pytest.raises(ProviderError) as err:
        provider(test_server).complete(USER, None)
    e = err.value
    assert (e.kind, e.status_code, e.base_url) == ("prompt_too_long", 400, test_server.base_url)
    assert message[:30] in e.message and test_server.base_url in e.message
    assert len(test_server.requests) == 1
    assert is_prompt_too_long(message) and not is_prompt_too_long("Invalid value for 'temperature'")


# C9: the same condition as other OpenAI-compatible servers word it (each message as the server sends it).
OTHER_SERVERS_TOO_LONG = [
    # vLLM V1 engine (the input processor, before the OpenAI layer's own check)
    "The decoder prompt (length 5951) is longer than the maximum model length of 4096. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    "Context size has been exceeded.",  # llama.cpp server, when the slot runs out of context
    "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).",  # Gemini
    "This model's maximum prompt length is 131072 but the request contains 200000 tokens.",  # xAI
    "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 5000 `inputs` tokens "
    "and 100 `max_new_tokens`",  # Hugging Face TGI
    "Input is too long for requested model.",  # Bedrock
    "Prompt has 5,958,968 tokens, but the configured context size is 256,000 tokens",
    "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity Too Large"
    "</h1></center><hr><center>nginx</center></body></html>",  # a proxy's body-size bound (nginx)
]


@pytest.mark.parametrize("message", OTHER_SERVERS_TOO_LONG)
def test_other_servers_prompt_too_long_wordings_are_classified(test_server, message):
    """C9: vLLM's, llama.cpp's, Gemini's, TGI's ... words for an over-long prompt drive the one retry too."""
    test_server.enqueue_error(400, message)
    with pytest.raises(ProviderError) as err:
        provider(test_server).complete(USER, None)
    assert err.value.kind == "prompt_too_long"


@pytest.mark.parametrize(("message", "code"), [
    ("Please reduce the length of the messages or completion.", "context_length_exceeded"),  # Groq
    ("request (5000 tokens) does not fit", "exceed_context_size_error"),  # llama.cpp's error type
])
def test_prompt_too_long_is_told_by_the_error_code_too(test_server, message, code):
    """C9: a server whose message alone does not say it (Groq) still says it in the error's `code`."""
    test_server.enqueue_error(400, message, code=code)
    with pytest.raises(ProviderError) as err:
        provider(test_server).complete(USER, None)
    assert err.value.kind == "prompt_too_long" and message[:20] in err.value.message


@pytest.mark.parametrize("message", [
    "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.",
    "max_tokens is too large: 5000. This model supports at most 4096 completion tokens",
    "Invalid value for 'temperature': expected a number <= 2",
])
def test_other_errors_are_not_prompt_too_long(message):
    """C9: the classifier stays narrow: a rate limit or a bad completion bound is not a context overflow."""
    assert not is_prompt_too_long(message)


def test_rate_limit_and_server_errors_are_retried_with_backoff(test_server):
    """429 and 5xx are retried by the client (Retry-After honoured); the call then succeeds."""
    test_server.enqueue_error(429, "rate limited")
    test_server.enqueue_error(500, "boom")
    test_server.enqueue_text("finally")
    c = provider(test_server, max_retries=2).complete(USER, None)
    assert c.message["content"] == "finally" and len(test_server.requests) == 3


@pytest.mark.parametrize("status, kind", [(429, "rate_limit"), (500, "server"), (503, "server")])
def test_persistent_errors_fail_with_a_kind_after_the_retries(test_server, status, kind):
    for _ in range(3):
        test_server.enqueue_error(status, "still failing")
    with pytest.raises(ProviderError) as err:
        provider(test_server, max_retries=1).complete(USER, None)
    assert err.value.kind == kind and err.value.status_code == status
    assert "still failing" in err.value.message and "1 retries" in err.value.message
    assert len(test_server.requests) == 2


def test_bad_request_is_not_retried(test_server):
    test_server.enqueue_error(400, "Invalid value for 'tools[0].type'")
    with pytest.raises(ProviderError) as err:
        provider(test_server).complete(USER, None)
    assert err.value.kind == "bad_request" and len(test_server.requests) == 1


@pytest.mark.parametrize("stream", [True, False])
def test_slow_response_times_out(test_server, stream):
    test_server.enqueue_delay(3.0)
    t0 = time.perf_counter()
    with pytest.raises(ProviderError) as err:
        provider(test_server, timeout=0.3, max_retries=0, stream=stream).complete(USER, None)
    assert err.value.kind == "timeout" and "0.3 s" in err.value.message
    assert time.perf_counter() - t0 < 3.0  # it gave up: the answer was due only after the server's 3 s delay


def test_wrong_key_gives_auth_error_with_clear_message():
    """Wrong key: kind 'auth', the message names the endpoint, the status and what to set."""
    with TestServer(api_key="right-key") as srv:
        with pytest.raises(ProviderError) as err:
            provider(srv, api_key="wrong-key").complete(USER, None)
        e = err.value
        assert e.kind == "auth" and e.status_code == 401
        assert e.message.startswith(f"Provider at {srv.base_url} refused the key (401)")
        assert "OPENAI_API_KEY" in e.message and "right-key" not in e.message
        assert provider(srv, api_key="right-key").complete(USER, None).message["content"] == "ok"


def test_unknown_model_and_server_down():
    with TestServer(known_models=["llama3.1:8b"]) as srv:
        with pytest.raises(ProviderError) as err:
            provider(srv).complete(USER, None)
        assert err.value.kind == "not_found" and "test-model" in err.value.message
        auto = OpenAIProvider(base_url=srv.base_url, api_key=None, model="")
        assert auto.label == f"(server default model) @ {srv.base_url}"
        assert auto.complete(USER, None).model == "llama3.1:8b" and auto.model == "llama3.1:8b"
        assert auto.label == f"llama3.1:8b @ {srv.base_url}"
        url = srv.base_url
    with socket.socket() as s:  # nothing listens on the old port any more
        assert s.connect_ex(("127.0.0.1", int(url.split(":")[2].split("/")[0]))) != 0
    with pytest.raises(ProviderError) as err:
        OpenAIProvider(base_url=url, api_key="k", model="m", max_retries=0).complete(USER, None)
    assert err.value.kind == "connection" and url in err.value.message


def test_resolve_provider_from_environment():
    """L2: OPENAI_API_KEY / OPENAI_BASE_URL / MXCLAW_MODEL; nothing configured -> the labelled demo."""
    demo = resolve_provider(env={})
    assert demo.is_demo and demo.label == "demo model (offline)" and demo.model == DEMO_MODEL
    assert demo.base_url.startswith("http://127.0.0.1:")
    assert resolve_provider(env={}).base_url == demo.base_url  # one demo server per process
    local = resolve_provider(env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "MXCLAW_MODEL": "qwen2.5"})
    assert (local.is_demo, local.base_url, local.model) == (False, "http://127.0.0.1:9/v1", "qwen2.5")
    assert local.label == "qwen2.5 @ http://127.0.0.1:9/v1"
    cloud = resolve_provider(env={"OPENAI_API_KEY": "sk-test"})
    assert (cloud.base_url, cloud.model) == ("https://api.openai.com/v1", "gpt-4o-mini")
    assert resolve_provider(model="gpt-4o", env={"OPENAI_API_KEY": "sk-test"}).model == "gpt-4o"
    assert resolve_provider(env={"OPENAI_API_KEY": "sk-test", "MXCLAW_MODEL": DEMO_MODEL}).is_demo


@pytest.mark.parametrize("model, window", [
    ("gpt-4o", 128_000), ("gpt-4o-mini-2024-07-18", 128_000), ("openai/gpt-4.1", 1_047_576),
    ("o4-mini", 200_000), ("llama3.1:8b", 131_072), ("qwen2.5-coder:7b", 32_768), ("mxclaw-demo", 16_000),
    ("some-new-model", DEFAULT_CONTEXT_WINDOW), ("", DEFAULT_CONTEXT_WINDOW)])
def test_context_window_table(model, window):
    assert context_window_for(model, env={}) == window


def test_context_window_env_override():
    assert context_window_for("gpt-4o", env={"MXCLAW_CONTEXT_WINDOW": "8_192"}) == 8192
    with pytest.raises(ValueError, match="MXCLAW_CONTEXT_WINDOW must be a positive"):
        context_window_for("gpt-4o", env={"MXCLAW_CONTEXT_WINDOW": "lots"})


# -- the demo model, driven by a tiny hand-written tool runner -------------------------------------------

def run_tool(ws: Path, name: str, args: dict, artifacts: dict[str, str]) -> str:
    """Just enough of the tools for the demo's calls; outputs over 51,200 bytes become artifacts (A1)."""
    if name == "list_dir":
        return "\n".join(sorted(p.name for p in (ws / args["path"]).iterdir()))
    if name == "read_file":
        path = ws / args["path"]
        return path.read_text(encoding="utf-8") if path.is_file() else f"Tool failed: no such file: '{args['path']}'"
    if name == "grep":
        pat = re.compile(args["pattern"])
        root = ws / args["path"]
        return "\n".join(f"{p.relative_to(ws)}:{i}: {line}" for p in sorted(root.rglob("*.py"))
                         for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line))
    if name in ("write_file", "edit_file"):
        path = ws / args["path"]
        if name == "write_file":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(args["content"], encoding="utf-8")
            return f"Created {args['path']}"
        text = path.read_text(encoding="utf-8")
        if text.count(args["old_string"]) != 1:
            return "Tool failed: old_string must occur exactly once"
        path.write_text(text.replace(args["old_string"], args["new_string"]), encoding="utf-8")
        return f"Edited {args['path']}"
    if name == "bash":
        command = re.sub(r"^python3? ", lambda _: f"{sys.executable} ", args["command"])  # whatever its name
        proc = subprocess.run(command, shell=True, cwd=ws, capture_output=True, text=True, timeout=60)
        out = f"exit code {proc.returncode}\n[stdout]\n{proc.stdout}\n[stderr]\n{proc.stderr}"
        out = out if proc.returncode == 0 else f"Tool failed: {out}"
        if len(out.encode()) > 51_200:
            aid = f"artifact-{len(artifacts) + 1}"
            artifacts[aid] = out
            out = f"{out[:6000]}\n[{len(out.encode()) - 9000} bytes omitted from context]\n{out[-3000:]}\n" \
                  f"[artifact {aid}] ... Use read_artifact for byte, line, or search access."
        return out
    if name == "read_artifact":
        text = artifacts[args["artifact_id"]]
        return "\n".join(line for line in text.splitlines() if args.get("search", "") in line)
    return f"Invalid tool name {name!r}"


def play_turn(p: OpenAIProvider, ws: Path, messages: list[dict], prompt: str, artifacts: dict) -> list[tuple]:
    """A minimal loop: call the model, run its tool calls, until it answers; returns (name, args, result)."""
    messages.append({"role": "user", "content": prompt})
    trace = []
    for _ in range(MAX_TOOL_CALLS + 2):
        c = p.complete(messages, None)
        messages.append(c.message)
        assert "[demo model]" in (c.message["content"] or "")
        if not c.message.get("tool_calls"):
            return trace
        for tc in c.message["tool_calls"]:
            args = json.loads(tc["function"]["arguments"])
            result = run_tool(ws, tc["function"]["name"], args, artifacts)
            trace.append((tc["function"]["name"], args, result))
            messages.append({"role": "tool", "tool_call_id": tc["id"], "content": result})
    raise AssertionError("the demo model did not finish its turn")


def test_demo_model_plays_a_full_fix_turn_on_the_sample_workspace(tmp_path):
    """L1/L3: list, read, grep, large output -> artifact, failing test, edit, re-run passes, answer."""
    ws = copy_demo_workspace(tmp_path / "ws")
    p = demo_provider()
    messages = [{"role": "system", "content": "You are a coding agent."}]
    artifacts: dict[str, str] = {}
    trace = play_turn(p, ws, messages, "The unit tests fail. Fix them.", artifacts)
    names = [t[0] for t in trace]
    assert names[:3] == ["list_dir", "read_file", "grep"] and "edit_file" in names
    assert len(trace) <= MAX_TOOL_CALLS
    assert artifacts and "[artifact artifact-1]" in trace[3][2]  # the build log was over 51,200 bytes
    failing = [t for t in trace if t[0] == "bash" and t[2].startswith("Tool failed")]
    assert failing and "AssertionError: 101.75 != 155.75" in failing[0][2]
    assert trace[-1][0] == "bash" and trace[-1][2].startswith("exit code 0")
    assert "for item in items:" in (ws / "inventory/stock.py").read_text(encoding="utf-8")
    answer = messages[-1]["content"]
    assert answer.startswith("[demo model] Fixed.") and "artifact-1" in answer
    # a second turn on another prompt explores differently and reads the stored artifact back
    trace2 = play_turn(p, ws, messages, "Look at the build log: what was the slowest step?", artifacts)
    assert [t[0] for t in trace2][:2] == ["bash", "read_artifact"]
    assert "2431 ms" in messages[-1]["content"] and "inventory.report" in messages[-1]["content"]


def test_demo_usage_is_an_exact_token_count_when_available(demo_server):
    """T2/T3: the demo reports prompt_tokens from the o200k_base count of the request (when installed)."""
    messages = [{"role": "user", "content": "review the code"}]
    c = OpenAIProvider(base_url=demo_server.base_url, api_key=None, model=DEMO_MODEL).complete(messages, None)
    counted, counter = count_prompt_tokens(demo_server.requests[0]["messages"])
    assert c.usage.prompt_tokens == counted
    if counter == "o200k_base":
        assert counted == 3 + 4 + 3  # framing + "review the code" (3 tokens in o200k_base)


def _call(name: str, args: dict, cid: str) -> dict:
    return {"role": "assistant", "content": "[demo model] step", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_demo_stops_on_unexpected_tool_failure_and_after_the_call_limit():
    """Robustness: an error result ends the turn with an answer; never more than MAX_TOOL_CALLS calls."""
    msgs = [{"role": "user", "content": "fix the failing test"}, _call("list_dir", {"path": "."}, "c1"),
            {"role": "tool", "tool_call_id": "c1", "content": "Permission denied: path escapes the workspace"}]
    reply = next_reply(msgs)
    assert not reply.tool_calls and reply.text.startswith("[demo model]") and "Permission denied" in reply.text
    msgs = [{"role": "user", "content": "fix the failing test"}]
    for i in range(MAX_TOOL_CALLS):
        msgs += [_call("list_dir", {"path": f"x{i}"}, f"c{i}"),
                 {"role": "tool", "tool_call_id": f"c{i}", "content": ""}]
    reply = next_reply(msgs)
    assert not reply.tool_calls and "limit" in reply.text


def test_demo_continues_after_compaction_from_what_is_still_visible():
    """C5/C6: with old results as placeholders, or the user goal only in a summary, the next step follows
    the most recent visible call."""
    summary = ("[compressed conversation context]\nOlder transcript messages were summarized.\nGoals:\n"
               "- The unit tests fail. Fix them.\nFiles and tools touched:\n- None recorded\n")
    edit = {"path": "inventory/stock.py", "old_string": "    for item in items[1:]:\n",
            "new_string": "    for item in items:\n"}
    msgs = [{"role": "system", "content": "sys"}, {"role": "system", "content": summary},
            _call("edit_file", edit, "c9"), {"role": "tool", "tool_call_id": "c9", "content": "Edited"}]
    reply = next_reply(msgs)
    assert reply.tool_calls[0].name == "write_file"  # the regression tests come after the edit
    placeholder = "[old tool output compacted: 1207 characters]"
    msgs = [{"role": "user", "content": "fix it"}, _call("list_dir", {"path": "."}, "a"),
            {"role": "tool", "tool_call_id": "a", "content": placeholder},
            _call("read_file", {"path": "inventory/stock.py"}, "b"),
            {"role": "tool", "tool_call_id": "b", "content": placeholder}]
    assert next_reply(msgs).tool_calls[0].name == "grep"


@pytest.mark.parametrize("prompt, first", [
    ("fix the bug", ("list_dir", {"path": "."})), ("show me the build log", ("bash", None)),
    ("explain the project structure", ("list_dir", {"path": "inventory"})),
    ("review the code", ("read_file", {"path": "tests/test_stock.py"}))])
def test_demo_prompts_lead_to_different_explorations(prompt, first):
    call = next_reply([{"role": "user", "content": prompt}]).tool_calls[0]
    assert call.name == first[0] and (first[1] is None or json.loads(call.arguments) == first[1])


def test_copy_demo_workspace_gives_a_fresh_writable_project(tmp_path):
    ws = copy_demo_workspace(tmp_path / "a")
    for rel in ("AGENTS.md", ".mx-claw/AGENTS.md", ".mx-claw/memory.md", "tools/gen_log.py",
                ".mx-claw/skills/run-tests/SKILL.md", ".mx-claw/skills/small-diffs/SKILL.md"):
        assert (ws / rel).is_file(), rel
    policy = json.loads((ws / ".mx-claw/project.json").read_text(encoding="utf-8"))
    assert policy["verification"]["command"] == "python -m unittest -q"
    skill = (ws / ".mx-claw/skills/run-tests/SKILL.md").read_text(encoding="utf-8")
    assert skill.startswith("---\nname: run-tests\ndescription: ")
    (ws / "AGENTS.md").write_text("changed", encoding="utf-8")
    assert "changed" not in copy_demo_workspace(tmp_path / "b").joinpath("AGENTS.md").read_text(encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=ws, capture_output=True, text=True)
    assert proc.returncode == 1 and "101.75 != 155.75" in proc.stderr  # the real, shipped bug
    with pytest.raises(FileExistsError, match="not an empty folder"):
        copy_demo_workspace(ws)


def test_stream_that_stalls_midway_times_out_and_streamed_text_arrives_live(test_server):
    """A stream whose chunks stop coming ends with kind 'timeout'; a slow but steady stream is delivered."""
    test_server.stream_delay = 0.05
    test_server.enqueue_text("one two three four five six seven eight nine ten eleven twelve")
    arrivals: list[float] = []
    t0 = time.perf_counter()
    c = provider(test_server).complete(USER, None, on_delta=lambda _: arrivals.append(time.perf_counter() - t0))
    assert c.message["content"].endswith("twelve") and len(arrivals) >= 3
    assert arrivals[-1] - arrivals[0] >= 0.05  # pieces arrived over time, not in one burst
    test_server.stream_delay = 1.0
    with pytest.raises(ProviderError) as err:
        provider(test_server, timeout=0.3, max_retries=0).complete(USER, None)
    assert err.value.kind == "timeout"


def test_l2_demo_says_what_it_can_do_for_a_prompt_it_cannot_script():
    """L2: "What is 2+2?" runs no script: the demo says it is an offline demo and lists its tasks with prompts."""
    from mxclaw_nb.demo.plans import TASKS

    reply = next_reply([{"role": "user", "content": "What is 2+2?"}])
    assert reply.tool_calls == [] and reply.text.startswith("[demo model] I am the offline demo model")
    assert 'cannot answer "What is 2+2?"' in reply.text and "Nothing was run" in reply.text
    for _, what, example in TASKS:
        assert f'- {what}: "{example}"' in reply.text
    for prompt in ("hello", "I already did that", "what is the capital of France?", "prefix the catalog"):
        assert next_reply([{"role": "user", "content": prompt}]).tool_calls == [], prompt
    for plan, _, example in TASKS:  # every example the demo offers runs the script it names
        first = next_reply([{"role": "user", "content": example}])
        assert first.tool_calls and f"Plan ({plan}," in first.text, example


def test_l7_error_remedy_names_settings_as_the_caller_says():
    """L7: the remedy names environment variables by default; `worded(names)` names the caller's settings."""
    with TestServer(known_models=["llama3.1:8b"]) as srv:
        with pytest.raises(ProviderError) as err:
            provider(srv).complete(USER, None)
        url = srv.base_url
    e = err.value
    assert e.message.endswith(f"Check MXCLAW_MODEL (the server's models: GET {url}/models) and OPENAI_BASE_URL.")
    worded = e.worded({"model": "%config AgentMagics.model", "base_url": "%config AgentMagics.base_url"})
    assert worded.startswith(e.what) and "MXCLAW_MODEL" not in worded and "OPENAI_BASE_URL" not in worded
    assert worded.endswith("Check %config AgentMagics.model (the server's models: GET "
                           f"{url}/models) and %config AgentMagics.base_url.")
    with pytest.raises(ProviderError) as err:
        OpenAIProvider(base_url=url, api_key="k", model="m", max_retries=0).complete(USER, None)
    assert err.value.message.endswith("Check that the server is running and OPENAI_BASE_URL is right.")
    assert err.value.worded({"base_url": "B"}).endswith("Check that the server is running and B is right.")
    plain = ProviderError("server", "Provider failed {base_url}.")  # no remedy: braces in server text stay
    assert plain.worded({"base_url": "B"}) == plain.message == "Provider failed {base_url}."


def test_n1_the_provider_reads_the_settings_object_and_keywords_override_it(test_server, tmp_path):
    """N1: the provider takes the one `Settings` and reads its own settings from it (a new provider setting is
    read there, never copied by the Agent); the keyword forms callers used before still work and override it."""
    from mxclaw_nb import Agent
    from mxclaw_nb.provider.limits import Limits
    from mxclaw_nb.settings import Settings

    s = Settings(stream=False, max_tokens=77, text_calls="off", max_answer_bytes=5000, call_deadline=30)
    p = provider(test_server, settings=s)
    assert p.settings is s
    assert (p.stream, p.max_tokens, p.text_calls, p.call_deadline) == (False, 77, False, 30.0)
    assert p.limits == Limits(answer=5000)
    test_server.enqueue_text("ok")
    p.complete(USER, None)
    assert test_server.requests[-1]["max_tokens"] == 77 and "stream" not in test_server.requests[-1]

    # keywords override the object (which is never changed), in the table's form and under its checks
    q = provider(test_server, settings=s, stream=True, max_tokens=None, text_calls=True, limits=Limits(line=4096))
    assert (q.settings.stream, q.settings.max_tokens, q.settings.text_calls) == (True, None, "on")
    assert q.limits == Limits(line=4096) and q.settings.max_answer_bytes == Limits().answer
    assert (s.stream, s.max_tokens) == (False, 77)
    test_server.enqueue_text("ok")
    q.complete(USER, None)
    assert test_server.requests[-1]["stream"] is True and "max_tokens" not in test_server.requests[-1]
    # keywords alone: as before, over the table's defaults
    assert provider(test_server, stream=False, call_deadline=20).settings == Settings(stream=False, call_deadline=20)
    assert provider(test_server).settings == Settings()
    with pytest.raises(ValueError, match=r"max_tokens must be an integer >= 1 \(or unset\) \(got 0\)"):
        provider(test_server, max_tokens=0)

    # the Agent hands its own object over: the provider's settings are the agent's, not a hand-made copy
    agent = Agent(tmp_path, db=str(tmp_path / "p.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", max_tokens=55, stream=False, max_stream_line_bytes=9999)
    try:
        assert agent.provider.settings is agent.settings
        assert agent.provider.limits == Limits(line=9999) and not agent.provider.stream
        test_server.enqueue_text("ok")
        agent.run("hello")
        assert test_server.requests[-1]["max_tokens"] == 55 and "stream" not in test_server.requests[-1]
    finally:
        agent.close()


@pytest.mark.parametrize("message", [
    "registry.ollama.ai/library/gemma2:2b does not support tools",  # Ollama
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',  # vLLM
    "tools param requires --jinja flag",  # llama.cpp's llama-server
])
def test_a_server_without_tool_calling_gets_the_serving_remedy(test_server, message):
    """L2: a server or model that refuses tool definitions says so in its own words; the paragraph adds how to serve
    the model with tool calling (the README's "Local models" table) instead of a bare "rejected the request"."""
    test_server.enqueue_error(400, message)
    with pytest.raises(ProviderError) as err:
        provider(test_server).complete(USER, [{"type": "function", "function": {"name": "f", "parameters": {}}}])
    text = err.value.message
    assert err.value.kind == "bad_request" and message[:25] in text
    assert "--enable-auto-tool-choice" in text and "--jinja" in text and "Local models" in text
