"""The policy lab: one widget to move a compaction policy's numbers and watch a real session answer (SPEC S4, C12).

Why: a teacher explaining "what does a 16k window with a 2k tail do to this session, and how does observation
masking differ from the article?" needs the answer on the screen as the slider moves, not a table to re-run. The
context engine is a pure function of the transcript, so replay (`analysis.replay`) gives the exact views the loop
would have built, without a model. The lab replays once per (transcript, policy) and caches the rows and the views
read (`ReplayViews`); moving the call slider only redraws the gauge, the inspector and the timeline's cursor (the
timeline itself is redrawn only when the policy changes). A policy change is live on a long session too: the engine
rebuilds the view from the stored transcript at each turn's first call (C2), so the chosen call's view is that of a
replay of its turn alone (`replay_messages(first_call=...)`, the same view as the whole replay's); gauge, inspector
and comparison are redrawn from it at once, while the whole replay (the timeline's rows, without the per-message
state columns a timeline does not draw) runs in a background thread and the timeline is dimmed until it is redrawn
(a newer change cancels it). When the transcript's last whole replay took at most `wait_ms`, the change waits for
the new one instead and redraws timeline, gauge and inspector at once from it (the quickest whole redraw). The
`-cache` variants may carry a view over a turn (E4): for them the whole replay is waited for. A second strategy runs
over the same call side by side: two compact gauges and a one-line difference of the two views. Displayed by `%agent
lab` with a static snapshot after it (`LiveSnapshot`), so a saved notebook keeps the last state as HTML (N2).

    from mxclaw_nb.widgets.lab import PolicyLab
    lab = PolicyLab(store=store, current=sid)            # or PolicyLab({"mine": messages})
    lab.set(strategy="masking", keep_last=3, window=16_000, compare="article", call=40)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, overload

import ipywidgets as widgets

from mxclaw_nb.analysis.replay import (
    SessionCaches,
    _turns,
    call_positions,
    fewer_collections,
    replay_messages,
    replayed_lineage,
    rows_as_requests,
)
from mxclaw_nb.context import ContextPolicy, RequestView
from mxclaw_nb.context.cache_variants import cache_variant
from mxclaw_nb.context.lineage import Lineage
from mxclaw_nb.context.strategies import STRATEGIES, Strategy, strategy_from
from mxclaw_nb.messages import modernize_legacy_calls
from mxclaw_nb.widgets.data import CallData, from_view
from mxclaw_nb.widgets.gauge import gauge_html
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import FONT, MUTED, chip, color_of, esc, fmt_int
from mxclaw_nb.widgets.timeline import BOX, THEME_STYLE, W, timeline_frame, timeline_layers, timeline_svg

NONE = "(none)"
CACHE_SIZE = 32  # replays kept (transcript x policy); a 500-call session's views are a few MB
WAIT_MS = 60.0  # PolicyLab's `wait_ms` default
POLICY_KEYS = ("window", "threshold_ratio", "keep_recent")


class ReplayViews(Sequence[RequestView]):
    """The views of a whole replay, one per call (S4). While the replay runs it keeps only the calls in `keep`
    (the one on screen; None: every call); any other is made when first read, from a replay of its turn alone
    (`view_of(call)`, the same view: C2 rebuilds at a turn's first call), and kept from then on.

    Why: a redraw reads one view (gauge and inspector), the timeline reads the rows. Keeping the views of all 500
    calls of every cached replay left the collector to walk each list of each view after every slider move (a
    fifth of a masking redraw) for views nobody inspects."""

    def __init__(self, keep: Container[int] | None, view_of: Callable[[int], RequestView]) -> None:
        self._kept: dict[int, RequestView] = {}
        self._keep, self._view_of, self._n = keep, view_of, 0

    def append(self, view: RequestView) -> None:
        """The next call's view from the replay (`analysis.replay.ViewSink`): kept when asked for."""
        self._n += 1
        if self._keep is None or self._n in self._keep:
            self._kept[self._n] = view

    def release(self, calls: Iterable[int]) -> None:
        """Keep these calls' views no longer (read again, each is made from its turn): the views of a turn before the
        call on screen, once its lineage is composed over them (N3, `PolicyLab.lineage_at`). A `-cache` variant's
        (every view kept: E4, no turn replays alone) stay."""
        if self._keep is not None:
            for call in calls:
                self._kept.pop(call, None)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, k: int) -> RequestView: ...

    @overload
    def __getitem__(self, k: slice) -> list[RequestView]: ...

    def __getitem__(self, k: int | slice) -> RequestView | list[RequestView]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._n))]
        i = int(k) + self._n if int(k) < 0 else int(k)
        if not 0 <= i < self._n:
            raise IndexError(f"call index {k} out of range for {self._n} calls")
        view = self._kept.get(i + 1)
        if view is None:
            view = self._kept[i + 1] = self._view_of(i + 1)
        return view

    def __iter__(self) -> Iterator[RequestView]:
        return (self[i] for i in range(self._n))


@dataclass(frozen=True)
class Replayed:
    """One transcript under one policy: the replay rows, the view of every call (kept where read) and what it
    cost."""

    rows: list[dict[str, Any]]
    views: Sequence[RequestView]
    ms: float


class _Cancelled(Exception):
    """A background replay whose policy is no longer the chosen one."""


class _Job:
    """The whole replay of one (transcript, policy) running in a background thread (cancelled by a newer one)."""

    def __init__(self, run: Callable[[Callable[..., Iterable[Any]]], Replayed]) -> None:
        self.cancel = threading.Event()
        self.result: Replayed | None = None
        self.error: BaseException | None = None

        def steps(it: Iterable[Any], **_: Any) -> Iterator[Any]:  # replay's progress hook: a cancellation point
            for item in it:
                if self.cancel.is_set():
                    raise _Cancelled
                yield item

        def target() -> None:
            try:
                self.result = run(steps)
            except _Cancelled:
                pass
            except BaseException as exc:  # noqa: BLE001 - shown by the thread that waits for it
                self.error = exc
        self.thread = threading.Thread(target=target, name="policy-lab-replay", daemon=True)


def dataset_sources() -> dict[str, Callable[[], list[Any]]]:
    """`dataset/conversation id` -> loader, for every shipped dataset (read lazily, once)."""
    from mxclaw_nb import datasets

    out: dict[str, Callable[[], list[Any]]] = {}
    for name in datasets.available():
        for conv in datasets.load(name):
            out[f"{name}/{conv.id}"] = (lambda msgs=list(conv.messages): msgs)
    return out


def store_sources(store: Any, current: str | None) -> dict[str, Callable[[], list[Any]]]:
    """`current session` and `stored <id8> <title>` -> loader of the stored transcript."""
    out: dict[str, Callable[[], list[Any]]] = {}
    df = store.sessions()
    ids = [str(i) for i in df["id"]] if len(df) else []
    titles = dict(zip(ids, df["title"] if "title" in df else [""] * len(ids), strict=True))
    for sid in ([current] if current in ids else []) + [i for i in ids if i != current]:
        title = titles.get(sid) if isinstance(titles.get(sid), str) else ""
        label = f"current session {sid[:8]}" if sid == current else f"stored {sid[:8]} {title or ''}".rstrip()
        out[label] = (lambda s=sid: list(store.load_transcript(s)))
    return out


class InspectorHTML:
    """The inspector's static HTML of one call without its widgets (tabs, dropdowns) or its before/after frames
    (the static HTML reads the rows it shows from the call's records): the same methods, a fraction of the time,
    so a call-slider move stays a live redraw."""

    header_html = CompactionInspector.header_html
    summary_html = CompactionInspector.summary_html
    full_text = CompactionInspector.full_text
    _static_table = CompactionInspector._static_table
    to_html = CompactionInspector.to_html

    def __init__(self, data: CallData, max_rows: int) -> None:
        self.data, self.max_rows = data, max_rows


def _int_params(strategy: Strategy) -> dict[str, int]:
    """The strategy's integer numbers (the ones a slider can move)."""
    return {k: v for k, v in strategy.params().items() if isinstance(v, int) and not isinstance(v, bool)}


def _lab_sources(transcripts: Mapping[str, Sequence[Any]] | Sequence[Any] | None, store: Any, current: str | None,
                datasets: bool) -> dict[str, Callable[[], list[Any]]]:
    """PolicyLab's transcripts by label, each read on first use: the given ones first, then the store's sessions
    (the current one first), then the shipped datasets' conversations; a clear error when there is none."""
    sources: dict[str, Callable[[], list[Any]]] = {}
    if isinstance(transcripts, Mapping):
        sources.update({str(k): (lambda v=v: list(v)) for k, v in transcripts.items()})
    elif transcripts is not None:
        msgs = list(transcripts)
        sources["messages"] = lambda: msgs
    if store is not None:
        sources.update(store_sources(store, current))
    if datasets:
        sources.update(dataset_sources())
    if not sources:
        raise ValueError("PolicyLab needs a transcript: messages, a store with sessions, or datasets=True")
    return sources


class PolicyLab(StaticReprMixin, widgets.VBox):
    """Transcript picker, strategy and policy sliders, call slider; gauge, inspector and timeline of that call."""

    def __init__(self, transcripts: Mapping[str, Sequence[Any]] | Sequence[Any] | None = None, *, store: Any = None,
                 current: str | None = None, datasets: bool = True, strategy: str = "article",
                 compare: str | None = None, window: int = 32_000, threshold_ratio: float = 0.8,
                 keep_recent: int = 4_000, max_rows: int = 12, background: bool = True, wait_ms: float = WAIT_MS,
                 tool_definitions: str = "", **kwargs: Any) -> None:
        """`transcripts`: {label: messages} or one list of messages (shown first); `store`/`current`: the stored
        sessions, the current one first; `datasets`: add the shipped datasets' conversations; `background`: a
        policy change redraws the chosen call from its turn's replay and the timeline when the whole replay, run
        in a thread, is done (False: every change waits for the whole replay); `wait_ms`: a change waits for the
        whole replay anyway (timeline, gauge and inspector redrawn at once from it, no replay of the call's turn
        alone, no thread to share the interpreter with) when the transcript's last one took at most this long;
        `tool_definitions`: the tool schemas every request carries (`ContextPolicy.tool_definitions`, T1-T3: in
        the totals the threshold is checked on), e.g. the agent's, so a replay of its session decides as its live
        calls did."""
        sources = _lab_sources(transcripts, store, current, datasets)
        self.sources, self.max_rows, self.tool_definitions = sources, max_rows, str(tool_definitions)
        self._init_state(background, wait_ms)
        slider = {"continuous_update": False, "style": {"description_width": "110px"},
                  "layout": widgets.Layout(width="420px")}
        self._init_controls(slider, strategy, compare, window, threshold_ratio, keep_recent)
        self._init_views()
        controls = widgets.VBox([self.transcript, widgets.HBox([self.strategy, self.compare]), self.window,
                                 self.threshold_ratio, self.keep_recent, self.params_box])
        super().__init__(children=[widgets.HTML("<style>.mx-lab-plot{position:relative}.mx-lab-plot>.widget-html"
                                                ":last-child{position:absolute;inset:0;pointer-events:none;margin:0}"
                                                ".mx-lab-stale>.widget-html:first-child{opacity:.35;"
                                                "transition:opacity .2s}</style>"),
                                   controls, self.status, self.plot, self.call, self.gauge, self.versus,
                                   self.inspector], **kwargs)
        self.add_class("mx-policy-lab")
        self._rebuild_params()
        for w in (self.transcript, self.window, self.threshold_ratio, self.keep_recent, self.compare):
            w.observe(lambda _: self._policy_changed(), names="value")
        self.strategy.observe(lambda _: (self._rebuild_params(), self._policy_changed()), names="value")
        self.call.observe(lambda _: self._quiet or self._call_changed(), names="value")
        self._policy_changed()

    def _init_state(self, background: bool, wait_ms: float) -> None:
        """S4: the replays' caches (per transcript and policy, per call's turn, the timelines' HTML), what is shown
        and the background replay's job."""
        self._messages: dict[str, list[Any]] = {}
        self._cache: dict[tuple[str, ContextPolicy], Replayed] = {}
        self._turns_cache: dict[tuple[str, ContextPolicy, int], list[RequestView]] = {}  # views of one turn
        # N3: the last lineage composed per (transcript, policy, first call of its chain): (call, lineage)
        self._lineages: dict[tuple[str, ContextPolicy, int], tuple[int, Lineage]] = {}
        self.data: CallData | None = None  # the call on screen (gauge, inspector)
        self.other: CallData | None = None  # the same call under the comparison strategy
        self._timelines: dict[tuple[str, ContextPolicy], str] = {}  # the timeline HTML of a whole replay
        self._layouts: dict[str, tuple[list[int], list[int]]] = {}
        self._replay_ms: dict[str, float] = {}  # the last whole replay's time per transcript (wait_ms)
        # replay's caches per transcript, shared by the replays made on the kernel's thread across policies (as
        # `compare` shares them): a call's turn and a quick whole replay re-plan and re-count no message
        self._caches: dict[str, SessionCaches] = {}
        self._lock = threading.RLock()  # redraws happen on the kernel's thread and the background replay's
        self._job: _Job | None = None
        self._key: tuple[str, ContextPolicy] | None = None  # the (transcript, policy) shown
        self._full: Replayed | None = None  # its whole replay, once done
        self._n = 0  # its number of model calls
        self.background, self.wait_ms = background, wait_ms
        self._quiet = False
        self.redraws = {"timeline": 0, "call": 0}  # what was redrawn (tests read it)
        self.last_ms: dict[str, float] = {}

    def _init_controls(self, slider: dict[str, Any], strategy: str, compare: str | None, window: int,
                       threshold_ratio: float, keep_recent: int) -> None:
        """C12: the transcript picker, the strategy and its comparison, the policy's sliders (the strategy's own
        numbers in `params_box`) and the call slider."""
        self.transcript = widgets.Dropdown(options=list(self.sources), description="transcript",
                                           layout=widgets.Layout(width="520px"))
        self.strategy = widgets.Dropdown(options=list(STRATEGIES), value=strategy, description="strategy")
        self.compare = widgets.Dropdown(options=[NONE, *STRATEGIES], value=compare or NONE, description="versus")
        self.window = widgets.IntSlider(value=window, min=2_000, max=200_000, step=1_000, description="window",
                                        **slider)
        self.threshold_ratio = widgets.FloatSlider(value=threshold_ratio, min=0.3, max=1.0, step=0.05,
                                                   description="threshold ratio", **slider)
        self.keep_recent = widgets.IntSlider(value=keep_recent, min=0, max=64_000, step=500,
                                             description="tail budget", **slider)
        self.params_box = widgets.VBox()
        self.param_sliders: dict[str, widgets.IntSlider] = {}
        self.call = widgets.IntSlider(value=1, min=1, max=1, description="call",  # live: a move is a cached redraw
                                      **{**slider, "continuous_update": True})
        self.call.add_class("mx-lab-call")

    def _init_views(self) -> None:
        """N2: the status line, the timeline with its cursor (one plot box), the gauge, the comparison line and the
        inspector of the chosen call."""
        self.status = widgets.HTML()
        self.status.add_class("mx-lab-status")
        self.timeline = widgets.HTML(layout=widgets.Layout(width="100%", margin="0"))
        # a thin line over the timeline at the chosen call: moved without redrawing the timeline
        self.cursor = widgets.HTML(layout=widgets.Layout(margin="0"))
        self.gauge = widgets.HTML()
        self.versus = widgets.HTML()
        self.inspector = widgets.HTML()
        self.plot = widgets.Box([self.timeline, self.cursor],
                                layout=widgets.Layout(display="block", width="100%", max_width="850px"))
        self.plot.add_class("mx-lab-plot")

    # --- state -----------------------------------------------------------------------------------------------
    def policy(self, strategy: str | None = None) -> ContextPolicy:
        """The policy the sliders describe (with `strategy` instead of the chosen one: the comparison's)."""
        if strategy is None:
            params = {k: s.value for k, s in self.param_sliders.items()}
            strat = strategy_from(self.strategy.value, params)
        else:
            strat = strategy_from(strategy)
        return ContextPolicy(int(self.window.value), float(self.threshold_ratio.value), int(self.keep_recent.value),
                             strategy=strat, tool_definitions=self.tool_definitions)

    def set(self, **state: Any) -> None:
        """Change several controls at once and redraw once: transcript, strategy, compare, window, threshold_ratio,
        keep_recent, call, or the strategy's own numbers (e.g. keep_last). Bad values raise ValueError."""
        known = {"transcript", "strategy", "compare", "call", *POLICY_KEYS}
        if "strategy" in state and state["strategy"] not in STRATEGIES:
            raise ValueError(f"unknown strategy {state['strategy']!r}; known strategies: {', '.join(STRATEGIES)}")
        own = _int_params(strategy_from(state.get("strategy", self.strategy.value)))
        unknown = [k for k in state if k not in known and k not in own]
        if unknown:
            raise ValueError(f"PolicyLab has no control {unknown[0]!r} (controls: {', '.join(sorted(known))}; "
                             f"{state.get('strategy', self.strategy.value)}'s numbers: {', '.join(own) or 'none'})")
        if "transcript" in state and state["transcript"] not in self.sources:
            raise ValueError(f"no transcript {state['transcript']!r}; pick one of {len(self.sources)} "
                             f"(e.g. {', '.join(list(self.sources)[:3])})")
        if "compare" in state and (state["compare"] or NONE) not in (NONE, *STRATEGIES):
            raise ValueError(f"unknown strategy {state['compare']!r} to compare; known: {', '.join(STRATEGIES)}")
        for key in (*POLICY_KEYS, *own):
            if key in state:
                value = state[key]
                ctrl = self.param_sliders.get(key) if key in own else getattr(self, key)
                lo, hi = (ctrl.min, ctrl.max) if ctrl is not None else (0, 10**9)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                    raise ValueError(f"{key} must be a number in [{lo}, {hi}], got {value!r}")
        self._quiet = True
        try:
            for key in ("transcript", "strategy"):
                if key in state:
                    getattr(self, key).value = state[key]
            if "compare" in state:
                self.compare.value = state["compare"] or NONE
            for key in POLICY_KEYS:
                if key in state:
                    getattr(self, key).value = state[key]
            for key in own:
                if key in state:
                    self.param_sliders[key].value = int(state[key])
        finally:
            self._quiet = False
        self._policy_changed(call=state.get("call"))
        self.wait()  # from Python: the whole state, timeline included, when set() returns

    def _rebuild_params(self) -> None:
        """One slider per integer number of the chosen strategy (keep_last, clear_at_least, ...)."""
        for s in self.param_sliders.values():
            s.close()
        self.param_sliders = {}
        for key, value in _int_params(strategy_from(self.strategy.value)).items():
            hi = 50 if key == "keep_last" else 50_000
            s = widgets.IntSlider(value=value, min=0, max=max(hi, value), step=1 if hi == 50 else 500,
                                  description=key.replace("_", " "), continuous_update=False,
                                  style={"description_width": "110px"}, layout=widgets.Layout(width="420px"))
            s.observe(lambda _: self._policy_changed(), names="value")
            self.param_sliders[key] = s
        self.params_box.children = list(self.param_sliders.values())

    # --- replay ----------------------------------------------------------------------------------------------
    def messages(self, label: str | None = None) -> list[Any]:
        """The chosen transcript's messages (loaded once)."""
        label = label or str(self.transcript.value)
        if label not in self._messages:
            # legacy function calls read as the tool calls they are (SPEC C4), as replay and compare read them
            self._messages[label] = modernize_legacy_calls(self.sources[label]())
        return self._messages[label]

    def _calls(self, label: str) -> tuple[list[int], list[int]]:
        """The transcript's call positions and the turn of each message (what a replay's rows are keyed by)."""
        if label not in self._layouts:
            msgs = self.messages(label)
            self._layouts[label] = (call_positions(msgs), _turns(msgs))
        return self._layouts[label]

    def replayed(self, policy: ContextPolicy | None = None, *, label: str | None = None,
                 steps: Callable[..., Iterable[Any]] | bool = False, keep: Container[int] | None = None
                 ) -> Replayed:
        """The replay of the chosen transcript under `policy` (default: the sliders'), cached. Its views are kept
        for the calls in `keep` (default: the call on screen and the calls of its turn before it, whose lineage
        it continues, N3) and made from their turn when read (`ReplayViews`);
        a `-cache` variant keeps every one (E4: a view may carry over a turn, so no turn replays alone)."""
        policy = policy or self.policy()
        key = (label or str(self.transcript.value), policy)
        hit = self._cache.get(key)
        if hit is None:
            start = time.perf_counter()
            shown = self._shown(key[0], int(self.call.value)) if keep is None else keep
            views = ReplayViews(None if cache_variant(policy) is not None else shown,
                                partial(self._turn_view, key[0], key[1]))
            # the rows the timeline draws (no per-message state columns: S4, a third sooner) and every view; a
            # background replay (`steps` its cancellation points) has caches of its own (one thread each)
            rows = replay_messages(self.messages(key[0]), policy, session_id=key[0], facts=False, views=views,
                                   progress=steps, states=False,
                                   caches=None if callable(steps) else self._session_caches(key[0]))
            hit = Replayed(rows, views, (time.perf_counter() - start) * 1000)
            with self._lock:
                self._replay_ms[key[0]] = hit.ms
                if len(self._cache) >= CACHE_SIZE:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = hit
        return hit

    def _shown(self, label: str, call: int) -> Container[int]:
        """The calls whose views a whole replay keeps for call `call` on screen: its turn up to it (N3: its lineage
        is composed over them, `lineage_at`)."""
        if not 1 <= call <= len(self._calls(label)[0]):
            return {call}
        return range(self._turn_first(label, call), call + 1)

    def _session_caches(self, label: str) -> SessionCaches:
        """The transcript's replay caches (kernel thread only; a few kept)."""
        if label not in self._caches and len(self._caches) >= 4:
            self._caches.pop(next(iter(self._caches)))
        return self._caches.setdefault(label, SessionCaches())

    @property
    def current(self) -> Replayed:
        """The whole replay of the chosen transcript and policy (waits for the background replay)."""
        self.wait()
        if self._full is None:  # the background replay was cancelled by a change made while nobody waited
            self._full = self.replayed()
        return self._full

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background replay of the chosen policy (the timeline's rows) to be drawn."""
        job = self._job
        if job is not None and job.thread is not threading.current_thread():
            job.thread.join(timeout)
            if job.error is not None:
                raise job.error

    def _turn_first(self, label: str, call: int) -> int:
        """The first call of call `call`'s turn (1-based)."""
        calls, turns = self._calls(label)
        turn, first = turns[calls[call - 1] - 1], call
        while first > 1 and turns[calls[first - 2] - 1] == turn:
            first -= 1
        return first

    def view_at(self, call: int, policy: ContextPolicy | None = None) -> tuple[RequestView, int, int]:
        """(view, turn, iteration in its turn) of call `call` (1-based) under `policy` (default: the sliders'):
        from the whole replay when it is cached, else from a replay of its turn up to it alone (C2: the same
        view; cached per turn), else (a `-cache` variant, E4) from the whole replay."""
        policy = policy or self.policy()
        label = str(self.transcript.value)
        calls, turns = self._calls(label)
        first = self._turn_first(label, call)
        full = self._cache.get((label, policy))
        if full is None and cache_variant(policy) is not None:
            full = self.replayed(policy)
        if full is not None:
            return full.views[call - 1], turns[calls[call - 1] - 1], call - first + 1
        return self._turn_view(label, policy, call, first), turns[calls[call - 1] - 1], call - first + 1

    def _turn_view(self, label: str, policy: ContextPolicy, call: int, first: int | None = None) -> RequestView:
        """The view of call `call` from a replay of its turn up to it (cached per turn; not for `-cache` variants)."""
        calls, turns = self._calls(label)
        first = self._turn_first(label, call) if first is None else first
        key = (label, policy, first)
        views = self._turns_cache.get(key)
        if views is None or len(views) <= call - first:  # the turn up to this call (a later one extends it)
            stop = call
            if views:  # scrubbing on in the turn: twice as far as before, so a walk through a turn of n calls
                # replays O(n) calls in all, not O(n^2) (within the turn: its views need no other turn's)
                turn = turns[calls[first - 1] - 1]
                stop = min(max(call, first + 2 * len(views) - 1), len(calls))
                while stop > call and turns[calls[stop - 1] - 1] != turn:
                    stop -= 1
            views = []
            replay_messages(self.messages(label)[:calls[stop - 1] + 1], policy, session_id=label, facts=False,
                            views=views, first_call=first, states=False, caches=self._session_caches(label))
            with self._lock:
                if len(self._turns_cache) >= 4 * CACHE_SIZE:
                    self._turns_cache.pop(next(iter(self._turns_cache)))
                self._turns_cache[key] = views
        return views[call - first]

    def _chain_start(self, label: str, policy: ContextPolicy, call: int) -> int:
        """The call whose view `call`'s continues from the transcript (C7: its turn's first; a `-cache` variant's
        may continue the previous turn's, E4: the last call its whole replay says rebuilt)."""
        first = self._turn_first(label, call)
        if cache_variant(policy) is None:
            return first
        rows = self.replayed(policy, label=label).rows
        start = call
        while start > 1 and not rows[start - 1]["rebuilt"]:
            start -= 1
        return start

    def lineage_at(self, call: int, policy: ContextPolicy | None = None) -> Lineage | None:
        """SPEC N3: the lineage the live loop composes for call `call` under `policy` (default: the sliders'), over
        the chosen transcript: what each stored message up to it became across its turn's calls, and which call
        made each carried placeholder or summary (`replayed_lineage` over the views of its turn up to it; the
        last one composed per turn is kept, so a move to a later call of the turn composes only the calls
        between). None for a view the engine could not trace (its own rows are shown then)."""
        policy = policy or self.policy()
        label = str(self.transcript.value)
        calls, _ = self._calls(label)
        start = self._chain_start(label, policy, call)
        key = (label, policy, start)
        got = self._lineages.get(key)
        at, lineage = (got[0] + 1, got[1]) if got is not None and got[0] <= call else (start, None)
        try:
            for c in range(at, call + 1):
                view, _, iteration = self.view_at(c, policy)
                lineage = replayed_lineage(view, calls[c - 1], None if lineage is None else (lineage, calls[c - 2]),
                                           call=iteration)
        except ValueError:  # no trace to compose (the inspector shows the view's own rows)
            return None
        assert lineage is not None
        with self._lock:
            if len(self._lineages) >= CACHE_SIZE:
                self._lineages.pop(next(iter(self._lineages)))
            self._lineages[key] = (call, lineage)
            full = self._cache.get((label, policy))
            if full is not None and isinstance(full.views, ReplayViews):  # composed: the turn's earlier views can go
                full.views.release(range(start, call))
        return replace(lineage, transcript=self.messages(label))  # the rows are rebuilt from the stored messages

    def call_data(self, call: int, policy: ContextPolicy | None = None) -> CallData:
        """Gauge/inspector data of call `call` (1-based) under `policy` (default: the sliders'), as the live
        inspector shows that call (SPEC N3): before rows are the stored transcript up to the call, each with what
        the turn's calls did to it and which call did it (a placeholder or summary carried from an earlier call
        of the turn is named, C7), and `carried` says what the call carries."""
        policy = policy or self.policy()
        view, turn, iteration = self.view_at(call, policy)
        lineage = self.lineage_at(call, policy)
        return from_view(view if lineage is None else replace(view, lineage=lineage), turn=turn, iteration=iteration)

    # --- redraw ----------------------------------------------------------------------------------------------
    def _policy_changed(self, call: int | None = None) -> None:
        if self._quiet:
            return
        with fewer_collections():  # S4: the redraw allocates many objects that live on (REPLAY_GC_THRESHOLD)
            self._redraw(call)

    def _redraw(self, call: int | None) -> None:
        start = time.perf_counter()
        label, policy = str(self.transcript.value), self.policy()
        n = len(self._calls(label)[0])
        if call is not None and not 1 <= int(call) <= max(n, 1):
            raise ValueError(f"call must be in [1, {n}], got {call!r}")
        key = (label, policy)
        if self._job is not None:
            self._job.cancel.set()  # a replay for the previous policy: no longer wanted
        first = self._key is None
        with self._lock:
            self._key, self._n = key, n
            self._full = self._cache.get(key)
        if self._full is None and (first or not self.background or cache_variant(policy) is not None or n == 0
                                   or self._replay_ms.get(label, math.inf) <= self.wait_ms):
            # the first draw (it opens on the first compaction), no other way, or a whole replay quick enough to
            # wait for: timeline, gauge and inspector at once from it (no second replay of the call's turn)
            self._full = self.replayed(policy, keep=None if call is None else self._shown(label, int(call)))
        self._quiet = True
        try:
            self.call.max = max(n, 1)
            if call is not None:
                self.call.value = int(call)
            elif first and n and self._full is not None:
                compacted = [r["call"] for r in self._full.rows if r["compacted"]]
                self.call.value = int(compacted[0] if compacted else n)
        finally:
            self._quiet = False
        if self._full is not None:
            self._draw_timeline(key, self._full)
        else:  # gauge and inspector now, the timeline when its rows are replayed
            self.plot.add_class("mx-lab-stale")
        self._call_changed()
        self.last_ms["policy"] = (time.perf_counter() - start) * 1000
        if self._full is None:  # started after the redraw: it would share the interpreter with it
            other = None if self.compare.value == NONE else self.policy(self.compare.value)
            self._job = _Job(lambda steps: self._background(key, other, steps))
            self._job.thread.start()

    def _background(self, key: tuple[str, ContextPolicy], other: ContextPolicy | None,
                    steps: Callable[..., Iterable[Any]]) -> Replayed:
        try:
            full = self.replayed(key[1], label=key[0], steps=steps)
        except _Cancelled:
            raise
        except Exception as exc:  # said where the timeline would be (and raised again by wait())
            with self._lock:
                if self._key == key:
                    self.timeline.value = (f'<div style="{FONT}color:{MUTED}">the replay for the timeline failed: '
                                           f'{esc(type(exc).__name__)}: {esc(str(exc))}</div>')
                    self.plot.remove_class("mx-lab-stale")
            raise
        with self._lock:
            if self._key == key:
                self._full = full
                self._draw_timeline(key, full)
                self.status.value = self.status_html()
                self.shown_changed()
        if other is not None:  # the comparison's rows too: later call moves read both from the cache
            self.replayed(other, label=key[0], steps=steps)
        return full

    def _draw_timeline(self, key: tuple[str, ContextPolicy], full: Replayed) -> None:
        """The timeline of a whole replay (its HTML cached per transcript and policy)."""
        html = self._timelines.get(key)
        if html is None:
            if not full.rows:
                html = f'<div style="{FONT}color:{MUTED}">this transcript has no model calls</div>'
            else:
                req = timeline_frame(rows_as_requests(full.rows))
                layers = timeline_layers(req, f"replay · {key[1].strategy.label()} · tokens per call")
                html = THEME_STYLE + f'<div style="color:{MUTED}">{timeline_svg(layers)}</div>'
            if len(self._timelines) >= CACHE_SIZE:
                self._timelines.pop(next(iter(self._timelines)))
            self._timelines[key] = html
        self.timeline.value = html
        self.plot.remove_class("mx-lab-stale")
        self.redraws["timeline"] += 1

    def _call_changed(self) -> None:
        with self._lock:
            start = time.perf_counter()
            k = int(self.call.value)
            self.redraws["call"] += 1
            if not self._n:
                self.data = self.other = None
                self.gauge.value = self.inspector.value = self.versus.value = self.cursor.value = ""
            else:
                self.data = self.call_data(k)
                self.gauge.value = gauge_html(self.data)
                self.inspector.value = InspectorHTML(self.data, self.max_rows).to_html()
                self.cursor.value = self._cursor_html(k)
                self.versus.value = self._versus_html(k, self.data)
            self.last_ms["call"] = (time.perf_counter() - start) * 1000
            self.status.value = self.status_html()
            if self._full is not None:  # consistent (the timeline is this policy's): the snapshot follows
                self.shown_changed()

    def _cursor_html(self, call: int) -> str:
        left, top, right, bottom = BOX
        x = left + (call - 0.5) * (right - left) / self._n
        return (f'<div class="mx-lab-cursor" data-call="{call}" style="position:absolute;left:{100 * x / W:.3f}%;'
                f'top:{100 * top / 340:.2f}%;height:{100 * (bottom - top) / 340:.2f}%;width:0;'
                f'border-left:2px solid #e53935;opacity:.8"></div>')

    def _versus_html(self, call: int, data: CallData) -> str:
        """The comparison strategy on the same call: a compact gauge and one line of difference."""
        name = self.compare.value
        if name == NONE:
            self.other = None
            return ""
        self.other = self.call_data(call, self.policy(name))
        a, b = data.record, self.other.record
        va, vb = data.sent or (), self.other.sent or ()  # what each sent (N3: rebuilt from the lineage)
        same = 0
        for x, y in zip(va, vb, strict=False):
            if x != y:
                break
            same += 1
        mine = self.policy().strategy.label()
        delta = (a.after_tokens or 0) - (b.after_tokens or 0)
        line = (f"call {call}: <b>{esc(mine)}</b> sends {fmt_int(a.after_tokens)} "
                f"({chip(a.stage, color_of('stage', a.stage))}), <b>{esc(name)}</b> sends "
                f"{fmt_int(b.after_tokens)} ({chip(b.stage, color_of('stage', b.stage))}) · "
                f"{'+' if delta > 0 else ''}{fmt_int(delta)} tokens · {len(va)} vs {len(vb)} "
                f"messages, the first {same} identical")
        return (f'<div class="mx-lab-versus" style="{FONT};border-left:3px solid {MUTED};padding-left:8px;'
                f'margin:8px 0"><div style="margin:4px 0">{line}</div>'
                f'<div style="color:{MUTED}">versus {esc(name)} on the same call:</div>{gauge_html(self.other)}</div>'
                f'<div style="{FONT};color:{MUTED};margin-top:6px">inspector of {esc(mine)}, call {call}:</div>')

    def status_html(self) -> str:
        """The lab's state in one line (with a redraw counter the browser test waits on)."""
        full, n = self._full, self._n
        pol = self.policy()
        replay = (f"replay {full.ms:.0f} ms (cached per transcript and policy)" if full is not None
                  else f"timeline: replaying {n:,} calls (this call's turn replayed alone)")
        return (f'<div class="mx-lab-state" data-redraw="{self.redraws["call"]}" '
                f'data-timeline="{int(full is not None)}" style="{FONT}color:{MUTED}">'
                f'{esc(str(self.transcript.value))} · {n:,} model calls · {esc(pol.strategy.label())} · window '
                f'{pol.context_window_tokens:,} · threshold {pol.threshold:,} · tail {pol.keep_recent_tokens:,} · '
                f'{replay} · call redraw {self.last_ms.get("call", 0):.0f} ms</div>')

    def show(self, again: str = "PolicyLab(...).show()") -> None:
        """Display the lab with a static snapshot after it that follows each redraw: a saved notebook keeps the
        last state as HTML (N2); `again`: how the reader opens it again (named in the snapshot's note)."""
        from mxclaw_nb.notebook.showlive import show_live

        show_live(self, name="policy lab", again=again)

    # --- static form -----------------------------------------------------------------------------------------
    def to_html(self) -> str:
        """The last state: settings line, timeline with the chosen call, gauge, comparison and inspector."""
        plot = (f'<div style="position:relative;max-width:850px">{self.timeline.value}{self.cursor.value}</div>'
                if self._n else self.timeline.value)
        call = f'<div style="{FONT}"><b>call {self.call.value}</b> of {self._n:,}</div>'
        return (f'<div class="mx-policy-lab-static" style="{FONT}"><b>policy lab</b>{self.status.value}{plot}{call}'
                f'{self.gauge.value}{self.versus.value}{self.inspector.value}</div>')

    def to_text(self) -> str:
        """The last state as text."""
        pol = self.policy()
        lines = [f"policy lab · {self.transcript.value} · {self._n:,} model calls · "
                 f"{pol.strategy.label()} · window {pol.context_window_tokens:,} · threshold {pol.threshold:,} · "
                 f"tail {pol.keep_recent_tokens:,}"]
        if self.data is not None:
            d = self.data.record
            lines.append(f"call {self.call.value}: turn {d.turn} · {d.stage} · {fmt_int(d.before_tokens)} -> "
                         f"{fmt_int(d.after_tokens)} tokens")
        if self.other is not None:
            o = self.other.record
            lines.append(f"versus {self.compare.value}: {o.stage} · {fmt_int(o.after_tokens)} tokens")
        return "\n".join(lines)
