"""`%agent` commands that show what the context engine did: views, compaction, events, replays, plots.

Why: these commands are the teaching surface of the project — the request view of the last call
(what the model saw) next to the untouched transcript, a compaction on demand, the next view without
a model call, a replay under other policy values. They only *read*: they never append to the
transcript (SPEC S2). Everything is rendered by the shared widgets (`mxclaw_nb.widgets`), which carry
static HTML/text fallbacks, or returned as pandas DataFrames so users can keep working with them.
Every output starts with a caption naming the model (the demo model says so) and the session.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from mxclaw_nb.notebook.host import CommandHost
from mxclaw_nb.widgets.style import counted, counter_label, fmt_int

if TYPE_CHECKING:  # pandas is imported when a command runs, not at %load_ext
    import pandas as pd


def _last_call(m: CommandHost) -> tuple[Any, int | None] | None:
    """The last model call of the current session: a live RequestView, else the stored request row."""
    agent = m.get_agent()
    if m.last_view is not None and m.last_view_session == agent.session_id:
        return m.last_view, m.last_reported
    requests = m.store().requests(agent.session_id, last=1)  # only the record shown
    if requests.empty:
        return None
    return requests.iloc[-1], None


def _no_call(m: CommandHost) -> None:
    print(m.caption("no model call in this session yet: %agent dry-run shows the next request view"))


def configure_view(p: Any) -> None:
    """Options of `%agent view`."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--before", action="store_true", help="DataFrame: the transcript and what happened to each")
    group.add_argument("--after", action="store_true", help="DataFrame: the messages sent and where they came from")


def cmd_view(m: CommandHost, args: argparse.Namespace) -> Any:
    """The compaction inspector of the last model call, or its before/after DataFrame."""
    import pandas as pd

    from mxclaw_nb.widgets import CompactionInspector

    last = _last_call(m)
    if last is None:
        return _no_call(m)
    transcript = None
    if isinstance(last[0], pd.Series):  # a stored record: its rows are rebuilt from the stored transcript (N3)
        transcript = m.get_agent().engine_transcript()
    inspector = CompactionInspector(last[0], transcript=transcript)
    data, rec = inspector.data, inspector.data.record
    unit = counter_label(rec.counter)
    print(m.caption(f"request view of the last model call (what the model saw) · {data.carried or rec.stage} · "
                    f"{fmt_int(rec.before_tokens)} → {fmt_int(rec.after_tokens)} {unit} tokens · the stored "
                    "transcript is unchanged (%agent transcript)"))
    if args.before or args.after:
        from mxclaw_nb.notebook.frames import view_frame

        return view_frame(inspector.before_df if args.before else inspector.after_df)
    return inspector


def cmd_compact(m: CommandHost, args: argparse.Namespace) -> Any:
    """Run the compaction stages on the current transcript now and show the result."""
    from mxclaw_nb.widgets import CompactionInspector

    try:
        view = m.get_agent().compact_now()
    except ValueError as exc:
        raise UsageError(f"%agent compact: {exc}.") from None
    unit = counter_label(view.counter)
    print(m.caption(f"compaction now: {view.stage} · {fmt_int(view.before_tokens)} → {fmt_int(view.after_tokens)} "
                    f"{unit} tokens. Nothing is stored or deleted: the next model call rebuilds its view from the "
                    "full transcript (SPEC C7)"))
    if view.stage == "unchanged":
        print(nothing_to_compact(view, m.get_agent().policy.keep_recent_tokens))
    return CompactionInspector(view)


def nothing_to_compact(view: Any, keep: int) -> str:
    """Why `%agent compact` changed nothing, in words that match the figures shown above it."""
    unit = counter_label(view.counter)
    if view.after_tokens <= keep:
        return (f"Everything fits in the safe tail ({fmt_int(view.after_tokens)} ≤ keep_recent_tokens={keep:,} "
                f"{unit} tokens): nothing older to compact.")
    return (f"Nothing older than the safe tail to compact: the tail (keep_recent_tokens={keep:,}) already starts at "
            f"the first conversation message. The view holds {fmt_int(view.after_tokens)} {unit} tokens, more than "
            "that budget, because system messages are never compacted and the tail always keeps the last message "
            "and each tool result with its call (SPEC C3).")


def view_tail(m: CommandHost) -> str:
    """The safe-tail budget in use, formatted."""
    return f"{m.get_agent().policy.keep_recent_tokens:,}"


def show_dry_run(m: CommandHost, prompt: str | None) -> Any:
    """The next request view (with `prompt` as the next user message) and its estimate."""
    from mxclaw_nb.widgets import CompactionInspector

    view = m.get_agent().dry_run(prompt)
    unit = counter_label(view.counter)
    print(m.caption(f"dry run, no model call: next request view {counted(len(view.messages), 'message')} · "
                    f"{fmt_int(view.after_tokens)} {unit} / {fmt_int(view.threshold)} threshold / "
                    f"{fmt_int(view.window)} window · {view.stage}"))
    return CompactionInspector(view)


def cmd_dry_run(m: CommandHost, rest: str) -> Any:
    """`%agent dry-run [prompt]`."""
    return show_dry_run(m, rest.strip() or None)


def configure_events(p: Any) -> None:
    """Options of `%agent events`."""
    p.add_argument("--type", help="only events of this type, e.g. context.compacted")
    p.add_argument("--all", action="store_true", help="events of every session, not just the current one")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N events")
    p.add_argument("--full", action="store_true", help="the store's frame: full ids, payloads as JSON text")


def cmd_events(m: CommandHost, args: argparse.Namespace) -> pd.DataFrame:
    """Stored events of the current session (or all sessions): payload keys as columns (--full: as stored)."""
    from mxclaw_nb.notebook.frames import events_frame

    agent = m.get_agent()
    df = m.store().events(None if args.all else agent.session_id, args.type)
    if args.tail is not None:
        if args.tail < 0:
            raise UsageError("%agent events: --tail must be >= 0.")
        df = df.tail(args.tail)
    print(m.caption(counted(len(df), "event") + (f" of type {args.type}" if args.type else "") +
                    ("" if args.full else " · token figures in the unit their row names · --full: as stored")))
    return df if args.full else events_frame(df, all_sessions=args.all)


def cmd_sql(m: CommandHost, query: str) -> pd.DataFrame:
    """Read-only SQL on the store (tables: sessions, messages, events, requests, artifacts)."""
    if not query.strip():
        raise UsageError("%agent sql needs a query, e.g. %agent sql SELECT type, count(*) FROM events GROUP BY type")
    df = m.store().sql(query)
    print(m.caption(counted(len(df), "row")))
    return df


def configure_replay(p: Any) -> None:
    """Options of `%agent replay`."""
    p.add_argument("--window", type=int, metavar="N", help="context window tokens (default: current)")
    p.add_argument("--ratio", type=float, metavar="R", help="threshold ratio (default: current)")
    p.add_argument("--tail", type=int, metavar="N", help="safe-tail budget, keep_recent_tokens (default: current)")
    p.add_argument("--strategy", metavar="NAME[:k=v,...]",
                   help="compaction strategy, e.g. masking:keep_last=5 (SPEC C12; default: current)")
    p.add_argument("--all-columns", "--full", dest="all_columns", action="store_true",
                   help="every replay column (session id, fact survival by kind, ...), not the focused set")


def cmd_replay(m: CommandHost, args: argparse.Namespace) -> pd.DataFrame:
    """Replay the session's model calls under other policy values (no model calls)."""
    from dataclasses import replace

    from mxclaw_nb.settings import check_settings

    agent = m.get_agent()
    base = agent.policy
    try:  # the same ranges as the settings (mxclaw_nb.settings)
        check_settings(context_window_tokens=args.window, threshold_ratio=args.ratio, keep_recent_tokens=args.tail)
        policy = replace(base, context_window_tokens=args.window or base.context_window_tokens,
                         threshold_ratio=args.ratio if args.ratio is not None else base.threshold_ratio,
                         keep_recent_tokens=args.tail if args.tail is not None else base.keep_recent_tokens)
        if args.strategy is not None:  # C12: by name and numbers, refused with the known names when unknown
            from mxclaw_nb.context.strategies import ARTICLE, parse_strategy

            chosen = parse_strategy(args.strategy)
            policy = replace(policy, strategy=None if chosen == ARTICLE else chosen)
    except ValueError as exc:
        raise UsageError(f"%agent replay: {exc}.") from None
    messages = agent.transcript()
    if not messages:
        raise UsageError("%agent replay: the session has no messages yet; run a turn first.")
    from mxclaw_nb.analysis.replay import replay
    from mxclaw_nb.notebook.frames import replay_frame

    progress: Any = True  # a bar when it takes a few seconds
    if getattr(m.shell, "kernel", None) is not None and m.widgets:
        from IPython.display import display

        from mxclaw_nb.widgets.static import saved_progress

        progress = saved_progress(display)  # its saved output is not "0%" of a replay that finished (N2)
    df = replay((agent.session_id, messages), policy, progress=progress)
    import pandas as pd

    stages = df.loc[df["stage"] != "unchanged", "stage"].value_counts() if len(df) else pd.Series(dtype=int)
    comp = ", ".join(f"{s} {n}" for s, n in stages.items()) or "none"
    strategy = "" if policy.strategy is None else f"strategy {policy.strategy.label()}, "
    print(m.caption(f"replay, no model calls: {strategy}window {policy.context_window_tokens:,}, ratio "
                    f"{policy.threshold_ratio:g}, tail {policy.keep_recent_tokens:,} · {counted(len(df), 'call')} · "
                    f"compactions: {comp} · tokens are {counter_label(policy_counter(df))}"
                    + ("" if args.all_columns else " · --all-columns for the other columns")))
    return df if args.all_columns else replay_frame(df)


def policy_counter(df: Any) -> str:
    """The counter a replay's token figures come from (`estimate` unless the frame says otherwise)."""
    return str(df["counter"].iloc[0]) if len(df) and "counter" in df.columns else "estimate"


def configure_transcript(p: Any) -> None:
    """Options of `%agent transcript`."""
    p.add_argument("--full", action="store_true", help="every column and the whole content")


def cmd_transcript(m: CommandHost, args: argparse.Namespace) -> pd.DataFrame:
    """The stored transcript (the source of truth, never trimmed): one-line previews (--full: as stored)."""
    from mxclaw_nb.notebook.frames import transcript_frame

    agent = m.get_agent()
    df = m.store().transcript(agent.session_id)
    print(m.caption(f"stored transcript: {counted(len(df), 'message')} (the source of truth; views are trimmed, "
                    "this is not)"))
    return df if args.full else transcript_frame(df)


def cmd_timeline(m: CommandHost, args: argparse.Namespace) -> Any:
    """Prompt tokens per model call across the session, threshold and compactions."""
    from mxclaw_nb.widgets import TokenTimeline

    agent = m.get_agent()
    from mxclaw_nb.store.reader import TIMELINE_COLUMNS

    requests = m.store().requests(agent.session_id, columns=TIMELINE_COLUMNS,  # what is drawn, no JSON
                                  summary_calls=True)  # C11: summary calls, their own markers
    if requests.empty:
        return _no_call(m)
    print(m.caption(counted(len(requests), "model call")))
    return TokenTimeline(requests, session_id=agent.session_id[:8])


def cmd_gauge(m: CommandHost, args: argparse.Namespace) -> Any:
    """The context gauge of the last model call (or of the next one when none was made yet)."""
    import pandas as pd

    from mxclaw_nb.widgets import ContextGauge

    last = _last_call(m)
    if last is None:
        print(m.caption("no model call yet: gauge of the next request view (dry run)"))
        return ContextGauge(m.get_agent().dry_run())
    print(m.caption("context gauge of the last model call"))
    if isinstance(last[0], pd.Series):
        # the same transcript-relative rows as %agent view (SPEC N3): one number per message in both views
        return ContextGauge.from_request(last[0], m.get_agent().engine_transcript())
    return ContextGauge(last[0], reported_prompt_tokens=last[1])


def setting_names(m: CommandHost) -> dict[str, str]:
    """How an error's remedy names each provider setting: the way this user set it (config, else environment)."""
    import os

    def name(key: str, env: str) -> str:
        if getattr(m, key) is not None:
            return f"%config AgentMagics.{key}"
        return env if os.environ.get(env) else f"%config AgentMagics.{key} (or {env})"

    key_env = m.api_key_env
    api_key = (f"{key_env} or %config AgentMagics.api_key_env" if key_env == "OPENAI_API_KEY" else
               f"{key_env} (the variable %config AgentMagics.api_key_env names)")
    return {"base_url": name("base_url", "OPENAI_BASE_URL"), "model": name("model", "MXCLAW_MODEL"),
            "api_key": api_key}


def failure_paragraph(m: CommandHost, agent: Any, exc: BaseException) -> str:
    """One paragraph: what failed, what to do (naming the settings as the user set them), where the message is."""
    from mxclaw_nb.provider.errors import ProviderError
    from mxclaw_nb.store.writer import StoreError

    cause = exc.__cause__ if isinstance(exc.__cause__, ProviderError) else exc
    names = setting_names(m)
    if isinstance(cause, ProviderError) and cause.kind == "auth":
        code = f" ({cause.status_code})" if cause.status_code else ""
        text = f"Provider at {cause.base_url} refused the key{code}. Set {names['api_key']}."
    elif isinstance(cause, ProviderError):
        text = cause.worded(names)
    else:
        text = getattr(cause, "message", None) or str(cause)
    if agent.is_demo:
        text = f"{agent.label}: {text}"
    if hasattr(exc, "user_seq"):  # TurnFailed knows whether this turn's message was stored (L7)
        seq = getattr(exc, "user_seq", None)
        return text if seq is None else f"{text} Your message is stored (session {agent.session_id[:8]}, #{seq})."
    try:
        seq = m.store().last_user_seq(agent.session_id)
    except StoreError:
        return text
    return text if seq is None else f"{text} Your message is stored (session {agent.session_id[:8]}, #{seq})."
