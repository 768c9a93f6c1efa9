"""How far each token counter is from exact o200k_base counts on the shared transcripts (SPEC T2).

Why: the context threshold only holds in real tokens if the counter does not under-count. This prints,
per counter and role, the share of under-counted messages and the median / 5th-percentile / minimum ratio
counter/exact, plus request totals at every model call (what the threshold is compared with). The method
is described in ``mxclaw_nb/analysis/accuracy.py``; in short:

- ``estimate`` = SPEC C1; ``cl100k_base`` = exact counts with the older encoding;
- ``calibrated@k`` = one usage report per conversation for its first k messages (their exact o200k
  total stands in for the provider's ``prompt_tokens``), scored on the later messages (``estimate@k``:
  C1 on the same messages);
- ``calibrated (online)`` = the loop's behaviour (T3): a usage report (exact total so far) before every
  assistant message, request totals anchored on the previous report.

Then a replay through the context engine (``replay_window``): consecutive conversations of each file are
chained into one long session (no single shared transcript reaches 32k tokens), every assistant message is
a model call, and the view built with each counter is measured in exact o200k tokens: how many requests
the provider would reject (over the window).

Run: ``.venv/bin/python bench/estimator_accuracy.py [--transcripts DIR_OR_FILE] [--k 8] [--framing 4]
[--replay-window 32000] [--replay-tokens 36000] [--speed]``. ``--speed`` also times exact counting with
tiktoken and with bpe-openai's APIs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from mxclaw_nb.analysis.accuracy import (  # noqa: E402
    accuracy_table,
    chain_conversations,
    load_conversations,
    replay_summary,
    replay_window,
)
from mxclaw_nb.context.counters import MESSAGE_OVERHEAD_TOKENS  # noqa: E402
from mxclaw_nb.messages import content_text  # noqa: E402
from mxclaw_nb.tokenizers import exact_encoding  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "transcripts"


def _texts(path: Path) -> list[str]:
    """Every content text and compact tool-call JSON of the transcripts."""
    import json

    out = []
    for _, messages in load_conversations(path):
        for m in messages:
            if isinstance(m, dict):
                out.append(content_text(m.get("content")))
                if m.get("tool_calls"):
                    out.append(json.dumps(m["tool_calls"], separators=(",", ":"), ensure_ascii=False))
    return [t for t in out if t]


def speed(path: Path) -> None:
    """Time exact o200k counting of all texts with tiktoken and bpe-openai; check that counts agree."""
    texts = _texts(path)
    enc = exact_encoding("o200k_base")
    if enc is None:
        print("speed: o200k_base not available")
        return
    ways = {"tiktoken Encoding.encode_ordinary": lambda t: len(enc.encode_ordinary(t))}
    try:
        import bpe_openai
        from bpe_openai import _bindings

        public = bpe_openai.get_encoding("o200k_base")
        private = _bindings.tokenizer_for_encoding("o200k_base")
        ways["bpe_openai.get_encoding().encode_ordinary"] = lambda t: len(public.encode_ordinary(t))
        ways["bpe_openai._bindings count (private)"] = private.count
    except ImportError as exc:
        print(f"speed: bpe-openai not importable ({exc})")
    print(f"\nExact o200k_base counting of {len(texts)} texts, {sum(map(len, texts)):,} characters:")
    results = {}
    for label, fn in ways.items():
        start = time.perf_counter()
        try:
            results[label] = [fn(t) for t in texts]
            print(f"  {label:45s} {time.perf_counter() - start:6.3f} s")
        except Exception as exc:  # noqa: BLE001 - report any backend failure and go on
            print(f"  {label:45s} failed: {type(exc).__name__}: {exc}")
    first = next(iter(results.values()))
    for label, counts in results.items():
        diff = sum(a != b for a, b in zip(first, counts, strict=True))
        print(f"  {label:45s} texts whose count differs from tiktoken: {diff}")


def replay(path: Path, window: int, tokens: int) -> None:
    """Replay a long session per transcript file through the engine with each counter (SPEC T2)."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    for file in files:
        session = chain_conversations(load_conversations(file), tokens)
        frame = replay_window(session, window)
        print(f"\nReplay of {file.name} at a {window:,}-token window (threshold 0.8, 8k tail): consecutive "
              f"conversations chained into one session of {len(session)} messages; exact = o200k_base of "
              "each sent view")
        print(replay_summary(frame, window).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def main(argv: list[str] | None = None) -> int:
    """Print the accuracy table (and optionally the speed comparison)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transcripts", type=Path, default=DEFAULT, help="a .jsonl file or a directory of them")
    parser.add_argument("--k", type=int, default=8, help="messages per conversation for calibrated@k")
    parser.add_argument("--framing", type=int, default=MESSAGE_OVERHEAD_TOKENS,
                        help="per-message framing tokens added to exact counts (0: text only)")
    parser.add_argument("--speed", action="store_true", help="also time exact counting backends")
    parser.add_argument("--replay-window", type=int, default=32_000,
                        help="window of the engine replay (0 skips it)")
    parser.add_argument("--replay-tokens", type=int, default=36_000,
                        help="exact o200k tokens of the replayed session (consecutive conversations chained)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    table = accuracy_table(args.transcripts, k=args.k, framing=args.framing)
    elapsed = time.perf_counter() - start
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print(f"Counters vs exact o200k_base (+{args.framing} framing tokens per message) on {args.transcripts}")
        print("ratio = counter / exact; under_share = share of rows counted below exact\n")
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\n({elapsed:.1f} s)")
    if args.replay_window:
        replay(args.transcripts, args.replay_window, args.replay_tokens)
    if args.speed:
        speed(args.transcripts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
