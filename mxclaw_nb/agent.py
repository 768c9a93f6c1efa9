"""The `Agent`: configuration, sessions and token accounting around the query loop.

Users script experiments with it and the magics are a thin layer over it, so every setting has one
resolution order: explicit argument, then environment (`OPENAI_API_KEY`, `OPENAI_BASE_URL`,
`MXCLAW_MODEL`, `MXCLAW_DB`, `MXCLAW_CONTEXT_WINDOW`), then the model table, then a stated default.
With nothing configured it runs the offline demo model on a fresh copy of the sample workspace, so
the first thing a user sees works on a laptop with no key. Token counting follows T3: the C1
estimate until the provider reports usage in the session, then the calibrated counter.
"""

from __future__ import annotations

import base64
import inspect
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import repeat
from pathlib import Path
from typing import Any

from mxclaw_nb import events, reentry
from mxclaw_nb.cache_live import LiveCacheAware
from mxclaw_nb.context import (
    ContextPolicy,
    RequestView,
    TokenCache,
    build_request_view,
    build_structured_summary,
)
from mxclaw_nb.context.counters import CalibratedCounter
from mxclaw_nb.context.overhead import tool_definitions_text
from mxclaw_nb.context.strategies import parse_strategy
from mxclaw_nb.frozen import preamble_and_notes, session_preamble
from mxclaw_nb.loop import Subscriber, TurnContext, TurnResult, run_turn
from mxclaw_nb.messages import Message, modernize_legacy_calls
from mxclaw_nb.secrets import StreamRedactor, redact, redact_obj
from mxclaw_nb.secrets import known as known_secrets
from mxclaw_nb.settings import (
    AGENT_KEYS,
    MAX_IMAGE_BYTES,
    MAX_PROMPT_BYTES,
    SETTING,
    SETTINGS,
    Settings,
    check_setting,
    human_bytes,
    unknown_keyword,
)
from mxclaw_nb.text_policy import display_value
from mxclaw_nb.tools import ToolContext, default_registry
from mxclaw_nb.tools.policy import shown_command
from mxclaw_nb.tools.sandbox import Limits, Sandbox, check_placement, resolve_sandbox, store_files


def console_approver(command: str) -> bool | None:
    """Ask on the terminal when there is one; None (deny) when nobody can answer."""
    if not sys.stdin or not sys.stdin.isatty():
        return None
    answer = input(f"mxclaw_nb wants to run: {shown_command(command)}\nAllow? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


# Image formats the OpenAI-compatible APIs accept, recognised by their first bytes (never by the file name).
_IMAGE_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                     (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


def sniff_image(head: bytes) -> str | None:
    """The MIME type of an image from its first bytes (PNG, JPEG, GIF, WebP), or None."""
    for signature, mime in _IMAGE_SIGNATURES:
        if head.startswith(signature):
            return mime
    return "image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else None


def image_part(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An `image_url` content part (data URL) for a file, and its attachment record.

    The type comes from the content (a text file named `.png` is refused) and the file must be at most
    `MAX_IMAGE_BYTES` (20 MB), the per-image limit of the common providers.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"image file not found: {p}")
    size = p.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise ValueError(f"image too large: {p} is {human_bytes(size)}, the limit is {human_bytes(MAX_IMAGE_BYTES)}")
    data = p.read_bytes()
    mime = sniff_image(data[:16])
    if mime is None:
        raise ValueError(f"not an image file: {p} does not start like a PNG, JPEG, GIF or WebP image "
                         f"(first bytes {data[:8]!r})")
    url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}, {"path": str(p), "mime": mime, "bytes": len(data)}


def check_prompt_size(prompt: str, limit: int = MAX_PROMPT_BYTES) -> None:
    """Refuse a prompt over `limit` bytes (UTF-8), saying its size; nothing is stored or sent."""
    size = len(prompt.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ValueError(f"the prompt is {human_bytes(size)}, over the limit of {human_bytes(limit)} "
                         "(max_prompt_bytes); nothing was stored or sent. Put the text in a workspace file and "
                         "ask the agent to read it, or raise max_prompt_bytes")


def _provider(s: Settings, api_key: str | None, env: dict[str, str]) -> Any:
    """The provider the settings name (the demo when none is configured; L2, L7, L10)."""
    from mxclaw_nb.connect import resolve_provider

    # the provider reads its own settings (stream, deadline, bounds, ...) from the one object (N1)
    return resolve_provider(model=s.model, base_url=s.base_url, api_key=api_key, env=env, settings=s)


def _window(s: Settings, model: str, env: dict[str, str]) -> int:
    """The context window: the setting, else $MXCLAW_CONTEXT_WINDOW, else the model table (checked alike)."""
    from mxclaw_nb.provider.windows import context_window_for

    if s.context_window_tokens is not None:
        return int(s.context_window_tokens)
    try:
        return int(check_setting("context_window_tokens", context_window_for(model, env=env)))
    except ValueError as exc:
        raise ValueError(f"{exc}; it came from MXCLAW_CONTEXT_WINDOW={env.get('MXCLAW_CONTEXT_WINDOW')!r}"
                         if env.get("MXCLAW_CONTEXT_WINDOW") else str(exc)) from None


def _shell(s: Settings, env: dict[str, str]) -> tuple[str, str, tuple[str, ...], Limits]:
    """L5/L6/L8: the shell's sandbox, its network, the extra variables it may see and what it may use (a setting
    left unset: $MXCLAW_SANDBOX, $MXCLAW_NETWORK, $MXCLAW_SHELL_ENV, then the stated default)."""
    names = s.shell_env or env.get("MXCLAW_SHELL_ENV", "")
    return (s.sandbox or env.get("MXCLAW_SANDBOX") or "auto", s.network or env.get("MXCLAW_NETWORK") or "off",
            tuple(n.strip() for n in names.split(",") if n.strip()),
            Limits(s.shell_memory_mb, s.shell_processes, s.shell_file_mb, s.shell_tmp_mb))


def _exact_counter(mode: str) -> Any:
    """T2: the named tokenizer's counter for `o200k_base` / `cl100k_base`, else None."""
    if mode not in ("o200k_base", "cl100k_base"):
        return None
    from mxclaw_nb.tokenizers import counter_by_name

    return counter_by_name(mode)


# `Agent(...)` keywords that are not settings: objects and per-call wiring (the settings are `Settings`' fields).
_OBJECTS = ("settings", "session_id", "provider", "approver", "home", "env", "summarize", "api_key", "namespace")


def agent_settings(settings: Settings | None, overrides: dict[str, Any]) -> Settings:
    """`settings` (default: the table's defaults) with `Agent(...)` keyword overrides, checked (N1).

    The keywords keep their Python forms: a `Path` for `workspace` or `db`, a list of names for `shell_env`
    (None: none given). An unknown or notebook-only keyword is a TypeError naming the near matches."""
    for name in overrides:
        if name not in AGENT_KEYS:
            raise TypeError(_unknown_keyword(name))
    forms: dict[str, Any] = {k: ",".join(v or ()) if k == "shell_env" and not isinstance(v, str)
             else os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in overrides.items()}
    return replace(settings or Settings(), **forms)


def _unknown_keyword(name: str) -> str:
    if name in SETTING:
        return (f"Agent() has no argument {name!r}: it is a notebook setting (%agent config {name}=..., "
                f"%config AgentMagics.{name})")
    return unknown_keyword("Agent()", name, (*AGENT_KEYS, *_OBJECTS), AGENT_KEYS)


class Agent:
    """A coding agent bound to a workspace, a store, a provider and one current session.

    Its settings are one frozen `Settings` (`agent.settings`): `Agent(settings=Settings(...))`, keyword
    overrides of its fields (`Agent(approval="allow")`), or both; `db` may also be an open `Store`."""

    _policy: ContextPolicy

    def __init__(self, workspace: str | Path | None = None, db: Any = None, *, settings: Settings | None = None,
                 session_id: str | None = None, provider: Any = None,
                 approver: Callable[[str], bool | None] | None = console_approver, home: str | Path | None = None,
                 env: dict[str, str] | None = None, summarize: Callable[[list[Message]], str] | None = None,
                 api_key: str | None = None, namespace: Callable[[], dict[str, Any]] | None = None,
                 clock: Callable[[], float] | None = None, **overrides: Any) -> None:
        from mxclaw_nb.store.writer import Store

        store = db if isinstance(db, Store) else None
        given = {k: v for k, v in (("workspace", workspace), ("db", db)) if v is not None and v is not store}
        s = self.settings = agent_settings(settings, {**given, **overrides})
        env = dict(os.environ) if env is None else env
        strategy = parse_strategy(s.strategy)  # C12: any registered one, E4's `-cache` variants too
        # validate before the store opens: a bad value leaves nothing behind
        self.provider = _provider(s, api_key, env) if provider is None else provider
        self.store = store or Store(s.db)
        self.is_demo = bool(getattr(self.provider, "is_demo", False))
        self._tools_seen: tuple[object, int] | None = None  # the registry and its version `policy` was made from
        self.policy = ContextPolicy(_window(s, self.provider.model, env), s.threshold_ratio, s.keep_recent_tokens,
                                    strategy=None if strategy.name == "article" else strategy)
        self.calibrated, self._exact = CalibratedCounter(), _exact_counter(s.counter)
        self.summarize, self.approver = summarize or build_structured_summary, approver
        self.sandbox_mode, self.network, self.shell_env, self.limits = _shell(s, env)
        self._warned_unconfined = False
        self._frozen_notes: list[dict[str, str]] = []  # L9: refused project files, shown when the turn starts
        self._deltas, self.home = StreamRedactor(), None if home is None else Path(home)
        self.workspace = self._resolve_workspace(s.workspace)
        self.tools = default_registry(namespace)  # K1: kernel tools when a namespace is given
        self._subscribers: list[Subscriber] = []
        # E4: the previous call of each session in this process and the clock that says whether its prefix is
        # still cached (`clock`: seconds, time.time unless given; tests pass their own)
        self._cache_aware = LiveCacheAware(clock=clock or time.time)
        self._told: set[tuple[str, str]] = set()  # L2: (session, note) said once per session (loop.TurnContext.told)
        self._reset_session_state()
        # A new session's row is written with its first turn, so looking around (sql, sessions, dry-run)
        # never leaves empty sessions behind; whether it is stored is checked on the first turn.
        self.session_id, self._session_stored = session_id or uuid.uuid4().hex, False
        self._tool_context()  # validate approval, workspace and the shell settings early

    @property
    def policy(self) -> ContextPolicy:
        """The session's context policy; its tool-definitions layer (T1-T3, N2) is the tools registered now, so a
        tool registered after construction (`agent.tools.register(...)`) is counted in the estimate it is sent
        with. Derived again only when the registry (or its version counter) changed."""
        seen = (self.tools, getattr(self.tools, "version", 0))  # a registry of one's own may not count
        if self._tools_seen is None or self._tools_seen[0] is not seen[0] or self._tools_seen[1] != seen[1]:
            self._tools_seen = seen
            self._policy = replace(self._policy, tool_definitions=tool_definitions_text(self.tools.schemas()))
        return self._policy

    @policy.setter
    def policy(self, value: ContextPolicy) -> None:
        if value.tool_definitions is not getattr(self, "_policy", value).tool_definitions:
            self._tools_seen = None  # a policy made afresh: its tool definitions are derived from the registry
        self._policy = value

    @property
    def approval(self) -> str:
        """The shell's approval mode (L5; `settings.approval`)."""
        return self.settings.approval

    @property
    def max_iterations(self) -> int:
        """Model calls per turn before the loop stops (`settings.max_iterations`)."""
        return self.settings.max_iterations

    # -- configuration -------------------------------------------------------------------------
    def _resolve_workspace(self, workspace: str | Path | None) -> Path:
        if workspace is not None:
            path = Path(workspace).expanduser().resolve()
            if not path.is_dir():
                raise ValueError(f"workspace is not a folder: {path}")
            return check_placement(path, allow=self.settings.allow_broad_workspace, given=True)
        if not self.is_demo:
            return check_placement(Path.cwd().resolve(), allow=self.settings.allow_broad_workspace, given=False)
        from mxclaw_nb.demo.model import copy_demo_workspace

        # The demo plays a coding agent on the sample project: give it a fresh, writable copy (beside the
        # database, or in the temp folder when that folder is read-only).
        base = self.store.path.parent / "demo-workspaces"
        try:
            base.mkdir(parents=True, exist_ok=True)
            if not os.access(base, os.W_OK):
                raise PermissionError(base)
        except OSError:
            base = Path(tempfile.gettempdir()) / "mxclaw-demo-workspaces"
            base.mkdir(parents=True, exist_ok=True)
        index = sum(1 for _ in base.iterdir())
        return copy_demo_workspace(base / f"workspace-{index:04d}").resolve()

    @property
    def label(self) -> str:
        """Who answers: e.g. `demo model (offline)` or `gpt-4o @ https://...`."""
        return str(getattr(self.provider, "label", self.provider.model))

    def current_policy(self) -> ContextPolicy:
        """The policy with the counter T3 prescribes right now (estimate until usage was reported)."""
        if self._exact is not None:
            return replace(self.policy, counter=self._exact)
        if self.settings.counter == "estimate" or not self.calibrated.calibrated:
            return self.policy
        return replace(self.policy, counter=self.calibrated)

    def _model_summaries(self, session_id: str) -> Callable[[Any], None] | None:
        """C11: with the `model-summary` strategy, the session's recorded summaries (re-entry reuses them, S2: from
        its events) and the hook that keeps a new one; None for the other strategies."""
        from dataclasses import replace

        from mxclaw_nb.context.model_summary import ModelSummary
        from mxclaw_nb.summary_call import recorded_from_store

        outer = self.policy.strategy
        inner = getattr(outer, "inner", outer)  # E4: `model-summary-cache` wraps the ModelSummary
        if not isinstance(inner, ModelSummary):
            return None

        def put(summary: ModelSummary) -> None:
            outer = self.policy.strategy
            wrapped = replace(outer, inner=summary) if getattr(outer, "inner", None) is not None else summary
            self.policy = replace(self.policy, strategy=wrapped)

        put(replace(inner, summaries=recorded_from_store(self.store, session_id)))

        def keep(summary: Any) -> None:
            outer = self.policy.strategy
            put(getattr(outer, "inner", outer).with_summary(summary))
        return keep

    def _observe_usage(self, sent: list[Message], prompt_tokens: int | None) -> None:
        # T3: the report covers the tool definitions too; the counter learns the messages' share of it (the
        # definitions stay their own layer, so an anchored view still sums to what was reported)
        if prompt_tokens:
            self.calibrated = self.calibrated.observe(sent, max(1, prompt_tokens - self.policy.fixed_tokens))

    # -- sessions ------------------------------------------------------------------------------
    def new_session(self) -> str:
        """Start a new session (fresh frozen context and calibration); returns its id."""
        self.session_id, self._session_stored = uuid.uuid4().hex, False
        self.calibrated = CalibratedCounter()
        self._reset_session_state()
        return self.session_id

    @classmethod
    def resume(cls, session_id: str, db: Any = None, **kwargs: Any) -> Agent:
        """An agent continuing a stored session (its workspace unless another is given)."""
        from mxclaw_nb.store.writer import Store

        store = db if isinstance(db, Store) else Store(db)
        if not store.has_session(session_id):
            raise ValueError(f"no session {session_id!r} in {store.path}; list them with Store().sessions()")
        kwargs.setdefault("workspace", store.session_workspace(session_id) or None)
        return cls(db=store, session_id=session_id, **kwargs)

    def _reset_session_state(self) -> None:
        # What lives across turns (flat cost per call, C7/T2): the stored transcript read so far (extended by
        # the rows after the last seq seen, never re-read), its user-message count, and the engine's cache
        # of repair plans and counts over it (append-only: stored rows are values, S2).
        self._cache = TokenCache(append_only=True)
        self._prefix: dict[str, Any] = {}  # E2: the previous call's sent messages, per session (context.prefix)
        self._stored: Any = []  # a list, or the store's lazily read rows (store.rows.StoredRows), extended
        self._users = 0
        self._stored_session = self.session_id if hasattr(self, "session_id") else None

    def _sync_transcript(self) -> list[Message]:
        """The session's stored transcript, reading only the rows stored since the last read (S3: another
        process may have appended); the list is the Agent's own and only grows."""
        if self._stored_session != self.session_id:  # the session was switched without new_session()
            self._reset_session_state()
            self._stored_session = self.session_id
        first = not self._stored
        lazy = getattr(self.store, "transcript_rows", None) if first else None
        rows = lazy(self.session_id) if lazy is not None else None
        if rows is not None:  # C7, N2: read lazily, only what the first view sends and what its summary needs
            self._stored, self._users = rows, rows.users
            reentry.resume(self.store, self.session_id, self._cache, self._stored)
            return self._stored
        new = self.store.load_transcript_after(self.session_id, len(self._stored) - 1)
        if first:  # C4: legacy function calls (an imported export) as the tool calls they stand for (S2: rows kept)
            new = modernize_legacy_calls(new)
        if new:
            self._stored.extend(new)
            if first:  # C7: this process's first read of the session: continue the engine state saved with it
                reentry.resume(self.store, self.session_id, self._cache, self._stored)
            self._users += list(map(dict.get, new, repeat("role"))).count("user")  # rows are dicts (C speed)
        return self._stored

    def transcript(self) -> list[Message]:
        """The stored transcript of the current session (the source of truth)."""
        return self.store.load_transcript(self.session_id)

    def engine_transcript(self) -> list[Message]:
        """The stored transcript as the engine reads it: legacy function calls as the tool calls they stand for
        (C4, `messages.modernize_legacy_calls`; one message for one, so seqs hold). `transcript()` is as stored."""
        return modernize_legacy_calls(self.store.load_transcript(self.session_id))

    # -- events --------------------------------------------------------------------------------
    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Receive loop events `(type, payload)`; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "model.delta":  # a key can span streamed pieces: redact over a held-back tail (L6)
            text = self._deltas.feed(str(payload.get("text") or ""))
            if text:
                self._send("model.delta", {**payload, "text": text})
            return
        rest = self._deltas.flush()
        if rest:
            self._send("model.delta", {"text": rest})
        self._send(kind, payload)

    def _send(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "turn.started":
            payload = {**payload, "model_label": self.label, "sandbox": self.sandbox_status}
            if not self.sandbox.confined and not self._warned_unconfined:  # L5: said once, visibly
                self._warned_unconfined = True
                payload["sandbox_warning"] = self.sandbox_status
        payload = redact_obj(display_value(payload))  # what the live log and widgets show (L6, L7)
        for callback in list(self._subscribers):
            callback(kind, payload)
        if kind == "turn.started":  # L9: the frozen files refused on this session's first turn, after its header
            notes, self._frozen_notes = self._frozen_notes, []
            for note in notes:
                self._send("frozen.note", {**note, "turn": 0, "iteration": None})

    # -- turns ---------------------------------------------------------------------------------
    def _user_message(self, prompt: str, images: Sequence[str | Path] | None) -> Message:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: say what the agent should do")
        check_prompt_size(prompt, self.settings.max_prompt_bytes)
        if not images:
            return {"role": "user", "content": prompt}
        parts, attachments = zip(*(image_part(p) for p in images), strict=True)
        return {"role": "user", "content": [{"type": "text", "text": prompt}, *parts],
                "attachments": list(attachments)}

    def _ensure_preamble(self, prompt: str = "") -> list[Message]:
        """F1: on a session's first turn, read and store the system prompt and frozen context; the session's
        `title` is its first prompt (one line, at most 80 characters), so `%agent sessions` can name it."""
        transcript = self._sync_transcript()
        # a session with stored messages exists (C7: a resumed session's first turn asks nothing more)
        if not self._session_stored and not transcript and not self.store.has_session(self.session_id):
            title = " ".join(prompt.split())
            self.store.create_session(session_id=self.session_id, workspace=str(self.workspace),
                                      model=self.provider.model, source="demo" if self.is_demo else "agent",
                                      title=(title[:79] + "…" if len(title) > 80 else title) or None)
        self._session_stored = True
        if not transcript:
            messages, notes = preamble_and_notes(self.workspace, home=self.home)
            for message in messages:
                self.store.append_message(self.session_id, message, turn=0)
            for note in notes:  # L9: stored with the preamble, shown in the live log once the turn starts
                self.store.append_event(self.session_id, "frozen.note", note, turn=0)
            self._frozen_notes = notes
            transcript = self._sync_transcript()
        return transcript

    def run(self, prompt: str, images: Sequence[str | Path] | None = None) -> TurnResult:
        """Run one turn; `result.text` is the final answer. Everything is stored as it happens."""
        user = self._user_message(prompt, images)
        if self.store.read_only:
            raise self.store.read_only_error("run a turn (nothing was stored or sent)")
        session_id = self.session_id
        # One turn at a time per session, across processes: the turn number is taken inside the lock.
        with self.store.turn_lock(session_id, on_wait=lambda who: self._emit(
                "turn.waiting", {"session_id": session_id, "holder": who})):
            transcript = self._ensure_preamble(prompt)
            turn = 1 + self._users
            tool_ctx = self._tool_context(on_event=lambda kind, payload: self._tool_event(kind, payload, turn))
            on_summary = self._model_summaries(session_id)
            ctx = TurnContext(self.store, self.provider, self.tools, tool_ctx, self.current_policy,
                              self._observe_usage, self._emit, self._cache, self.settings, self.summarize,
                              transcript=transcript, prefix=self._prefix, on_summary=on_summary,
                              cache_aware=self._cache_aware, told=self._told)
            try:
                result = run_turn(ctx, session_id, user, turn)
                reentry.save(self.store, session_id, self._cache, self._sync_transcript())  # C7: for a restart
            finally:
                rest = self._deltas.flush()
                if rest:
                    self._send("model.delta", {"text": rest})
        result.text = redact(result.text)
        return result

    def _tool_context(self, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> ToolContext:
        return ToolContext(self.workspace, self.session_id, artifacts=self.store, approval=self.settings.approval,
                           python_approval=self.settings.python_approval, approver=self.approver,
                           shell_timeout=self.settings.shell_timeout, on_event=on_event,
                           sandbox=self.sandbox_mode, network=self.network, shell_env=self.shell_env,
                           secrets=known_secrets(), max_tool_calls=self.settings.max_tool_calls, limits=self.limits,
                           settings=self.settings,
                           protected=store_files(self.store.path))

    @property
    def sandbox(self) -> Sandbox:
        """What confines the shell (probed once per process; L5)."""
        return resolve_sandbox(self.sandbox_mode)

    @property
    def sandbox_status(self) -> str:
        """One line: what confines the shell, or that nothing does (L5)."""
        return self.sandbox.status_line(self.network)

    def _tool_event(self, kind: str, payload: dict[str, Any], turn: int) -> None:
        events.record(self.store, self._emit, self.session_id, kind, payload, turn=turn)

    def dry_run(self, prompt: str | None = None) -> RequestView:
        """The request view the next model call would send (with `prompt` as the next user message)."""
        messages = list(self._sync_transcript())
        if not messages:
            messages = session_preamble(self.workspace, home=self.home)
        if prompt:
            messages = [*messages, {"role": "user", "content": prompt}]
        return build_request_view(messages, self.current_policy(), self.summarize, cache=self._cache)

    def compact_now(self) -> RequestView:
        """Show what compaction would do to the current transcript now, even under the threshold.

        The stages run against a threshold of 1 token (so they run even when the transcript fits); the view
        returned reports the session's real window and threshold, so a gauge or inspector of it reads as
        any other request. Nothing is stored or changed.
        """
        from dataclasses import replace

        real = self.current_policy()
        messages = self.engine_transcript()
        if not messages:
            raise ValueError("the session has no messages yet: run a turn first")
        forced = build_request_view(messages, replace(real, context_window_tokens=1, threshold_ratio=1.0),
                                    self.summarize)
        return replace(forced, threshold=real.threshold, window=real.context_window_tokens,
                       over_threshold=forced.after_tokens > real.threshold)

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __repr__(self) -> str:
        return (f"Agent(session={self.session_id[:8]}, model={self.label!r}, "
                f"window={self.policy.context_window_tokens}, workspace={str(self.workspace)!r})")


def _signature() -> inspect.Signature:
    """`Agent(...)`'s signature as `help()`, `inspect` and a notebook's Shift-Tab show it: every setting a keyword
    with the table's default and type (N1), made from `Settings`, so it is never written twice."""
    sig = inspect.signature(Agent.__init__)
    objects = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    types = Settings.__annotations__
    rows = [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=s.default, annotation=types[s.name])
            for s in SETTINGS if s.agent and s.name not in sig.parameters]
    return sig.replace(parameters=[*objects, *rows])


Agent.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
