"""Serialise-and-send of a long request body (SPEC L2): the provider adapter against the orjson + httpx floor.

Why: at 10k messages (everything fits: ~4.5 MB of JSON) the openai client's own `create` spends ~30 ms in the
standard library's JSON encoder alone, more than the loop's own work per call. The adapter encodes the body
once with orjson and sends it through the client's `post` (mxclaw_nb/provider/wire.py). This bench times,
side by side in one run (medians, interleaved), one call each of:

- floor: `orjson.dumps(body)` + `httpx.Client.post(content=...)` + reading the response (the least any Python
  client could do);
- adapter: `OpenAIProvider.complete(messages, tools)` (sendable check, encoding, the openai client's request,
  response parsing into a Completion);
- stock: `client.chat.completions.create(**kwargs)` (the openai client's own encoding), for reference;

against a small local server (127.0.0.1) that reads the whole body and answers a fixed completion, as JSON or
as an event stream, without parsing the body (a real server's parse time is not the client's cost).

    .venv/bin/python bench/provider_bench.py [--messages 10000] [--reps 15]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import openai  # noqa: E402
import orjson  # noqa: E402

from mxclaw_nb.demo.examples import synthetic_transcript  # noqa: E402
from mxclaw_nb.messages import sanitize  # noqa: E402
from mxclaw_nb.provider.client import OpenAIProvider  # noqa: E402

_ANSWER = {"id": "x", "object": "chat.completion", "created": 0, "model": "bench",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
_CHUNKS = [{"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "bench",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}]},
           {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "bench",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
           {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "bench", "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}]
JSON_BODY = json.dumps(_ANSWER).encode()
SSE_BODY = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in _CHUNKS) + b"data: [DONE]\n\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # http.server naming
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = SSE_BODY if b'"stream":true' in raw else JSON_BODY  # both encoders write compact JSON
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body is SSE_BODY else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _median_ms(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Interleaved (a, b, c, a, b, c, ...) wall times, medians in ms; GC collected before each, off while timing."""
    spent: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up (connections, imports)
        fn()
    for _ in range(reps):
        for name, fn in fns.items():
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                fn()
                spent[name].append((time.perf_counter() - t0) * 1000)
            finally:
                gc.enable()
    return {k: statistics.median(v) for k, v in spent.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    messages = [sanitize(m) for m in synthetic_transcript(args.messages)]
    tools = [{"type": "function", "function": {"name": "list_dir", "description": "List a folder",
                                               "parameters": {"type": "object", "properties": {}}}}]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    size = len(orjson.dumps({"model": "bench", "messages": messages, "tools": tools}))
    http = httpx.Client(trust_env=False, timeout=60)
    stock = openai.OpenAI(base_url=url, api_key="k", max_retries=0, http_client=openai.DefaultHttpxClient(
        trust_env=False))
    rows = []
    try:
        for stream in (False, True):
            provider = OpenAIProvider(base_url=url, api_key="k", model="bench", stream=stream)
            extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}

            def floor(stream: bool = stream, extra: dict[str, Any] = extra) -> None:
                body = orjson.dumps({"model": "bench", "messages": messages, "tools": tools, **extra})
                if stream:
                    with http.stream("POST", url + "/chat/completions", content=body,
                                     headers={"Content-Type": "application/json"}) as resp:
                        for _ in resp.iter_lines():
                            pass
                else:
                    http.post(url + "/chat/completions", content=body,
                              headers={"Content-Type": "application/json"}).json()

            def adapter(provider: OpenAIProvider = provider) -> None:
                assert provider.complete(messages, tools).message["content"] == "ok"

            def create(stream: bool = stream, extra: dict[str, Any] = extra) -> None:
                result = stock.chat.completions.create(model="bench", messages=[], tools=tools,  # type: ignore[call-overload]
                                                       extra_body={"messages": messages}, **extra)
                if stream:
                    with result as chunks:
                        for _ in chunks:
                            pass

            got = _median_ms({"floor": floor, "adapter": adapter, "stock": create}, args.reps)
            rows.append((stream, got))
    finally:
        server.shutdown()
    print(f"serialise-and-send of {args.messages:,} messages ({size / 1e6:.1f} MB body), medians of {args.reps} "
          "interleaved runs, wall ms\n")
    print(f"| {'mode':<9} | {'floor (orjson+httpx)':>20} | {'adapter':>8} | {'stock create':>12} | "
          f"{'adapter/floor':>13} | {'stock/floor':>11} | target |")
    print(f"| {'-' * 9} | {'-' * 19}: | {'-' * 7}: | {'-' * 11}: | {'-' * 12}: | {'-' * 10}: | ------ |")
    for stream, got in rows:
        ratio = got["adapter"] / got["floor"]
        print(f"| {'streamed' if stream else 'plain':<9} | {got['floor']:>20.1f} | {got['adapter']:>8.1f} | "
              f"{got['stock']:>12.1f} | {ratio:>12.2f}x | {got['stock'] / got['floor']:>10.2f}x | "
              f"{'MET' if ratio <= 2 else 'MISSED'} |")
    print("\ntarget: adapter within 2x of the floor (SPEC L2: the loop's per-call overhead is not the client's "
          "JSON encoding)")


if __name__ == "__main__":
    main()
