"""What a long session costs to store and to read back (SPEC S1, S4, N3, L4): the closing-note figures.

Why: a session of 1,000 model calls must cost what its new messages cost — stored bytes per call flat
once compaction is stable, the file close to what the transcript alone needs, and the readers the
notebook uses (`requests()`, `%agent view`, `%agent timeline`) fast because they load only what they
show. This script drives the real loop (Agent + DuckDB store) with an in-process scripted provider
(no HTTP: the figures are the store's and the loop's, not the network's), then measures:

* stored bytes per call (requests.extra + provenance + summary) by history length: the mean over calls
  200-299, 500-599 and 900-999, in two sessions whose compaction is stable — `summary` (a small window:
  each turn's first call summarizes, the others carry it) and `micro` (a larger window in which C5's
  placeholders keep the session under the threshold for all its calls);
* each session file vs a file holding only its transcript;
* `Store.requests()`, the `%agent view` reader (last record + transcript) and the `%agent timeline`
  reader (`Store.requests(columns=TIMELINE_COLUMNS)`), medians of several runs;
* the store's write time per call (inserts and commits);
* `%agent replay` (analysis.replay under the session's policy) over its first 500 calls.

    .venv/bin/python bench/session_cost_bench.py [--calls 1000] [--runs 5] [--path BASELINE_CHECKOUT]
        [--only summary|micro]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if "--path" in sys.argv:  # a baseline checkout: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, sys.argv[sys.argv.index("--path") + 1])
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb import Agent  # noqa: E402
from mxclaw_nb.provider.answer import Completion, Usage  # noqa: E402
from mxclaw_nb.store.writer import Store  # noqa: E402


class ScriptedProvider:
    """Answers `per_turn - 1` read_file calls, then text; deterministic, in-process."""

    model, base_url, is_demo = "bench-model", "http://bench.invalid/v1", False

    def __init__(self, per_turn: int) -> None:
        self.per_turn, self.n = per_turn, 0

    def complete(self, messages: list[dict[str, Any]], tools: Any, on_delta: Any = None) -> Completion:
        self.n += 1
        if self.n % self.per_turn:
            call = {"id": f"call_{self.n}", "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": "notes.txt"})}}
            msg: dict[str, Any] = {"role": "assistant", "content": f"Reading the notes again (step {self.n}).",
                                   "tool_calls": [call]}
        else:
            msg = {"role": "assistant", "content": f"Done with part {self.n}: the notes say what they say."}
        return Completion(msg, Usage(None, None), "stop", 0.0, self.model)


def build_session(root: Path, calls: int, per_turn: int = 10, window: int = 16_000, name: str = "session"
                  ) -> tuple[Path, str, float]:
    """Run `calls` model calls through the real loop; return (db, session id, store ms per call)."""
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "notes.txt").write_text("a line of notes about the inventory tool\n" * 40)
    db = root / f"{name}.duckdb"
    agent = Agent(workspace=ws, db=str(db), provider=ScriptedProvider(per_turn), approval="allow",
                  context_window_tokens=window, keep_recent_tokens=window // 4, approver=None)
    store_s = 0.0
    commits = 0  # a `_flush` is one commit; an `_insert` outside a deferred() block is one too
    for name in ("_insert", "_flush"):  # every write of the store goes through one of these
        orig = getattr(agent.store, name, None)
        if orig is None:
            continue

        def timed(*a: Any, _orig: Any = orig, _name: str = name, **k: Any) -> Any:
            nonlocal store_s, commits
            if _name == "_flush" or getattr(agent.store, "_pending", None) is None:
                commits += 1
            t = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                store_s += time.perf_counter() - t
        setattr(agent.store, name, timed)
    for turn in range(calls // per_turn):
        agent.run(f"Turn {turn}: check the notes once more and report.")
    sid = agent.session_id
    agent.close()
    global COMMITS_PER_CALL
    COMMITS_PER_CALL = commits / calls
    return db, sid, store_s * 1e3 / calls


COMMITS_PER_CALL = 0.0  # of the last session built


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name) and p.is_file())


def transcript_only(src: Path, sid: str, dst: Path) -> int:
    """Size of a file holding the same session's transcript (messages + session row) only."""
    with Store(src) as store:
        rows = store.load_transcript(sid)
    with Store(dst) as out:
        out.create_session(session_id=sid)
        out.append_messages(sid, rows, turn=0)
    return file_bytes(dst)


WINDOWS = ((200, 300), (500, 600), (900, 1000))  # calls whose mean record size is compared (history grows)


def per_call_bytes(store: Store, sid: str) -> dict[str, Any]:
    """Mean request-record bytes (extra + provenance + summary) over each of WINDOWS, and the stages there."""
    df = store.sql("SELECT seq, stage, coalesce(strlen(CAST(extra AS VARCHAR)), 0) AS extra, "
                   "coalesce(strlen(CAST(provenance AS VARCHAR)), 0) AS prov, "
                   "coalesce(strlen(summary), 0) AS summary FROM requests WHERE session_id = ? ORDER BY seq",
                   [sid])
    total = df["extra"] + df["prov"] + df["summary"]
    out: dict[str, Any] = {}
    for a, b in WINDOWS:
        if len(df) >= b:
            out[f"{a}-{b - 1}"] = float(total.iloc[a:b].mean())
            out[f"stages {a}-{b - 1}"] = ", ".join(f"{k} {v}" for k, v in df["stage"].iloc[a:b].value_counts().items())
            by_stage = total.iloc[a:b].groupby(df["stage"].iloc[a:b]).mean()  # the same stage over a longer history
            out[f"by stage {a}-{b - 1}"] = {str(k): float(v) for k, v in by_stage.items()}
    out["all"] = float(total.mean())
    return out


def timed_median(fn: Any, runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def readers(db: Path, sid: str, runs: int) -> dict[str, float]:
    """The three readers, as the magics call them (notebook/shown.py): medians in ms."""
    from mxclaw_nb.widgets.data import from_request
    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.timeline import TokenTimeline, timeline_frame

    try:
        from mxclaw_nb.store.reader import TIMELINE_COLUMNS
    except ImportError:  # a baseline checkout
        TIMELINE_COLUMNS = None  # noqa: N806
    with Store(db) as store:
        store.sessions()  # open + warm
        TokenTimeline(store.requests(sid), session_id=sid[:8])  # matplotlib imported once, outside the timing
        full = timed_median(lambda: store.requests(sid), runs)

        def view() -> None:
            last = store.requests(sid, last=1) if TIMELINE_COLUMNS else store.requests(sid)
            from_request(last.iloc[-1], transcript=store.load_transcript(sid))

        def inspector() -> None:  # what `%agent view` shows: the inspector of the last call, as static HTML
            last = store.requests(sid, last=1) if TIMELINE_COLUMNS else store.requests(sid)
            CompactionInspector(last.iloc[-1], transcript=store.load_transcript(sid)).to_html()

        def load_view() -> Any:  # what `%agent view` reads from the store: the last record and the transcript
            last = store.requests(sid, last=1) if TIMELINE_COLUMNS else store.requests(sid)
            return last.iloc[-1], store.load_transcript(sid)

        def load_timeline() -> Any:
            return store.requests(sid, columns=TIMELINE_COLUMNS) if TIMELINE_COLUMNS else store.requests(sid)

        df = load_timeline()
        row, transcript = load_view()
        return {"requests()": full, "%agent view (record + rows)": timed_median(view, runs),
                "  of which load (store)": timed_median(load_view, runs),
                "  of which rows rebuilt (engine)": timed_median(lambda: from_request(row, transcript=transcript),
                                                                 runs),
                "  with the inspector's HTML": timed_median(inspector, runs),
                "%agent timeline": timed_median(lambda: TokenTimeline(load_timeline(), session_id=sid[:8]), runs),
                "  of which load (store) ": timed_median(load_timeline, runs),
                "  of which frame": timed_median(lambda: timeline_frame(df), runs)}


def replay_ms(db: Path, sid: str, runs: int, calls: int = 500) -> float:
    """`%agent replay` over the session's first `calls` model calls, under the policy it ran with."""
    from mxclaw_nb.analysis.replay import replay
    from mxclaw_nb.context import ContextPolicy

    with Store(db) as store:
        messages = store.load_transcript(sid)
    cut = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    messages = messages[: cut[calls] if len(cut) > calls else len(messages)]
    policy = ContextPolicy(16_000, 0.8, 4_000)
    return timed_median(lambda: replay((sid, messages), policy), runs)


SCENARIOS = {"summary": 16_000, "micro": 128_000}  # context window of each session (keep_recent = window / 4)


def main() -> None:
    """Build the long sessions and print their storage and reader figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", choices=sorted(SCENARIOS), help="one of the two sessions")
    ap.add_argument("--path", help="run against another checkout (e.g. the baseline) instead of this one")
    args = ap.parse_args()
    for name, window in SCENARIOS.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory(prefix="mxclaw-cost-") as tmp:
            root = Path(tmp)
            t = time.perf_counter()
            db, sid, store_ms = build_session(root, args.calls, window=window, name=name)
            built = time.perf_counter() - t
            size = file_bytes(db)
            bare = transcript_only(db, sid, root / "bare.duckdb")
            with Store(db) as store:
                per = per_call_bytes(store, sid)
            times = readers(db, sid, args.runs)
            if name == "summary":
                times["%agent replay, 500 calls"] = replay_ms(db, sid, args.runs)
        print(f"== {name}-stable session (window {window:,}): {args.calls} calls built in {built:.1f} s; store writes "
              f"{store_ms:.2f} ms per call (mean; encoding, inserts and commits), "
              f"{COMMITS_PER_CALL:.2f} commits per call")
        print(f"file {size / 1e6:.2f} MB vs transcript-only {bare / 1e6:.2f} MB: {size / bare:.2f}x (target <= 2x: "
              f"{'met' if size <= 2 * bare else 'NOT met'})")
        windows = [k for k in per if k[0].isdigit()]
        print("request-record bytes per call (extra+provenance+summary), mean over calls "
              + ", ".join(f"{k}: {per[k]:.0f}" for k in windows)
              + (f"; last/first {per[windows[-1]] / max(per[windows[0]], 1):.2f}" if len(windows) > 1 else ""))
        for k in windows:
            print(f"  stages of calls {k}: {per['stages ' + k]}")
        stages = sorted(set.intersection(*(set(per["by stage " + k]) for k in windows)))
        for stage in stages:  # flat: the same stage stores the same bytes however long the history
            got = [per["by stage " + k][stage] for k in windows]
            print(f"  {stage} calls: " + ", ".join(f"{k}: {v:.0f}" for k, v in zip(windows, got, strict=True))
                  + f" bytes; last/first {got[-1] / max(got[0], 1):.2f}, last/middle {got[-1] / max(got[-2], 1):.2f} "
                  "(target: flat, <= 1.1, once compaction is stable: the same stage mix in both windows)")
        for label, ms in times.items():
            if label.startswith("  "):  # a part of the reader above: no target of its own
                print(f"{label:<34} {ms:8.1f} ms")
                continue
            target = 500 if "replay" in label else 100
            print(f"{label:<34} {ms:8.1f} ms (median of {args.runs}; target < {target} ms: "
                  f"{'met' if ms < target else 'NOT met'})")


if __name__ == "__main__":
    main()
