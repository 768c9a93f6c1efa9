"""The lab's redraw and `%agent timeline` give the same HTML and SVG as another revision, byte for byte (S4, N2).

Why: the display half of a lab redraw (timeline, gauge, inspector) was made cheaper without changing what it
shows; this is the check that it shows the same. It captures every output of both revisions on the same inputs and
compares them: the policy lab on a 500-call session under every strategy (and a comparison), on a session with
kernel tools and frozen-context system messages, and on the shipped datasets (timeline, cursor, gauge, versus line,
inspector, text form, the before/after frames, the layer split, at several calls of each); `TokenTimeline` (what
`%agent timeline` shows) of the same replays as `store.requests()`-shaped frames; and, from real DuckDB stores made
once over the shipped test server (model summaries with their summary calls, reported and unreported prompt cache,
cache-aware strategies), `TokenTimeline` of `store.requests()` as `%agent timeline` reads it plus the gauge and the
inspector of every stored call. The other revision is unpacked with `git archive` (nothing checked out); both read
the same stores. The inspector's element ids are random per output, so both runs draw them from one counter.

    .venv/bin/python bench/redraw_check.py --rev main            # exit 1 when an output differs
    .venv/bin/python bench/redraw_check.py --rev main --quick    # 12 dataset conversations instead of all 73
"""

from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STORES = r'''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from mxclaw_nb.__main__ import DEMO_PROMPTS
from mxclaw_nb.agent import Agent
from mxclaw_nb.context.model_summary import ASK
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider import OpenAIProvider
from tests.test_loop_cache_aware import _two_turns
from tests.test_model_summary import _agent, _turn, good_summary
root, out = Path(sys.argv[2]), []
with TestServer(answers={ASK: good_summary}) as server:  # C11: merged model summaries, their summary calls
    agent = _agent(server, root / "ms")
    for k in range(6):
        _turn(agent, k)
    out.append((str(root / "ms" / "c11.duckdb"), agent.session_id))
    agent.store.close()
for report in (True, False):  # E1/E2: the prompt cache reported by the provider, or est.
    tmp = root / f"demo{int(report)}"
    tmp.mkdir()
    with TestServer(demo=True) as srv:
        srv.stream_delay, srv.report_cache = 0.0, report
        provider = OpenAIProvider(base_url=srv.base_url, api_key="k", model="gpt-4o-mini", stream=True)
        agent = Agent(model="gpt-4o-mini", provider=provider, approval="allow", home=tmp, db=str(tmp / "v.duckdb"),
                      context_window_tokens=1_100, keep_recent_tokens=200)
        for prompt in DEMO_PROMPTS:
            agent.run(prompt)
    out.append((str(tmp / "v.duckdb"), agent.session_id))
    agent.store.close()
for strategy in ("masking-cache", "article-cache"):  # E4: kept the warm prefix
    tmp = root / strategy
    tmp.mkdir()
    agent, _, _ = _two_turns(tmp, strategy, 10.0)
    out.append((str(tmp / f"{strategy}.duckdb"), agent.session_id))
    agent.store.close()
print(json.dumps(out))
'''

CAPTURE = r'''
import itertools, json, pickle, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/bench")
import mxclaw_nb.widgets.inspector as inspector


class _Ids:  # the inspector's element ids from one counter (random otherwise)
    n = itertools.count()

    @classmethod
    def uuid4(cls):
        return type("U", (), {"hex": f"{next(cls.n):032x}"})()


inspector.uuid = _Ids
from mxclaw_nb.analysis.replay import rows_as_requests
from mxclaw_nb.context.strategies import STRATEGIES
from mxclaw_nb.store import Store
from mxclaw_nb.store.reader import TIMELINE_COLUMNS
from mxclaw_nb.widgets.data import after_frame, before_frame, layer_split, requests_from_views
from mxclaw_nb.widgets.gauge import ContextGauge
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.lab import PolicyLab
from mxclaw_nb.widgets.timeline import TokenTimeline, timeline_frame, timeline_layers, timeline_svg
from tests.test_lab import long_session
from timeline_bench import session_frame

stores, quick, out = json.loads(sys.argv[2]), sys.argv[3] == "1", {}


def put(key, value):
    assert key not in out, key
    out[key] = value


def frame(df):
    return (repr(list(df.dtypes.astype(str).items())) + repr(df.index) + repr(df.attrs)
            + df.to_json(orient="split", default_handler=str, date_format="iso"))


def lab_calls(prefix, lab, calls):
    for call in calls:
        lab.call.value = call
        key = f"{prefix}@{call}"
        for part in ("timeline", "cursor", "gauge", "versus", "inspector"):
            put(f"{key}:{part}", getattr(lab, part).value)
        put(f"{key}:text", lab.to_text())
        put(f"{key}:frames", frame(before_frame(lab.data)) + frame(after_frame(lab.data)))
        put(f"{key}:split", repr(layer_split(lab.data.after, "tokens"))
            + repr(layer_split(lab.data.before, "tokens_after")))


def timeline(df, title=None, session_id=None):
    tl = TokenTimeline(df, title=title, session_id=session_id)
    return tl.to_html() + tl.to_text() + repr(tl.layers) + frame(tl.data) + frame(tl.compactions)


def kernel_session(calls=60):
    msgs = [{"role": "system", "content": "You are a notebook agent."},
            {"role": "system", "content": "[project instructions]\nuse pandas"},
            {"role": "system", "content": "[memory snapshot]\nthe user likes plots"},
            {"role": "developer", "content": "[skill index]\n- plot"}]
    tools = ["python", "kernel_variables", "notebook_cells", "read_file", "run_shell"]
    for n in range(calls):
        if n % 6 == 0:
            msgs.append({"role": "user", "content": f"step {n}: 数据 analysis please"})
        cid = f"k{n}"
        msgs.append({"role": "assistant", "content": "let me look" if n % 3 else None, "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": tools[n % len(tools)], "arguments": json.dumps({"code": f"x{n}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"out {n} 结果\n" * (30 + 7 * (n % 11)),
                     **({"is_error": True} if n % 7 == 3 else {})})
    return [*msgs, {"role": "assistant", "content": "done"}]


lab = PolicyLab({"s": long_session(500)}, datasets=False, window=32_000, keep_recent=4_000, wait_ms=1e9)
for strategy in STRATEGIES:
    for versus in ((None, "article") if strategy == "masking" else (None,)):
        lab.set(strategy=strategy, compare=versus or "(none)")
        lab.wait()
        first = next((r["call"] for r in lab.current.rows if r["compacted"]), 1)
        lab_calls(f"long500/{strategy}/{versus}", lab, sorted({1, 37, first, 250, 450, 451, 500}))
        if versus is None:
            req = rows_as_requests(lab.current.rows)
            layers = timeline_layers(timeline_frame(req), "x")
            put(f"rows/long500/{strategy}", frame(req) + frame(timeline_frame(req)) + repr(layers)
                + timeline_svg(layers, ink="#123", standalone=True))
kernel = PolicyLab({"k": kernel_session()}, datasets=False, window=6_000, keep_recent=1_000, wait_ms=1e9, max_rows=40)
for strategy in STRATEGIES:
    kernel.set(strategy=strategy)
    kernel.wait()
    lab_calls(f"kernel/{strategy}", kernel, sorted({1, 10, 30, kernel._n // 2, kernel._n}))
    last = kernel.current.views[-1]
    put(f"kernel/{strategy}:widgets", CompactionInspector(last).to_html() + ContextGauge(last).to_html())
datasets = PolicyLab(datasets=True, window=8_000, keep_recent=1_000, wait_ms=1e9)
for i, label in enumerate(list(datasets.sources)[:12 if quick else None]):
    for strategy in ("article", "masking", "clearing", "model-summary") if i % 3 == 0 else ("article", "masking"):
        datasets.set(transcript=label, strategy=strategy)
        datasets.wait()
        n, full = datasets._n, datasets.current
        lab_calls(f"ds/{label}/{strategy}", datasets, sorted({1, max(1, n // 2), n}))
        req = rows_as_requests(full.rows)
        put(f"rows/{label}/{strategy}", frame(req) + frame(timeline_frame(req))
            + repr(timeline_layers(timeline_frame(req))))
        put(f"timeline/{label}/{strategy}", timeline(requests_from_views(full.views, [r["turn"] for r in full.rows]),
                                                     title=f"{label} {strategy}"))
        ins = CompactionInspector(full.views[-1])
        put(f"widgets/{label}/{strategy}", ins.to_html() + ins.to_text() + ins._before.value + ins._after.value
            + ContextGauge(full.views[-1]).to_html())
for db, sid in stores:  # what %agent timeline, %agent gauge and %agent view read
    store = Store(db, read_only=True)
    transcript = store.load_transcript(sid)
    for columns in (TIMELINE_COLUMNS, None):
        for summary_calls in (True, False):
            put(f"store/{Path(db).parent.name}/{columns is None}/{summary_calls}",
                timeline(store.requests(sid, columns=columns, summary_calls=summary_calls), session_id=sid[:8]))
    req = store.requests(sid)
    for i in range(len(req)):
        row = req.iloc[i]
        for given in (transcript, None):
            ins = CompactionInspector(row, transcript=given)
            put(f"store/{Path(db).parent.name}/{i}/{given is None}",
                ContextGauge.from_request(row, given).to_html() + ins.to_html() + ins.to_text()
                + frame(ins.before_df) + frame(ins.after_df))
    store.close()
for n in (10, 1000):  # bench/timeline_bench.py's frames: calibrated, reported and cached counts
    put(f"bench/{n}", timeline(session_frame(n), title="bench"))
pickle.dump(out, sys.stdout.buffer)
'''


def capture(tree: str, stores: str, quick: bool) -> dict[str, str]:
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", CAPTURE, tree, stores, "1" if quick else "0"],
                         capture_output=True, cwd=tree, check=False)
    if run.returncode:
        raise SystemExit(f"capture in {tree} failed:\n{run.stderr.decode()[-3000:]}")
    out: dict[str, str] = pickle.loads(run.stdout)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="main", help="the revision to compare with (default: main)")
    ap.add_argument("--quick", action="store_true", help="12 dataset conversations instead of all")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "rev"
        other.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(other)], input=archive.stdout, check=True)
        (Path(tmp) / "stores").mkdir()
        made = subprocess.run([sys.executable, "-W", "ignore", "-c", STORES, str(ROOT), str(Path(tmp) / "stores")],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        if made.returncode:
            raise SystemExit(f"making the stores failed:\n{made.stderr[-3000:]}")
        stores = made.stdout.strip().splitlines()[-1]
        mine, theirs = capture(str(ROOT), stores, args.quick), capture(str(other), stores, args.quick)
    if mine.keys() != theirs.keys():
        print(f"the two revisions captured different outputs: {sorted(mine.keys() ^ theirs.keys())[:5]}")
        return 1
    differ = [k for k in mine if mine[k] != theirs[k]]
    kinds: dict[str, int] = {}
    for key in mine:
        kinds[key.split("/")[0]] = kinds.get(key.split("/")[0], 0) + 1
    print(f"{len(mine):,} outputs compared with {args.rev} ({', '.join(f'{k} {n:,}' for k, n in kinds.items())}): "
          f"{len(differ):,} differ")
    for key in differ[:5]:
        a, b = theirs[key], mine[key]
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        print(f"  {key}: first difference at character {at:,}\n    {args.rev}: {a[max(0, at - 80):at + 80]!r}\n"
              f"    this: {b[max(0, at - 80):at + 80]!r}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
