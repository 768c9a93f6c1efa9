"""The live turn model: one reading of a turn's events that every live renderer shows (SPEC C10, N2, N6, L4, L7).

Why: the live turn used to be read twice, by the text/HTML log (`notebook/livelog.py`) and by the widget
view (`widgets/live.py`), each with its own dozen event handlers, and they drifted (the provider's quirk
note and the "shell NOT sandboxed" warning reached only the text log). Now the events are parsed once
into typed events (`mxclaw_nb.events.parse`), `TurnLog` applies each to one state (log lines in event
order, the calls' request records, status, what the turn waits for) with one handler per event kind,
and renderers only draw: they subclass `TurnRenderer` and hear which line was added or changed.

Cost (N2, C7): a call is kept as its request record (O(1): the loop's own record once the call ends,
the event carries it) and its RequestView; the rows the inspector and the gauge's layer split need are
derived only when a renderer asks for them (`TurnLog.call_data`), never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mxclaw_nb import events as ev
from mxclaw_nb.records import RequestRecord, record_of_view
from mxclaw_nb.tools.policy import shown_command
from mxclaw_nb.widgets.livetext import LogLine, arg_summary, pretty_arguments
from mxclaw_nb.widgets.style import FAIL_CSS, WARN_CSS, counted, counter_label, fmt_int, preview_text

READ_ARTIFACT = "read_artifact"  # A2: the tool whose results are artifact reads, not new artifacts

SHOW_CHARS = 4_000  # of a tool result, kept for [show]
FINISHED = ("done", "failed", "interrupted", "stopped")


@dataclass
class Call:
    """One model call of the turn: its record (the stored one once the call ended) and its live view."""

    record: RequestRecord
    view: Any = field(default=None, repr=False)  # the RequestView; dropped when the turn's renderers release it
    data: Any = field(default=None, repr=False)  # CallData, derived on demand and cached


class TurnRenderer:
    """What a renderer of the live turn hears (every method optional): the model's state is in `model`."""

    model: TurnLog

    def added(self, line: LogLine) -> None:
        """A new log line (tool, compaction, note, text)."""

    def changed(self, line: LogLine, piece: str = "") -> None:
        """A line changed: a tool's result or decision, streamed text (`piece` is what arrived)."""

    def activity_changed(self) -> None:
        """What the turn waits for changed (`model.activity`)."""

    def started(self) -> None:
        """The turn started (`model.turn`, `model.session_id` are set)."""

    def call_built(self, it: int) -> None:
        """Model call `it`'s request view was built (`model.calls[it]`)."""

    def call_ended(self, it: int) -> None:
        """Model call `it` answered; `model.calls[it].record` is the stored request record."""

    def turn_ended(self) -> None:
        """The turn ended (`model.status`)."""


class CallDataMap(Mapping[int, Any]):
    """`iteration -> CallData` of the turn's calls, each derived on first access (N2: not per event)."""

    def __init__(self, log: TurnLog) -> None:
        self._log = log

    def __getitem__(self, it: int) -> Any:
        return self._log.call_data(it)

    def __iter__(self) -> Iterator[int]:
        return iter(self._log.calls)

    def __len__(self) -> int:
        return len(self._log.calls)

    def clear(self) -> None:
        self._log.calls.clear()


class TurnLog:
    """The state of one live turn, changed by the loop's events (`handle(kind, payload)`), shown by renderers."""

    def __init__(self, renderers: list[TurnRenderer] | None = None) -> None:
        self.session_id: str | None = None
        self.turn: int | None = None
        self.model_label = ""
        self.status = "waiting"
        self.activity = ""
        self.error: str | None = None
        self.text = ""  # every streamed text of the turn, calls separated by a blank line
        self.entries: list[LogLine] = []
        self.calls: dict[int, Call] = {}
        self.iteration: int | None = None
        self._new_call = False
        self.renderers: list[TurnRenderer] = []
        for r in renderers or []:
            self.attach(r)

    def attach(self, renderer: TurnRenderer) -> None:
        renderer.model = self
        self.renderers.append(renderer)

    def _tell(self, what: Callable[[TurnRenderer], None]) -> None:
        for r in self.renderers:
            what(r)

    # -- reading --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.status.startswith(FINISHED)

    def final_answer(self) -> str:
        """The text of the last model call once the turn is done (what the answer says)."""
        line = self.answer_line()
        return line.text if line is not None else ""

    def answer_line(self) -> LogLine | None:
        if not self.status.startswith("done") or not self.entries or self.entries[-1].kind != "text":
            return None
        return self.entries[-1]

    def call_data(self, it: int) -> Any:
        """CallData of call `it` (record + rows), derived once from its view and the stored transcript."""
        from mxclaw_nb.widgets.data import call_data

        call = self.calls[it]
        if call.data is None or call.data.record is not call.record:
            if call.data is not None:  # only figures changed (the reported usage): the rows stay
                call.data = replace(call.data, record=call.record)
            else:
                view = call.view
                lineage = getattr(view, "lineage", None)
                transcript = getattr(lineage, "transcript", None)
                call.data = call_data(call.record, transcript, view=view)
        return call.data

    # -- events ---------------------------------------------------------------------------------
    def handle(self, kind: str, payload: dict[str, Any] | None) -> None:
        """Apply one published event (unknown kinds are ignored: a newer loop may publish more)."""
        if kind not in ev.TYPES:
            return
        event = ev.parse(kind, payload)
        method = getattr(self, "_on_" + type(event).__name__, None)
        if method is not None:
            method(event)

    def _add(self, line: LogLine) -> LogLine:
        self.entries.append(line)
        self._tell(lambda r: r.added(line))
        return line

    def _changed(self, line: LogLine, piece: str = "") -> None:
        self._tell(lambda r: r.changed(line, piece))

    def set_activity(self, activity: str) -> None:
        if activity != self.activity:
            self.activity = activity
            self._tell(lambda r: r.activity_changed())

    def _running_tool(self) -> LogLine | None:
        return next((ln for ln in reversed(self.entries) if ln.kind == "tool" and ln.status == "running"), None)

    def _on_TurnStarted(self, e: ev.TurnStarted) -> None:
        self.session_id = e.session_id or self.session_id
        self.turn = e.turn
        self.model_label = e.model_label or self.model_label
        self.status = "running"
        self._tell(lambda r: r.started())
        if e.sandbox_warning:  # L5: said visibly, in every form of the log
            self._add(LogLine("note", f"⚠ {e.sandbox_warning}", color=WARN_CSS, warning=True))
        self.set_activity("starting the turn")

    def _on_RequestBuilt(self, e: ev.RequestBuilt) -> None:
        if e.view is None:
            return
        it = e.iteration or (max(self.calls) + 1 if self.calls else 1)
        self.iteration, self._new_call = it, True  # the next streamed text starts a new paragraph
        record = record_of_view(e.view, turn=e.turn or self.turn, iteration=it, retry=e.retry,
                                calibrated_tokens=e.counter_tokens)
        self.calls[it] = Call(record, e.view)
        self._tell(lambda r: r.call_built(it))
        self.set_activity(f"waiting for the model (call {it})")

    def _on_ModelDelta(self, e: ev.ModelDelta) -> None:
        if not e.text:
            return
        if self._new_call:
            if self.text and not self.text.endswith("\n"):
                self.text += "\n\n"  # text of separate model calls must not run together
            self._new_call = False
        self.text += e.text
        last = self.entries[-1] if self.entries else None
        if last is not None and last.kind == "text" and last.iteration == self.iteration:
            last.text += e.text
            self._changed(last, e.text)
            return
        self._add(LogLine("text", e.text, iteration=self.iteration))
        self.set_activity("")  # the text itself shows the model is at work

    def _on_ModelCompleted(self, e: ev.ModelCompleted) -> None:
        it = e.iteration or self.iteration
        if it in self.calls:
            call = self.calls[it]
            if isinstance(e.record, RequestRecord):  # C10: the record the loop stored, not a copy rebuilt here
                call.record = e.record
            elif e.usage and e.usage.get("prompt_tokens") is not None:
                call.record = replace(call.record, prompt_tokens_reported=int(e.usage["prompt_tokens"]))
            self._tell(lambda r: r.call_ended(it))
        self.set_activity("")

    def _on_ContextCompacted(self, e: ev.ContextCompacted) -> None:
        it = e.iteration or self.iteration
        unit = counter_label("estimate" if e.tokens_are == "estimates" else e.tokens_are)
        text = (f"⟳ context compacted before call {it}: {e.stage} · {fmt_int(e.before_tokens)} → "
                f"{fmt_int(e.after_tokens)} {unit} tokens")
        line = LogLine("compaction", text, status=e.stage, iteration=it, content=e.summary)
        if it in self.calls:  # N6: the line opens this call's inspector in place (a compaction is O(n) anyway)
            from mxclaw_nb.widgets.live import static_inspector_html

            line.inspector = static_inspector_html(self.call_data(it))
        self._add(line)

    def _on_ContextSummary(self, e: ev.ContextSummary) -> None:
        """C11: the summary call, as its own line (accepted, merged into the previous one)."""
        from mxclaw_nb.context.model_summary import summary_note

        self._add(LogLine("note", summary_note("context.summary", {"coverage": e.coverage, "merge": e.merge,
                                                                   "usage": e.usage, "latency_ms": e.latency_ms}),
                          iteration=e.iteration))

    def _on_ContextSummaryRejected(self, e: ev.ContextSummaryRejected) -> None:
        """C11: why the model summary was not used; the C6 summary stands in."""
        from mxclaw_nb.context.model_summary import summary_note

        self._add(LogLine("note", summary_note("context.summary_rejected", {
            "coverage": e.coverage, "reason": e.reason, "usage": e.usage, "latency_ms": e.latency_ms}),
                          color=WARN_CSS, warning=True, iteration=e.iteration))

    def _on_ProviderNote(self, e: ev.ProviderNote) -> None:
        if not e.shown:  # L2: a repeat (another text-written tool call): stored, said once
            return
        if e.warning:  # T3: e.g. a prompt the server probably cut (mxclaw_nb/truncation.py): a warning line
            self._add(LogLine("note", f"⚠ {' '.join(e.note.split())}", color=WARN_CSS, warning=True,
                              iteration=e.iteration))
            return
        self._add(LogLine("note", f"ⓘ {' '.join(e.note.split())}", iteration=e.iteration))

    def _on_ContextNothingToGain(self, e: ev.ContextNothingToGain) -> None:
        """C5/C6: the compaction tried would not have made the view smaller, so the view went unchanged."""
        unit = "est." if e.tokens_are in ("estimate", "estimates") else e.tokens_are
        self._add(LogLine("note", f"ⓘ {e.stage} compaction: nothing to gain ({fmt_int(e.before_tokens)} → "
                                  f"{fmt_int(e.after_tokens)} {unit} tokens); sent unchanged", iteration=e.iteration))

    def _on_ContextCacheDecision(self, e: ev.ContextCacheDecision) -> None:
        """E4: why a cache-aware strategy kept the warm prefix (or broke it) at a call."""
        self._add(LogLine("note", f"ⓘ {e.text()}", iteration=e.iteration))

    def _on_FrozenNote(self, e: ev.FrozenNote) -> None:
        """L9: a project file of the frozen context was refused (a link out, a FIFO, ...): a warning line."""
        self._add(LogLine("note", f"⚠ {' '.join(e.note.split())}", color=WARN_CSS, warning=True))

    def _on_ArtifactFallback(self, e: ev.ArtifactFallback) -> None:
        self._add(LogLine("note", f"ⓘ the tool output was not stored as an artifact: {' '.join(e.reason.split())}"))

    def _on_ToolStarted(self, e: ev.ToolStarted) -> None:
        head = f"→ {e.name or '?'} {arg_summary(e.arguments)}".rstrip()
        self._add(LogLine("tool", head, "running", call_id=e.call_id, iteration=self.iteration,
                          arguments=pretty_arguments(e.arguments or "")))
        self.set_activity(f"running {e.name or 'a tool'}")

    def _on_ToolFinished(self, e: ev.ToolFinished) -> None:
        line = next((ln for ln in reversed(self.entries) if ln.kind == "tool" and ln.call_id == e.call_id), None)
        if line is None:
            line = self._add(LogLine("tool", f"→ {e.name or '?'}", call_id=e.call_id))
        status = ("failed" + (f" (exit {e.exit_code})" if e.exit_code not in (None, 0) else "")) if e.is_error \
            else "ok"
        chars = e.chars if e.chars is not None else len(e.content)
        detail = f" · {fmt_int(chars)} chars" if chars else ""
        if e.artifact_id:  # named once: the tool that stored it, or the read's source
            detail += f" · {'read from' if e.name == READ_ARTIFACT else 'stored as'} {e.artifact_id}"
        lines = e.content.strip().splitlines()
        if lines and e.name == READ_ARTIFACT and lines[0].startswith("[artifact "):
            lines = lines[1:]  # its header repeats the id; the first line read says more
        if lines:
            detail += f" · {preview_text(lines[0], 60)}"
        line.status, line.color = status + detail, FAIL_CSS if e.is_error else ""
        line.content, line.chars = e.content[:SHOW_CHARS], chars
        self._changed(line)
        self.set_activity("")

    def _on_ToolSkipped(self, e: ev.ToolSkipped) -> None:
        self._add(LogLine("note", f"✗ {counted(e.count, 'tool call')} not run: the response asked for {e.asked}, "
                                  f"at most {e.bound} run per response (max_tool_calls)", color=FAIL_CSS))

    def _on_ApprovalPending(self, e: ev.ApprovalPending) -> None:
        """N6: nothing waits unseen: the spinner says whom the turn waits for."""
        what = "python code" if e.kind == "python" else "a shell command"
        self.set_activity(f"waiting for your approval of {what}: {preview_text(shown_command(e.command), 60)}")

    def _on_ApprovalDecided(self, e: ev.ApprovalDecided) -> None:
        verb = "approved" if e.decision == "allow" else "denied"
        text = f"{verb} by {e.by or '?'}"
        line = next((ln for ln in reversed(self.entries) if ln.kind == "tool" and ln.status == "running"
                     and not ln.decision), None)
        if line is None:  # no tool line to sit next to: a line of its own
            self._add(LogLine("note", f"{'✓' if verb == 'approved' else '✗'} {text}: {shown_command(e.command)}",
                              color="" if verb == "approved" else FAIL_CSS))
        else:
            line.decision = text
            self._changed(line)
        if self.activity.startswith("waiting for your approval"):
            self.set_activity("running the approved code" if verb == "approved" else "")

    def _on_TurnFinished(self, e: ev.TurnFinished) -> None:
        if e.text and not self.text:
            self.text = e.text
            self._add(LogLine("text", e.text, iteration=self.iteration))
        self.status = f"done · {counted(e.iterations, 'model call')}" if e.iterations else "done"
        self._finish()

    def _on_TurnFailed(self, e: ev.TurnFailed) -> None:
        self.status, self.error = "failed", e.error
        self._finish()

    def _on_TurnMaxIterations(self, e: ev.TurnMaxIterations) -> None:
        self._add(LogLine("note", f"stopped after {e.limit} model calls (max-iterations bound)", color=FAIL_CSS))
        self.status = "stopped · max_iterations"
        self._finish()

    def _on_TurnInterrupted(self, e: ev.TurnInterrupted) -> None:
        """L4, L7: nothing stays `running…`; streamed text that was cut is labelled partial (and is stored so)."""
        for line in self.entries:
            if line.kind == "tool" and line.status == "running":
                line.status, line.color = "interrupted", FAIL_CSS
                self._changed(line)
        last = self.entries[-1] if self.entries else None
        if last is not None and last.kind == "text" and e.partial_chars:
            last.partial = True
            self._changed(last)
        self.status = "interrupted"
        self._finish()

    def _finish(self) -> None:
        self.set_activity("")
        self._tell(lambda r: r.turn_ended())
