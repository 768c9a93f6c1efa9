"""The demo model's closing answers: what it says at the end of a turn, built from the visible results.

Why separate from the plans: the plans decide *what to do* next, these functions only *report*,
reading tool results back out of the (possibly compacted) request. Every answer ends with a footer
that says this is the offline demo and how to configure a real model.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from mxclaw_nb.demo.plans import (
    BUG_LINE,
    DATA_FIND,
    DATA_LOAD,
    DATA_PLOT,
    FIXED_LINE,
    FOOTER,
    GEN_LOG,
    SALES_CSV,
    SHELVES,
    SLOW_REPORT,
    TEST_FIRST,
    USER_DENIED,
    VERIFY,
    WARN_LINE,
    Ctx,
)

if TYPE_CHECKING:  # pragma: no cover
    from mxclaw_nb.demo.model import Done

__all__ = ["failure_answer", "final_answer"]


def _tail(text: str | None, lines: int = 8) -> str:
    if not text:
        return "    (no output visible)"
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def _count_lines(text: str | None, needle: str) -> int:
    return sum(1 for line in (text or "").splitlines() if needle in line)


def _compacted(text: str | None) -> bool:
    """True when a tool result is now a C5 placeholder: its content is no longer in the request."""
    return (text or "").startswith("[old tool output compacted")


def _stored(ctx: Ctx) -> str:
    aid = ctx.artifact_id()
    if aid:
        return f"stored as artifact {aid}"
    if _compacted(ctx.result("bash", command=GEN_LOG)):
        return "stored as an artifact, whose id has since been compacted out of my context"
    return "shown in full (no artifact id visible)"


def _answer_fix(ctx: Ctx) -> str:
    before, after = ctx.result("bash", command=TEST_FIRST), ctx.result("bash", command=VERIFY)
    edit = ctx.result("edit_file", path="inventory/stock.py")
    grep = ctx.result("grep", pattern="total_value", path=".")
    found = ("searched for total_value (that output has since been compacted out of my context)" if _compacted(grep)
             else f"found {max(0, len((grep or '').splitlines()) - 1)} lines mentioning total_value")
    if before is not None and before.startswith("exit code 0"):
        head = "The stock tests already pass, so there was nothing to fix."
    elif after is not None and after.startswith("exit code 0") and (before or "").startswith(USER_DENIED):
        head = ("Fixed, from reading the code: I did not see the failing test run (you denied it). `total_value` in "
                "inventory/stock.py looped over `items[1:]`, so the first item was never counted. I changed the "
                "loop to `for item in items:` and the verification command now passes.")
    elif after is not None and after.startswith("exit code 0"):
        head = ("Fixed. `total_value` in inventory/stock.py looped over `items[1:]`, so the first item was never "
                "counted (101.75 instead of 155.75 EUR for the test shelf). I changed the loop to "
                "`for item in items:` and the verification command now passes.")
    else:
        head = "I could not get the tests to pass; the last run still fails (see below)."
    return (f"{head}\n\nWhat I did: listed the workspace, read inventory/stock.py, {found}, ran the build "
            f"(the long log was {_stored(ctx)}), ran the tests, edited the "
            f"file ({(edit or 'no edit').splitlines()[0]}), added tests/test_regression.py "
            f"({len(SHELVES) + 1} cases: {', '.join(n for n, _, _ in SHELVES)}, report total), re-ran the tests."
            f"\n\nThe change:\n    - {BUG_LINE.strip()}\n    + {FIXED_LINE.strip()}\n\nTest run before the fix:\n"
            f"{_tail(before)}\n\nAfter:\n{_tail(after, 4)}")


def _answer_logs(ctx: Ctx) -> str:
    errors = ctx.result("read_artifact", search="ERROR") or ctx.result("grep", pattern="ERROR")
    slow = sorted(WARN_LINE.findall(ctx.result("read_artifact", search="WARN") or ""), key=lambda w: -int(w[3]))
    memory = ctx.result("read_file", path=".mx-claw/memory.md") or ""
    known = " The project memory says these barcode-plugin errors are known and harmless." if "barcode" in memory \
        else ""
    slowest = (f"The slowest step was `{slow[0][1]}` of `{slow[0][2]}` at {slow[0][3]} ms ({slow[0][0]}); "
               f"{len(slow)} steps took over 850 ms, the next ones: "
               + ", ".join(f"{w[1]} {w[2]} {w[3]} ms" for w in slow[1:4]) + ".") if slow else \
        "I could not see the WARN lines, so I cannot name the slowest step."
    table = "\n".join(f"    {i:>2}. {w[1]:<8} {w[2]:<18} {w[3]} ms  at {w[0]}" for i, w in enumerate(slow[:10], 1))
    if slow:
        slowest += f"\n\nTop {min(10, len(slow))} slow steps (full table in {SLOW_REPORT}):\n{table}"
    return (f"{slowest}\n\nThe build log was {_stored(ctx)}. It has {_count_lines(errors, 'Z ERROR ')} ERROR lines, "
            f"all about the optional `barcode` plugin.{known}\n\nERROR lines:\n{_tail(errors, 6)}")


def _answer_explore(ctx: Ctx) -> str:
    defs = [line.split(":", 2)[-1].strip() for line in (ctx.result("grep", path="inventory") or "").splitlines()
            if "def " in line]
    listing = ctx.result("list_dir", path="inventory") or ""
    return (f"`inventory` is a tiny stock-keeping library ({listing.splitlines()[0] if listing else 'not listed'})."
            f" Functions: {'; '.join(defs) or 'none found'}. `report.render` prints one line per item, the total "
            f"and the low-stock SKUs; tests run with `{VERIFY}`.")


def _answer_review(ctx: Ctx) -> str:
    source = ctx.result("read_file", path="inventory/stock.py") or ""
    read = [str(d.args.get("path")) for d in ctx.done if d.name == "read_file" and d.result is not None]
    note = ("`total_value` loops over `items[1:]` and skips the first item; `test_total_counts_every_item` "
            "catches it. Ask me to fix the failing test.") if "items[1:]" in source else \
        "I did not spot a bug in what I read."
    return f"Reviewed {', '.join(read) or 'nothing (no file could be read)'}. {note}"


def _answer_summary(ctx: Ctx) -> str:
    """Recap from the whole request: edits and commands of earlier turns, or the summary's file list."""
    edits, commands = [], []
    for m in ctx.messages:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                continue
            if fn.get("name") in ("edit_file", "write_file") and args.get("path") not in edits:
                edits.append(args.get("path"))
            if fn.get("name") == "bash" and args.get("command") not in commands:
                commands.append(args.get("command"))
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        if m.get("role") == "system" and text.startswith("[compressed conversation context]"):
            touched = re.search(r"Files and tools touched:\n((?:- .*\n?)+)", text)
            for line in (touched.group(1).splitlines() if touched else []):
                if line[2:] != "None recorded" and line[2:] not in edits:
                    edits.append(line[2:])
    verify = ctx.result("bash", command=VERIFY)
    state = "pass" if verify and verify.startswith("exit code 0") else "do not pass" if verify else "were not re-run"
    return (f"Changed: {', '.join(map(str, edits)) or 'no file edits visible in my context'}. Checked with: "
            f"{'; '.join(f'`{c}`' for c in commands) or 'no commands visible'}. The tests {state} now "
            f"({VERIFY}). Large outputs were {_stored(ctx)}.")


def _answer_data(ctx: Ctx) -> str:
    """K1/K2: what the data task found, read from the (possibly compacted) python results."""
    found = ctx.result("python", code=DATA_FIND)
    loaded = ctx.result("python", code=DATA_LOAD)
    spikes = re.findall(r"^anomaly: (.*)$", found or "", re.MULTILINE)
    if spikes:
        head = "Found " + ("one anomaly" if len(spikes) == 1 else f"{len(spikes)} anomalies") + ": " + "; ".join(
            spikes) + ". Every other day stays within 4 standard deviations of the median revenue."
    elif _compacted(found):
        head = ("The anomaly search ran, but its output has since been compacted out of my context; the rows are "
                "still in the kernel as `anomalies`.")
    else:
        head = "I could not see the anomaly search's output."
    frame = ("its printout is now a typed placeholder in my context, `sales` itself is still in the kernel"
             if _compacted(loaded) else "printed in full" if loaded else "not visible")
    plot = ("a matplotlib Figure `fig` is in the kernel: run `fig` in a cell to see it"
            if ctx.result("python", code=DATA_PLOT) else "no plot was made")
    return (f"{head}\n\nWhat I did: listed the kernel's variables, loaded {SALES_CSV.name} into `sales` "
            f"({frame}), described it, flagged outliers into `anomalies`, summed revenue per week (`weekly`) and "
            f"plotted it ({plot}). The code ran in your kernel, so these variables are yours now.")


def _answer_recall(ctx: Ctx) -> str:
    done = next((d for d in reversed(ctx.done) if d.name == "recall" and d.result is not None), None)
    if done is None:
        return "Nothing in this session has been compacted yet, so there is nothing to recall: every output is in view."
    lines = done.result.splitlines()
    original = [ln for ln in lines[1:] if ln.strip()][:6]
    return (f"I read stored message #{done.args.get('seq')} back with `recall` ({lines[0].strip('[]')}). "
            "It begins:\n" + "\n".join(f"    {ln}" for ln in original))


_ANSWERS = {"data": _answer_data, "fix": _answer_fix, "logs": _answer_logs, "explore": _answer_explore,
            "review": _answer_review, "summary": _answer_summary, "recall": _answer_recall}


def final_answer(plan: str, ctx: Ctx) -> str:
    """The turn's closing answer for `plan`, built from the visible results."""
    denied = [str(d.args.get("command")) for d in ctx.done if d.denied_by_user]
    skipped = f"\n\nNot run because you denied it: {'; '.join(f'`{c}`' for c in denied)}." if denied else ""
    return _ANSWERS[plan](ctx) + skipped + FOOTER


def failure_answer(failure: Done, ctx: Ctx) -> str:
    """Answer when a tool failed unexpectedly: say what failed and stop the turn."""
    first = (failure.result or "").strip().splitlines()[0][:300]
    hint = ""
    if first.lower().startswith("permission denied") and failure.name in ("bash", "python"):
        what = "Shell commands" if failure.name == "bash" else "Python code run in your kernel"
        hint = (f" {what} need approval: answer the approval prompt when it appears, or set "
                "%agent config approval=allow (Agent(approval='allow') from Python).")
    elif "no such" in first.lower():
        hint = (" This workspace does not look like the demo's sample project; copy it with "
                "mxclaw_nb.demo.model.copy_demo_workspace(path).")
    args = ", ".join(f"{k}={v!r}" for k, v in failure.args.items())[:200]
    return (f"The call {failure.name}({args}) failed: {first}.{hint} I stop this turn here rather than "
            f"guess; {len(ctx.done)} tool call(s) were made.{FOOTER}")
