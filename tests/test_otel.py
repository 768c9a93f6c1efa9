"""OpenTelemetry export of stored sessions (GenAI conventions), against a real OTLP/HTTP receiver.

The receiver is an HTTP server on 127.0.0.1 started by the test; it decodes the protobuf body with the
OpenTelemetry proto package, so the spans are checked as any collector would see them.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from mxclaw_nb import Agent  # noqa: E402
from mxclaw_nb.analysis.otel import SCHEMA_URL, export_otel  # noqa: E402


class _Receiver:
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                outer.requests.append(req)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind)


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Agent:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent(db=str(tmp_path / "o.duckdb"), approval="allow", approver=None, context_window_tokens=6000,
                  keep_recent_tokens=1500)
    agent.run("fix the failing tests")
    agent.run("now summarise what you changed")
    return agent


def test_otel_spans_over_otlp_http_attribute_by_attribute(session: Agent, tmp_path: Path) -> None:
    receiver = _Receiver()
    try:
        count = export_otel(session.store, [session.session_id], endpoint=receiver.url, path=tmp_path / "t.jsonl")
    finally:
        receiver.close()
    calls = session.store.requests(session.session_id)
    turns = sorted(set(calls["turn"]))
    assert count == len(calls) + len(turns)
    spans = [(scope.scope, scope.schema_url, span) for req in receiver.requests for rs in req.resource_spans
             for scope in rs.scope_spans for span in scope.spans]
    assert len(spans) == count and {s[1] for s in spans} == {SCHEMA_URL}
    resource = {a.key: _value(a.value) for a in receiver.requests[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "mxclaw_nb"
    roots = {span.span_id: span for _, _, span in spans if span.name == "invoke_agent mxclaw_nb"}
    chats = [span for _, _, span in spans if span.name.startswith("chat")]
    assert len(roots) == len(turns) and len(chats) == len(calls)
    by_key = {(int(r.turn), int(r.iteration)): r for r in calls.itertuples()}
    compacted = 0
    for span in chats:
        attrs = {a.key: _value(a.value) for a in span.attributes}
        row = by_key[(attrs["mxclaw.turn"], attrs["mxclaw.iteration"])]
        assert span.parent_span_id in roots and span.trace_id == roots[span.parent_span_id].trace_id
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.conversation.id"] == session.session_id
        assert attrs["gen_ai.request.model"] == row.model
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["gen_ai.usage.input_tokens"] == row.prompt_tokens_reported  # reported, never an estimate
        assert attrs["gen_ai.usage.output_tokens"] == row.completion_tokens_reported
        assert attrs["mxclaw.context.sent_tokens_est"] == row.estimate_tokens
        assert attrs["mxclaw.context.stage"] == row.stage
        assert attrs["mxclaw.context.counter"] == row.counter
        assert span.end_time_unix_nano - span.start_time_unix_nano == pytest.approx(row.latency_ms * 1e6, rel=1e-3)
        if row.stage != "unchanged":
            compacted += 1
            assert attrs["gen_ai.conversation.compacted"] is True
            (event,) = [e for e in span.events if e.name == "gen_ai.conversation.compaction"]
            ev = {a.key: _value(a.value) for a in event.attributes}
            assert ev["mxclaw.context.before_tokens"] == row.before_tokens
            assert ev["mxclaw.context.after_tokens"] == row.after_tokens
        else:
            assert "gen_ai.conversation.compacted" not in attrs and not span.events
    assert compacted >= 1  # the small window made the demo compact
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == count and all(json.loads(line)["context"]["trace_id"] for line in lines)
    for root in roots.values():
        attrs = {a.key: _value(a.value) for a in root.attributes}
        assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["mxclaw.turn.outcome"] == "turn.finished"


def test_otel_export_needs_a_destination(session: Agent) -> None:
    with pytest.raises(ValueError, match="endpoint="):
        export_otel(session.store)
