"""SPEC L10 drill: bounds on what a provider sends, and redirects only to the same origin.

Every case runs whole turns through `mxclaw_nb.Agent` with the real `openai` client over HTTP against the shipped
test server's hostile modes (`mxclaw_nb.demo.hostile`: an 800 MB SSE line, a 1 MB gzip body that inflates to
1 GB, a 64 MB answer, a 50 MB and a 5 MB `write_file` argument, a 307 to another origin), streamed and not, with a
real DuckDB file. Each refusal is a stored `turn.failed` with one paragraph naming the bound (or, for one tool
call's arguments, a failure tool result; the tool never runs), the user's message is stored, the next turn
works, no call hangs (each turn under a watchdog), and the memory the turn allocates (tracemalloc peak, server
included: it writes lazily) stays bounded. A 429 reports the number of retries really made.
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.loop import TurnFailed
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.provider.limits import Limits
from mxclaw_nb.settings import MAX_ANSWER_BYTES
from tests.helpers.drill import new_tally, print_tally

MB = 1 << 20
PEAK_BOUND = 3 * MAX_ANSWER_BYTES  # traced bytes one refused turn may allocate (client, loop and server)
DRILL = new_tally()


@pytest.fixture(scope="module", autouse=True)
def drill_tally(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints the drill's tally (cases tried, escapes, leaks, hangs) once the module's cases have run."""
    yield
    print_tally(request, "L10", DRILL)



@pytest.fixture
def srv() -> Iterator[TestServer]:
    with TestServer() as server:
        yield server


def make_agent(base_url: str, tmp_path: Path, *, stream: bool = True, max_retries: int = 0,
               limits: Limits | None = None) -> Agent:
    provider = OpenAIProvider(base_url=base_url, api_key="k", model="test-model", stream=stream, timeout=20,
                              call_deadline=60, max_retries=max_retries, limits=limits)
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return Agent(workspace=ws, db=str(tmp_path / "b.duckdb"), provider=provider, approval="allow",
                 home=tmp_path / "home")


def run_bounded(agent: Agent, prompt: str, seconds: float = 60) -> tuple[str, str, TurnFailed | None, int]:
    """One turn under a watchdog and tracemalloc: (kind, text, error, peak traced bytes)."""
    out: list[Any] = []

    def turn() -> None:
        try:
            out.append(("answer", agent.run(prompt).text, None))
        except TurnFailed as exc:
            out.append(("failed", str(exc), exc))

    tracemalloc.start()
    try:
        thread = threading.Thread(target=turn, daemon=True)
        thread.start()
        thread.join(seconds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if thread.is_alive():
        DRILL["hangs"] += 1
        pytest.fail(f"the turn hung for {seconds} s")
    kind, text, error = out[0]
    return kind, text, error, peak


def assert_failed_cleanly(agent: Agent, srv: TestServer, outcome: tuple, says: str) -> None:
    kind, text, error, peak = outcome
    DRILL["cases"] += 1
    assert kind == "failed" and error is not None and error.kind == "bad_response", (kind, text)
    assert says in text, text
    assert text.strip() and "\n" not in text and "Traceback" not in text and len(text) < 1_200, text
    assert peak < PEAK_BOUND, f"{peak / MB:.0f} MB traced during the refused turn"
    events = agent.store.events(agent.session_id)
    failed = events[events["type"] == "turn.failed"]
    assert len(failed) == 1 and json.loads(failed.iloc[0]["payload"])["error"] == text
    assert [m for m in agent.transcript() if m["role"] == "user"][-1]["content"] == "go"
    srv.enqueue_text("next turn works")
    assert agent.run("again").text == "next turn works"


HOSTILE = [("long_line", 800 * MB, "one stream line over 8.0 MB", "a response body over 16.0 MB"),
           ("gzip_bomb", 1024 * MB, "one stream line over 8.0 MB", "a response body over 16.0 MB"),
           ("long_answer", 64 * MB, "an answer over 16.0 MB", "a response body over 16.0 MB"),
           ("huge_tool_args", 50 * MB, "an answer over 16.0 MB", "a response body over 16.0 MB")]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
@pytest.mark.parametrize(("mode", "size", "says_streamed", "says_plain"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_l10_hostile_reply_fails_the_turn_with_bounded_memory(srv: TestServer, tmp_path: Path, mode: str, size: int,
                                                              says_streamed: str, says_plain: str,
                                                              stream: bool) -> None:
    agent = make_agent(srv.base_url, tmp_path, stream=stream)
    srv.enqueue_hostile(mode, size=size)
    started = time.perf_counter()
    outcome = run_bounded(agent, "go")
    elapsed = time.perf_counter() - started
    assert_failed_cleanly(agent, srv, outcome, says_streamed if stream else says_plain)
    assert not (agent.workspace / "big.txt").exists()
    print(f"\n{mode} {size // MB} MB {'streamed' if stream else 'plain'}: refused in {elapsed:.1f} s, "
          f"{outcome[3] / MB:.1f} MB traced at peak")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_l10_one_tool_call_over_the_bound_is_answered_with_a_failure_not_run(srv: TestServer, tmp_path: Path,
                                                                             stream: bool) -> None:
    """5 MB of write_file arguments (bound 4 MB): the call is stored with `{}` arguments, not run, and answered
    with a failure result that names the bound; the model's next answer ends the turn normally."""
    agent = make_agent(srv.base_url, tmp_path, stream=stream)
    srv.enqueue_hostile("huge_tool_args", size=5 * MB)
    srv.enqueue_text("I will write it in parts.")
    kind, text, _, peak = run_bounded(agent, "go")
    DRILL["cases"] += 1
    assert (kind, text) == ("answer", "I will write it in parts.")
    assert peak < PEAK_BOUND
    assert not (agent.workspace / "big.txt").exists()
    stored = agent.transcript()
    call = next(m for m in stored if m.get("tool_calls"))
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"
    result = next(m for m in stored if m["role"] == "tool")
    assert result["is_error"] and result["content"].startswith("Tool failed: not run: the arguments of this "
                                                               "write_file call are over 4.0 MB")
    sent = srv.requests[-1]["messages"]
    assert all("refused_calls" not in m for m in sent)  # stored, never sent
    assert any(m["role"] == "tool" and "max_tool_args_bytes" in m["content"] for m in sent)


def test_l10_limits_are_settings(srv: TestServer, tmp_path: Path) -> None:
    """A smaller bound from Agent(...) applies: a 200 KB answer over max_answer_bytes=100000 fails the turn."""
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = Agent(workspace=ws, db=str(tmp_path / "s.duckdb"), base_url=srv.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", max_answer_bytes=100_000)
    assert agent.provider.limits == Limits(answer=100_000)
    srv.enqueue_text("x" * 200_000)
    with pytest.raises(TurnFailed, match=r"an answer over 97.7 KB \(100,000 bytes\) \(max_answer_bytes"):
        agent.run("go")
    with pytest.raises(ValueError, match="max_stream_line_bytes must be an integer >= 1"):
        Agent(workspace=ws, db=str(tmp_path / "s.duckdb"), base_url=srv.base_url, api_key="k", model="m",
              max_stream_line_bytes=0)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_l10_redirect_to_another_origin_is_refused_naming_the_target(tmp_path: Path, stream: bool) -> None:
    with TestServer() as srv, TestServer() as elsewhere:
        agent = make_agent(srv.base_url, tmp_path, stream=stream)
        target = elsewhere.base_url + "/chat/completions"
        srv.enqueue_hostile("redirect", target=target, status=307)
        outcome = run_bounded(agent, "go")
        DRILL["escapes"] += len(elsewhere.requests)
        assert_failed_cleanly(agent, srv, outcome, f"redirected the request (HTTP 307) to {target}")
        assert elsewhere.requests == [], "the transcript was re-posted to another origin"
        # the same server under another host name is another origin too (the browser's rule)
        srv.enqueue_hostile("redirect", target=srv.base_url.replace("127.0.0.1", "localhost") + "/chat/completions",
                            status=308)
        served = len(srv.requests)
        kind, text, error, _ = run_bounded(agent, "go")
        DRILL["cases"] += 1
        DRILL["escapes"] += len(elsewhere.requests) + len(srv.requests) - served - 1
        assert kind == "failed" and f"(HTTP 308) to http://localhost:{srv.port}/v1/chat/completions" in text
        assert elsewhere.requests == [] and len(srv.requests) == served + 1


def test_l10_redirect_to_the_same_origin_is_followed(srv: TestServer, tmp_path: Path) -> None:
    agent = make_agent(srv.base_url, tmp_path)
    srv.enqueue_hostile("redirect", target="/chat/completions", status=307)  # same host and port, another path
    srv.enqueue_text("followed")
    kind, text, _, _ = run_bounded(agent, "go")
    DRILL["cases"] += 1
    assert (kind, text) == ("answer", "followed")
    assert len(srv.requests) == 2 and srv.requests[1]["messages"][-1]["content"] == "go"  # re-posted once, same origin


def test_l7_a_429_reports_the_retries_really_made(srv: TestServer, tmp_path: Path) -> None:
    """A 429 whose Retry-After is longer than the client waits is not retried: the paragraph says so, not
    "still after 2 retries"; when the client does retry, the count is the real one."""
    agent = make_agent(srv.base_url, tmp_path, max_retries=2)
    srv.enqueue_error(429, "Rate limit reached", retry_after=3600)
    served = len(srv.requests)
    with pytest.raises(TurnFailed) as info:
        agent.run("go")
    assert len(srv.requests) - served == 1
    assert "on the first request, which was not retried (it asked to wait 3600 s)" in str(info.value)
    assert "after 2 retries" not in str(info.value)
    for _ in range(3):
        srv.enqueue_error(429, "Rate limit reached", retry_after=0.01)
    served = len(srv.requests)
    with pytest.raises(TurnFailed, match="still after 2 retries"):
        agent.run("go")
    assert len(srv.requests) - served == 3


_CHILD = r'''
import sys
from mxclaw_nb.provider import OpenAIProvider, ProviderError
provider = OpenAIProvider(base_url=sys.argv[1], api_key="k", model="test-model", stream=sys.argv[2] == "1",
                          max_retries=0)
try:
    provider.complete([{"role": "user", "content": "hi"}], None)
    outcome = "answer"
except ProviderError as exc:
    outcome = exc.kind
# VmHWM: this process image's peak RSS (ru_maxrss would include the forking pytest process's own)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(outcome, int(hwm.split()[1]) * 1024)
'''


def test_l10_process_peak_memory_stays_bounded(srv: TestServer) -> None:
    """The whole client process (C allocations included, which tracemalloc does not see): its peak RSS (VmHWM)
    reading an 800 MB line or a 1 GB gzip bomb stays within 128 MB of a normal answer's (3.3 GB before the bounds)."""
    import subprocess
    import sys

    def peak(stream: bool) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _CHILD, srv.base_url, "1" if stream else "0"],
                             capture_output=True, text=True, timeout=120, check=True)
        kind, rss = out.stdout.split()
        return kind, int(rss)

    srv.enqueue_text("hello")
    kind, baseline = peak(True)
    assert kind == "answer"
    for mode, size, stream in (("long_line", 800 * MB, True), ("gzip_bomb", 1024 * MB, True),
                               ("gzip_bomb", 1024 * MB, False)):
        srv.enqueue_hostile(mode, size=size)
        kind, rss = peak(stream)
        DRILL["cases"] += 1
        assert kind == "bad_response"
        assert rss - baseline < 128 * MB, f"{mode}: peak RSS {rss / MB:.0f} MB, a normal answer {baseline / MB:.0f}"
        print(f"\n{mode} {size // MB} MB: peak RSS {rss / MB:.0f} MB (normal answer {baseline / MB:.0f} MB)")



@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_l10_compressed_answers_of_real_servers_still_decode(encoding: str, stream: bool) -> None:
    """What real servers send (OpenAI's gzip JSON, a proxy's deflate with or without the zlib header), inflated by
    the bounded decoder, gives the same answer as before."""
    import zlib

    from .test_provider_faults import RawServer, answer, completion_body

    captured: list[bytes] = []

    class Capture:
        def sendall(self, data: bytes) -> None:
            captured.append(data)

    (answer("Fixed it.") if stream else lambda c, r: c.sendall(completion_body(
        {"role": "assistant", "content": "Fixed it."})))(Capture(), {})
    head, _, body = b"".join(captured).partition(b"\r\n\r\n")
    wbits = {"gzip": 31, "deflate": 15, "deflate-raw": -15}[encoding]
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = packer.compress(body) + packer.flush()
    name = encoding.split("-")[0].encode()
    raw = head + b"\r\nContent-Encoding: " + name + b"\r\n\r\n" + packed
    server = RawServer()
    try:
        server.push(lambda conn, _request: conn.sendall(raw))
        provider = OpenAIProvider(base_url=server.base_url, api_key="k", model="test-model", stream=stream,
                                  max_retries=0)
        assert provider.complete([{"role": "user", "content": "hi"}], None).message["content"] == "Fixed it."
    finally:
        server.close()
