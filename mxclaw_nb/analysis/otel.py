"""Export stored sessions as OpenTelemetry traces, in the GenAI semantic conventions.

Why: analysts of agent behaviour already run OpenTelemetry backends (Jaeger, Tempo, Phoenix,
Langfuse, an OTel Collector); a session stored by mxclaw_nb should open there next to their other
agents. The conventions for generative AI are in Development status (schema 1.42.0 here), so the
attribute names follow them where they exist and everything mxclaw_nb adds is under ``mxclaw.``.

Shape, one trace per turn:

- a root span ``invoke_agent mxclaw_nb`` per turn (``gen_ai.operation.name = invoke_agent``), from
  the turn's ``turn.started`` event to its end event (``turn.finished``, ``turn.failed``, ...);
- a child span ``chat <model>`` per model call (``gen_ai.operation.name = chat``) timed from its stored
  latency, with ``gen_ai.conversation.id`` (the session), ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens``/``output_tokens`` **only when the provider reported them**, likewise
  ``gen_ai.usage.cache_read.input_tokens``/``cache_creation.input_tokens`` (SPEC E1),
  ``server.address``/``server.port``, ``error.type`` for a failed call;
- the context engine's figures on each chat span under ``mxclaw.context.*``, their unit in the name
  (``..._tokens_est`` is the C1 estimate, ``..._tokens`` with ``mxclaw.context.counter`` naming the counter;
  ``mxclaw.context.prefix_tokens`` is the prefix shared with the previous call, SPEC E2);
- a call that compacted carries ``gen_ai.conversation.compacted = true`` and a span event
  ``gen_ai.conversation.compaction`` with the stage, before/after tokens (labelled as above) and
  ``mxclaw.context.duration_ms``, how long the engine took to build that view (stored with each call
  record as ``engine_ms``; files written before it was recorded have no duration).

Nothing secret is exported: URLs are stored without credentials (SPEC L6) and message contents are
not exported at all (the conventions make content opt-in; the transcript stays in the store).

    from mxclaw_nb.analysis.otel import export_otel
    export_otel(store, endpoint="http://127.0.0.1:4318/v1/traces")   # OTLP/HTTP
    export_otel(store, path="traces.jsonl")                           # one JSON span per line
    stop = follow_otel(agent, endpoint=...)   # live: each turn is exported when it ends; stop() to end
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

SCHEMA_URL = "https://opentelemetry.io/schemas/1.42.0"
_CALL_COLUMNS = ("session_id", "seq", "turn", "iteration", "created_at", "model", "base_url", "counter",
                 "estimate_tokens", "before_tokens", "after_tokens", "threshold", "window_tokens", "stage",
                 "prompt_tokens_reported", "completion_tokens_reported", "latency_ms", "error", "retry",
                 "cached_tokens_reported", "cache_write_tokens_reported", "prefix_tokens")
_END_EVENTS = ("turn.finished", "turn.failed", "turn.interrupted", "turn.max_iterations")


def _ns(ts: Any) -> int:
    """Nanoseconds since the epoch of a stored (UTC, naive) timestamp."""
    t = pd.Timestamp(ts)
    if t.tzinfo is None:
        t = t.tz_localize(UTC)
    return int(t.value)


def _opt(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value.item() if hasattr(value, "item") else value


def _server(url: str | None) -> dict[str, Any]:
    if not url:
        return {}
    parts = urlsplit(url)
    out: dict[str, Any] = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    if port:
        out["server.port"] = port
    return out


def call_attributes(row: pd.Series | dict[str, Any]) -> dict[str, Any]:
    """The span attributes of one stored model call (GenAI conventions + ``mxclaw.context.*``)."""
    get = row.get
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",  # the wire protocol: any OpenAI-compatible endpoint
        "gen_ai.conversation.id": str(get("session_id")),
        "mxclaw.turn": int(get("turn") or 0),
        "mxclaw.iteration": int(get("iteration") or 0),
        **_server(get("base_url")),
    }
    if _opt(get("model")):
        attrs["gen_ai.request.model"] = str(get("model"))
    reported_in, reported_out = _opt(get("prompt_tokens_reported")), _opt(get("completion_tokens_reported"))
    if reported_in is not None:
        attrs["gen_ai.usage.input_tokens"] = int(reported_in)
    if reported_out is not None:
        attrs["gen_ai.usage.output_tokens"] = int(reported_out)
    for column, name in (("cached_tokens_reported", "gen_ai.usage.cache_read.input_tokens"),  # E1, reported only
                         ("cache_write_tokens_reported", "gen_ai.usage.cache_creation.input_tokens"),
                         ("prefix_tokens", "mxclaw.context.prefix_tokens")):  # E2: shared with the previous call
        value = _opt(get(column))
        if value is not None:
            attrs[name] = int(value)
    counter = str(_opt(get("counter")) or "estimate")
    attrs["mxclaw.context.counter"] = counter
    for column, name in (("estimate_tokens", "mxclaw.context.sent_tokens_est"),
                         ("before_tokens", "mxclaw.context.before_tokens"),
                         ("after_tokens", "mxclaw.context.after_tokens"),
                         ("threshold", "mxclaw.context.threshold_tokens"),
                         ("window_tokens", "mxclaw.context.window_tokens")):
        value = _opt(get(column))
        if value is not None:
            attrs[name] = int(value)
    stage = str(_opt(get("stage")) or "unchanged")
    attrs["mxclaw.context.stage"] = stage
    if stage != "unchanged":
        attrs["gen_ai.conversation.compacted"] = True
    if bool(_opt(get("retry"))):
        attrs["mxclaw.context.prompt_too_long_retry"] = True
    error = _opt(get("error"))
    if error:
        attrs["error.type"] = "interrupted" if error == "interrupted" else "provider_error"
    return attrs


def _turn_bounds(events: pd.DataFrame) -> dict[tuple[str, int], tuple[int, int | None, str]]:
    """(session, turn) -> (start ns, end ns or None, how the turn ended)."""
    out: dict[tuple[str, int], tuple[int, int | None, str]] = {}
    for (sid, turn), group in events.groupby(["session_id", "turn"]):
        starts = group[group["type"] == "turn.started"]
        ends = group[group["type"].isin(_END_EVENTS)]
        if starts.empty:
            continue
        end = ends.iloc[-1] if not ends.empty else None
        out[(str(sid), int(turn))] = (_ns(starts.iloc[0]["created_at"]),
                                      None if end is None else _ns(end["created_at"]),
                                      "unfinished" if end is None else str(end["type"]))
    return out


def build_spans(store: Any, session_ids: Sequence[str] | None = None, *, provider: Any = None,
                turns: Sequence[int] | None = None) -> list[Any]:
    """Finished SDK spans for the stored sessions (all of them when ``session_ids`` is None; only the given
    ``turns`` when set)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

    from mxclaw_nb.version import __version__

    ids = None if session_ids is None else list(session_ids)
    if ids is not None and not ids:
        return []
    calls = store.call_records(_CALL_COLUMNS, ids, extra=("engine_ms",))
    if turns is not None:
        calls = calls[calls["turn"].isin(list(turns))]
    events = store.turn_events(ids)
    memory = InMemorySpanExporter()
    tp = provider or TracerProvider(resource=Resource.create({"service.name": "mxclaw_nb",
                                                              "service.version": __version__}))
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tp.get_tracer("mxclaw_nb", __version__, schema_url=SCHEMA_URL)
    bounds = _turn_bounds(events)
    for (sid, turn), group in calls.groupby(["session_id", "turn"], sort=False):
        ends = [_ns(r.created_at) for r in group.itertuples()]
        starts = [e - int((_opt(r.latency_ms) or 0) * 1e6) for e, r in zip(ends, group.itertuples(), strict=True)]
        t_start, t_end, outcome = bounds.get((str(sid), int(turn)), (min(starts), max(ends), "unknown"))
        root = tracer.start_span("invoke_agent mxclaw_nb", kind=SpanKind.INTERNAL, start_time=min(t_start, *starts),
                                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mxclaw_nb",
                                             "gen_ai.conversation.id": str(sid), "mxclaw.turn": int(turn),
                                             "mxclaw.turn.outcome": outcome})
        ctx = set_span_in_context(root)
        for (_, row), start, end in zip(group.iterrows(), starts, ends, strict=True):
            attrs = call_attributes(row)
            span = tracer.start_span(f"chat {attrs.get('gen_ai.request.model', '')}".strip(), context=ctx,
                                     kind=SpanKind.CLIENT, start_time=start, attributes=attrs)
            engine_ms = _opt(row.get("engine_ms"))
            if attrs.get("gen_ai.conversation.compacted"):
                compaction = {
                    "mxclaw.context.stage": attrs["mxclaw.context.stage"],
                    "mxclaw.context.before_tokens": attrs.get("mxclaw.context.before_tokens", 0),
                    "mxclaw.context.after_tokens": attrs.get("mxclaw.context.after_tokens", 0),
                    "mxclaw.context.counter": attrs["mxclaw.context.counter"]}
                if engine_ms is not None:  # the engine's build time for this call (files before it have none)
                    compaction["mxclaw.context.duration_ms"] = float(engine_ms)
                span.add_event("gen_ai.conversation.compaction", timestamp=start, attributes=compaction)
            if attrs.get("error.type"):
                span.set_status(Status(StatusCode.ERROR, str(_opt(row.get("error")))[:500]))
            span.end(end_time=max(end, start))
        if outcome == "turn.failed":
            root.set_status(Status(StatusCode.ERROR, "turn failed"))
        root.end(end_time=max(t_end or max(ends), max(ends)))
    return list(memory.get_finished_spans())


def export_otel(store: Any, session_ids: Sequence[str] | None = None, *, endpoint: str | None = None,
                path: str | Path | None = None, headers: dict[str, str] | None = None, timeout: float = 10.0) -> int:
    """Export stored sessions to an OTLP/HTTP endpoint and/or a JSON-lines file; returns the number of spans."""
    if endpoint is None and path is None:
        raise ValueError("export_otel needs endpoint= (OTLP/HTTP traces URL) and/or path= (a .jsonl file)")
    return _send(build_spans(store, session_ids), endpoint, path, headers, timeout)


def follow_otel(agent: Any, *, endpoint: str | None = None, path: str | Path | None = None,
                headers: dict[str, str] | None = None, timeout: float = 10.0,
                on_error: Any = None) -> Any:
    """Export live: each turn of ``agent`` is exported (from the store, as ``export_otel`` would) when it ends.

    Returns a function that stops following. ``path`` is appended to, a turn at a time. An export that
    fails (the collector is down) never fails the turn: the error goes to ``on_error(exc)`` when given,
    else it is printed; the turn stays in the store and ``export_otel`` can send it again later.
    """
    if endpoint is None and path is None:
        raise ValueError("follow_otel needs endpoint= (OTLP/HTTP traces URL) and/or path= (a .jsonl file)")

    def on_event(kind: str, payload: dict[str, Any]) -> None:
        if kind not in _END_EVENTS or payload.get("turn") is None:
            return
        try:
            spans = build_spans(agent.store, [agent.session_id], turns=[int(payload["turn"])])
            _send(spans, endpoint, path, headers, timeout, append=True)
        except Exception as exc:  # noqa: BLE001 - telemetry must not end the user's turn
            if on_error is not None:
                on_error(exc)
            else:
                print(f"mxclaw_nb: OpenTelemetry export of turn {payload.get('turn')} failed: {exc}")

    return agent.subscribe(on_event)


def _send(spans: list[Any], endpoint: str | None, path: str | Path | None, headers: dict[str, str] | None,
          timeout: float, *, append: bool = False) -> int:
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=timeout)
        try:
            if spans and exporter.export(spans) is not SpanExportResult.SUCCESS:
                raise RuntimeError(f"the OTLP endpoint {endpoint} did not accept the {len(spans)} spans")
        finally:
            exporter.shutdown()
    if path is not None:
        with Path(path).open("a" if append else "w", encoding="utf-8") as fh:
            for span in spans:
                fh.write(json.dumps(json.loads(span.to_json()), ensure_ascii=False) + "\n")
    return len(spans)

