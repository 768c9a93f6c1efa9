"""How well each token counter tracks exact o200k_base counts on real transcripts (SPEC T2).

Why: the threshold (C2) only protects the context window if the counter behind it does not under-count.
This module measures that on the shared transcripts (or any JSONL of conversations) and returns a pandas
DataFrame for notebooks; ``bench/estimator_accuracy.py`` prints the same table.

Reference: the exact ``o200k_base`` count of each message as a provider sees it (``FunctionCounter``:
text + tool-call JSON + 4 framing tokens per message; ``framing=0`` compares the text only, which is how
the first figures were taken). Counters compared, per role and overall:

- ``estimate``: SPEC C1; ``cl100k_base``: exact counts with the older encoding (same framing).
- ``calibrated@k``: a factor learned per conversation from its first ``k`` messages, their exact totals
  standing in for the provider's reported ``prompt_tokens``: one report for the leading system messages
  and one for the first ``k`` messages, so the factor is the segment ratio of the conversation messages
  among the first ``k`` (``min_segment=1``); scored on the messages after the first ``k`` only (the ones
  it would have to estimate). ``estimate@k`` scores C1 on the same messages, for a like-for-like view.
- ``calibrated (online)``: what the loop does (T3): before every assistant message (a model call) the
  provider "reports" the exact total of everything before it; each message is counted with the factor
  learned from the calls before it.
- role ``request``: request totals at every model call after the first. ``estimate`` and ``cl100k_base``
  sum their counts; ``calibrated (online)`` is ``anchored_total``: the previous call's reported total +
  calibrated counts of the messages added since. This is the number the threshold is compared with.

``ratio`` = counter / exact; ``under`` = share of rows with counter < exact.

``replay_window`` runs a transcript's model calls through the context engine itself with each counter
(the calibrated one learning from "reported" exact usage as the loop does) and measures every sent view in
exact tokens; ``chain_conversations`` builds a session long enough for a 32k window from consecutive ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pandas as pd

from mxclaw_nb.analysis.jsonl import read_jsonl
from mxclaw_nb.context.counters import (
    MESSAGE_OVERHEAD_TOKENS,
    CalibratedCounter,
    EstimateCounter,
    FunctionCounter,
    TokenCounter,
)
from mxclaw_nb.tokenizers import exact_counter, unavailable_reason

__all__ = ["DEFAULT_TRANSCRIPTS", "accuracy_records", "accuracy_table", "chain_conversations", "load_conversations",
           "replay_summary", "replay_window"]

#: ``../shared/transcripts`` next to the repository checkout (the project's shared real transcripts).
DEFAULT_TRANSCRIPTS = Path(__file__).resolve().parents[3] / "shared" / "transcripts"
ROLE_ORDER = ("system", "user", "assistant", "tool", "all", "request")


def load_conversations(path: str | Path = DEFAULT_TRANSCRIPTS) -> Iterator[tuple[str, list[dict]]]:
    """Yield (id, messages) from a ``.jsonl`` file or every ``*.jsonl`` in a directory."""
    root = Path(path)
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else [root]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no transcripts (*.jsonl) found at {root}")
    for file in files:
        for lineno, row, error in read_jsonl(file):
            if error is not None:
                raise ValueError(f"{file}:{lineno}: {error}")
            messages = row.get("messages") if isinstance(row, dict) else None
            if not isinstance(messages, list):
                raise ValueError(f"{file}:{lineno}: expected an object with a 'messages' list")
            yield str(row.get("id", f"{file.name}:{lineno}")), messages


def _exact(name: str, framing: int) -> TokenCounter:
    counter = exact_counter(name)
    if not isinstance(counter, FunctionCounter):
        raise RuntimeError(f"exact counter {name} is not available: {unavailable_reason(name)}")
    return FunctionCounter(name, counter.text_count, per_message=framing)


def accuracy_records(conversations: Iterable[tuple[str, Sequence[dict]]], k: int = 8,
                     framing: int = MESSAGE_OVERHEAD_TOKENS) -> pd.DataFrame:
    """One row per (counter, scored message or request): conv, index, role, counter, count, exact, ratio.

    ``framing`` is the per-message overhead added to the exact counts (0 compares text only).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 (messages used to learn the calibration factor), got {k}")
    reference, cl100k = _exact("o200k_base", framing), _exact("cl100k_base", framing)
    estimate = EstimateCounter()
    rows: list[tuple[str, int, str, str, int, int]] = []
    for conv, messages in conversations:
        msgs = [m for m in messages if isinstance(m, dict)]
        exact = [reference.count(m) for m in msgs]
        est = [estimate.count(m) for m in msgs]
        cl = [cl100k.count(m) for m in msgs]
        roles = [str(m.get("role")) for m in msgs]
        for i in range(len(msgs)):
            rows.append((conv, i, roles[i], "estimate", est[i], exact[i]))
            rows.append((conv, i, roles[i], "cl100k_base", cl[i], exact[i]))
        # Two reports: one for the leading system messages, one for the first k messages, so the factor is
        # learned from the k - s conversation messages (a segment) and not from the system prompt.
        s = next((j for j, role in enumerate(roles) if role not in ("system", "developer")), len(msgs))
        first_k = CalibratedCounter(min_segment=1)
        if 0 < s < k:
            first_k = first_k.observe(msgs[:s], sum(exact[:s]))
        first_k = first_k.observe(msgs[:k], sum(exact[:k]))
        for i in range(k, len(msgs)):
            rows.append((conv, i, roles[i], f"calibrated@{k}", first_k.count(msgs[i]), exact[i]))
            rows.append((conv, i, roles[i], f"estimate@{k}", est[i], exact[i]))
        online, last_call = CalibratedCounter(), None
        for i, m in enumerate(msgs):
            rows.append((conv, i, roles[i], "calibrated (online)", online.count(m), exact[i]))
            if roles[i] != "assistant" or i == 0:
                continue
            # A model call whose prompt is msgs[:i]; the provider reports its exact total.
            total = sum(exact[:i])
            if last_call is not None:
                anchored = online.anchored_total(msgs[:last_call], sum(exact[:last_call]), msgs[last_call:i])
                rows.append((conv, i, "request", "calibrated (online)", anchored, total))
                rows.append((conv, i, "request", "estimate", sum(est[:i]), total))
                rows.append((conv, i, "request", "cl100k_base", sum(cl[:i]), total))
            online, last_call = online.observe(msgs[:i], total), i
    frame = pd.DataFrame(rows, columns=["conv", "index", "role", "counter", "count", "exact"])
    frame["ratio"] = frame["count"] / frame["exact"].where(frame["exact"] > 0)
    return frame


def accuracy_table(transcripts: str | Path | Iterable[tuple[str, Sequence[dict]]] = DEFAULT_TRANSCRIPTS,
                   k: int = 8, framing: int = MESSAGE_OVERHEAD_TOKENS) -> pd.DataFrame:
    """Per counter and role: n, share under-counted, median / 5th-percentile / min ratio vs exact o200k."""
    convs = load_conversations(transcripts) if isinstance(transcripts, str | Path) else transcripts
    records = accuracy_records(convs, k=k, framing=framing)
    per_message = records[records["role"] != "request"]
    frames = [records, per_message.assign(role="all")]
    data = pd.concat(frames, ignore_index=True)
    data["under"] = data["count"] < data["exact"]
    table = data.groupby(["counter", "role"], sort=False).agg(
        n=("count", "size"),
        under_share=("under", "mean"),
        median_ratio=("ratio", "median"),
        p5_ratio=("ratio", lambda s: s.quantile(0.05)),
        min_ratio=("ratio", "min"),
    ).reset_index()
    counter_order = ["estimate", "cl100k_base", f"estimate@{k}", f"calibrated@{k}", "calibrated (online)"]
    table["counter"] = pd.Categorical(table["counter"], counter_order, ordered=True)
    roles = [r for r in ROLE_ORDER if r in set(table["role"])] + sorted(set(table["role"]) - set(ROLE_ORDER))
    table["role"] = pd.Categorical(table["role"], roles, ordered=True)
    return table.sort_values(["counter", "role"]).reset_index(drop=True)


class _MemoCounter:
    """Remembers counts by sent content, so replaying hundreds of overlapping views tokenizes each once."""

    def __init__(self, counter: TokenCounter) -> None:
        self.name, self._counter, self._memo = counter.name, counter, {}

    def count(self, message: dict) -> int:
        content, calls = message.get("content"), message.get("tool_calls")
        key = (message.get("role"), message.get("name"),
               content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str),
               json.dumps(calls, sort_keys=True, default=str) if calls else None)
        if key not in self._memo:
            self._memo[key] = self._counter.count(message)
        return self._memo[key]


def chain_conversations(conversations: Iterable[tuple[str, Sequence[dict]]], min_exact_tokens: int
                        ) -> list[dict]:
    """One long session from consecutive conversations: the first one's system messages, then every
    conversation's non-system messages in order, until the exact o200k total reaches ``min_exact_tokens``."""
    reference = _exact("o200k_base", MESSAGE_OVERHEAD_TOKENS)
    session: list[dict] = []
    total = 0
    for _, messages in conversations:
        msgs = [m for m in messages if isinstance(m, dict)]
        part = msgs if not session else [m for m in msgs if m.get("role") not in ("system", "developer")]
        session.extend(part)
        total += sum(reference.count(m) for m in part)
        if total >= min_exact_tokens:
            break
    return session


def replay_window(messages: Sequence[dict], window: int, counters: Sequence[str] = ("estimate", "o200k_base",
                  "calibrated"), threshold_ratio: float = 0.8, keep_recent_tokens: int = 8_000) -> pd.DataFrame:
    """Replay a transcript's model calls through the context engine with each counter (SPEC T2).

    Every assistant message is a model call whose input is the transcript before it; the request view is
    built with ``ContextPolicy(window, threshold_ratio, keep_recent_tokens, counter)`` and measured with
    exact o200k counts (+ framing). ``calibrated`` learns as the loop does (T3): after each call it
    observes the sent view with its exact total standing in for the provider's ``prompt_tokens``, and
    counts with C1 until the first report. Returns one row per (counter, call): stage, counted total,
    exact total, and whether the exact total exceeds the window (the provider would reject it).
    """
    from mxclaw_nb.analysis.replay import call_positions
    from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view
    from mxclaw_nb.tokenizers import counter_by_name

    reference = _MemoCounter(_exact("o200k_base", MESSAGE_OVERHEAD_TOKENS))
    msgs = [m for m in messages if isinstance(m, dict)]
    calls = call_positions(msgs)
    rows = []
    for label in counters:
        counter: TokenCounter | None = None if label == "estimate" else counter_by_name(label)
        cache = TokenCache()
        for i in calls:
            active = counter
            if isinstance(counter, CalibratedCounter) and not counter.calibrated:
                active = None  # T3: the estimate until the provider has reported usage once
            policy = ContextPolicy(window, threshold_ratio, keep_recent_tokens, counter=active)
            view = build_request_view(msgs[:i], policy, cache=cache)
            exact = sum(reference.count(m) for m in view.messages)
            rows.append((label, i, view.stage, view.after_tokens, exact, exact > window))
            if isinstance(counter, CalibratedCounter):
                counter = counter.observe(view.messages, exact)
    return pd.DataFrame(rows, columns=["counter", "call_at", "stage", "counted", "exact", "over_window"])


def replay_summary(replay: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per counter: calls, requests over the real window, worst exact total, counted/exact ratios, stages."""
    data = replay.assign(ratio=replay["counted"] / replay["exact"])
    out = data.groupby("counter", sort=False).agg(
        calls=("exact", "size"), over_window=("over_window", "sum"), max_exact=("exact", "max"),
        median_ratio=("ratio", "median"), min_ratio=("ratio", "min"),
        compactions=("stage", lambda s: int((s != "unchanged").sum())),
    ).reset_index()
    out.insert(3, "max_exact_share_of_window", out["max_exact"] / window)
    return out
