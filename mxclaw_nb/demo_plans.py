"""The demo model's scripts: which tool calls it makes for which kind of request, and its answers.

Why separate from `demo_model`: the engine (how the next step is found from a trimmed request) is
generic; these plans are content, written for the sample workspace in `demo_workspace/`. Four plans
cover what a small coding agent does: fix the failing test (list, read, grep, a large build log that
becomes an artifact, the failing test, an edit, the verification command), inspect the build log
through `read_artifact`, explore the project, and review files. Each builder may return None to skip
its step (e.g. no edit when the test already passes), so the plans adapt to what the tools returned.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mxclaw_nb.demo_model import Done

# The interpreter the shell tool will find: the kernel's PATH may lack `python` (e.g. Debian).
PY = "python" if shutil.which("python") else "python3" if shutil.which("python3") else shlex.quote(sys.executable)
_FAILURE = re.compile(r"^\s*(Tool failed|Invalid|Permission denied|Forbidden)", re.IGNORECASE)
_WARN = re.compile(r"(\S+Z) WARN\s+\[(\w+)\s*\]\s+(\S+)\s+(\d+) ms")
_ARTIFACT = re.compile(r"\[artifact ([^\]\s:]+)")
BUG_LINE = "    for item in items[1:]:\n"
FIXED_LINE = "    for item in items:\n"
FOOTER = ("\n\n(This is the offline demo model: its steps are scripted for the sample workspace. Set "
          "OPENAI_API_KEY or OPENAI_BASE_URL and MXCLAW_MODEL to use a real model.)")


def is_failure(text: str) -> bool:
    """True when a tool result starts with one of the SPEC's failure markers."""
    return bool(_FAILURE.match(text))


def expected_failure(done: Done) -> bool:
    """A failing test run is part of the script; anything else failing ends the turn."""
    return done.name == "bash" and "unittest" in str(done.args.get("command")) and \
        (done.result or "").startswith("Tool failed: exit code")


@dataclass
class Ctx:
    """What a step builder may look at: the goal and the visible calls of this turn."""

    goal: str
    done: list[Done]
    messages: list[dict]

    def result(self, tool: str, **ident: Any) -> str | None:
        """Latest visible result of a call to `tool` whose arguments include `ident`."""
        for d in reversed(self.done):
            if d.name == tool and all(d.args.get(k) == v for k, v in ident.items()) and d.result is not None:
                return d.result
        return None

    def artifact_id(self) -> str | None:
        """The most recent artifact id mentioned anywhere in the request (previews, summaries)."""
        for m in reversed(self.messages):
            content = m.get("content")
            found = _ARTIFACT.findall(content) if isinstance(content, str) else []
            if found:
                return found[-1]
        return None


@dataclass
class Step:
    """One scripted tool call: fixed args, or a builder; `ident` says which args identify it."""

    tool: str
    say: str
    args: dict | Callable[[Ctx], dict | None]
    ident: dict = field(default_factory=dict)

    def build(self, ctx: Ctx) -> dict | None:
        """Arguments for this step, or None to skip it."""
        return self.args(ctx) if callable(self.args) else dict(self.args)

    def matches(self, name: str, args: dict) -> bool:
        """True when a visible call is this step."""
        ident = self.ident or (self.args if isinstance(self.args, dict) else {})
        return name == self.tool and all(args.get(k) == v for k, v in ident.items())


def _tail(text: str | None, lines: int = 8) -> str:
    if not text:
        return "    (no output visible)"
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def _edit(ctx: Ctx) -> dict | None:
    run = ctx.result("bash", command=f"{PY} -m unittest -q tests.test_stock")
    source = ctx.result("read_file", path="inventory/stock.py") or ""
    if run is not None and run.startswith("exit code 0"):
        return None  # the tests already pass: nothing to edit
    if "items[" not in source and "items:" in source:
        return None  # the source we read has no bug left
    return {"path": "inventory/stock.py", "old_string": BUG_LINE, "new_string": FIXED_LINE}


def _read_artifact(search: str, hits: int) -> Callable[[Ctx], dict | None]:
    def build(ctx: Ctx) -> dict | None:
        aid = ctx.artifact_id()
        return None if aid is None else {"artifact_id": aid, "search": search, "context": 0, "max_hits": hits}
    return build


def _artifact_lines(ctx: Ctx) -> dict | None:
    aid = ctx.artifact_id()
    return None if aid is None else {"artifact_id": aid, "line_start": 1, "line_end": 60}


_SHELVES = [
    ("empty", [], "0.0"), ("one_item", [("TEA-001", "green", 12, 4.5)], "54.0"),
    ("first_item_counts", [("TEA-001", "green", 1, 100.0), ("CUP-010", "cup", 1, 1.0)], "101.0"),
    ("cjk_names", [("TEA-002", "乌龙茶", 3, 7.25), ("TEA-003", "普洱茶", 2, 12.0)], "45.75"),
    ("cents_rounding", [("SUG-001", "sugar", 3, 0.1), ("SUG-002", "salt", 3, 0.2)], "0.9"),
    ("zero_quantity", [("CUP-011", "mug", 0, 9.99), ("CUP-012", "saucer", 4, 2.5)], "10.0"),
]


def _regression(ctx: Ctx) -> dict | None:
    body = ["import unittest", "", "from inventory.report import render", "from inventory.stock import Item, "
            "total_value", "", "", "class TotalValueRegressionTest(unittest.TestCase):",
            '    """Regression tests for total_value: every item counts, including the first one."""', ""]
    for name, items, total in _SHELVES:
        shelf = ", ".join(f"Item({sku!r}, {label!r}, {qty}, {price})" for sku, label, qty, price in items)
        body += [f"    def test_{name}(self):", f"        shelf = [{shelf}]",
                 f"        self.assertAlmostEqual(total_value(shelf), {total}, places=2)", ""]
    body += ["    def test_report_total_matches(self):",
             '        shelf = [Item("TEA-001", "绿茶 green", 12, 4.5), Item("CUP-010", "cup", 40, 2.0)]',
             '        self.assertIn("134.00", render(shelf))', "", "", 'if __name__ == "__main__":',
             "    unittest.main()", ""]
    return {"path": REGRESSION, "content": "\n".join(body)}


def _slow_report(ctx: Ctx) -> dict | None:
    slow = sorted(_WARN.findall(ctx.result("read_artifact", search="WARN") or ""), key=lambda w: -int(w[3]))
    if not slow:
        return None
    rows = [f"| {i} | {w[0]} | {w[1]} | {w[2]} | {w[3]} |" for i, w in enumerate(slow, 1)]
    return {"path": SLOW_REPORT, "content": "\n".join(
        ["# Slow build steps (over 850 ms)", "", f"From `{GEN_LOG}`, {len(slow)} steps, slowest first.", "",
         "| # | time | step | module | ms |", "|---|---|---|---|---|", *rows, ""])}


def _if_written(path: str) -> Callable[[Ctx], dict | None]:
    """Read `path` only if this conversation wrote it (a write call or the summary's file list shows it)."""
    def build(ctx: Ctx) -> dict | None:
        return {"path": path} if any(path in message_text_of(m) for m in ctx.messages) else None
    return build


def message_text_of(message: dict) -> str:
    """Content text plus tool-call arguments of a message (where paths of earlier writes appear)."""
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    calls = message.get("tool_calls") or []
    return text + "".join(str((c.get("function") or {}).get("arguments")) for c in calls if isinstance(c, dict))


def _grep_log(ctx: Ctx) -> dict | None:
    return None if ctx.artifact_id() else {"pattern": "ERROR", "path": "logs"}


REGRESSION, SLOW_REPORT = "tests/test_regression.py", "reports/slow_steps.md"
TEST_FIRST = f"{PY} -m unittest -q tests.test_stock"
VERIFY = f"{PY} -m unittest -q"
GEN_LOG = f"{PY} tools/gen_log.py"
PLANS: dict[str, list[Step]] = {
    "fix": [
        Step("list_dir", "Let me look at the workspace first.", {"path": "."}),
        Step("read_file", "The shop totals live in inventory/stock.py; reading it.", {"path": "inventory/stock.py"}),
        Step("grep", "Where is total_value used?", {"pattern": "total_value", "path": "."}),
        Step("bash", "Building first: the build log is long, so it should become an artifact.", {"command": GEN_LOG}),
        Step("bash", "Running the stock tests to see the failure.", {"command": TEST_FIRST}),
        Step("edit_file", "total_value loops over items[1:], so it skips the first item. Fixing the loop.",
             _edit, {"path": "inventory/stock.py"}),
        Step("write_file", "The existing test only covers one shelf. Adding a small regression suite for "
             "total_value (empty shelf, one item, first item only, CJK names, cents) so this cannot come back.",
             _regression, {"path": REGRESSION}),
        Step("bash", "Re-running the verification command from .mx-claw/project.json (it includes the new tests).",
             {"command": VERIFY}),
    ],
    "logs": [
        Step("bash", "The build writes a long log; running it (the output is large, so it should come back as an "
             "artifact preview rather than in full).", {"command": GEN_LOG}),
        Step("read_artifact", "The preview only shows the head and tail of the log. Searching the stored artifact "
             "for ERROR lines first.", _read_artifact("ERROR", 10), {"search": "ERROR"}),
        Step("grep", "No artifact id is visible, so I search the saved log file instead.", _grep_log,
             {"pattern": "ERROR"}),
        Step("read_artifact", "Now every slow step: the log marks steps over 850 ms as WARN.",
             _read_artifact("WARN", 80), {"search": "WARN"}),
        Step("write_file", "Saving the slow steps as a small table in reports/slow_steps.md, so they can be "
             "compared with the next build without re-running it.", _slow_report, {"path": SLOW_REPORT}),
        Step("read_artifact", "Reading the first lines of the log to see the step order.", _artifact_lines,
             {"line_start": 1}),
        Step("read_file", "Checking the project memory for known issues before I call anything a problem.",
             {"path": ".mx-claw/memory.md"}),
    ],
    "summary": [
        Step("read_file", "Re-reading the file I changed to confirm the edit is there.",
             {"path": "inventory/stock.py"}),
        Step("read_file", "And the regression tests I added, to list them by name.", _if_written(REGRESSION),
             {"path": REGRESSION}),
        Step("read_file", "And the slow-step report I wrote.", _if_written(SLOW_REPORT), {"path": SLOW_REPORT}),
        Step("bash", "Running the verification command once more so the summary is based on a fresh result.",
             {"command": VERIFY}),
        Step("read_file", "And the verification policy I was asked to follow.", {"path": ".mx-claw/project.json"}),
    ],
    "explore": [
        Step("list_dir", "Listing the package.", {"path": "inventory"}),
        Step("read_file", "Reading the README.", {"path": "README.md"}),
        Step("read_file", "Reading the report module.", {"path": "inventory/report.py"}),
        Step("grep", "Collecting the function definitions.", {"pattern": "^def |^    def ", "path": "inventory"}),
        Step("read_file", "Reading the project instructions.", {"path": "AGENTS.md"}),
    ],
    "review": [
        Step("read_file", "Reviewing the tests first.", {"path": "tests/test_stock.py"}),
        Step("read_file", "Then the report tests.", {"path": "tests/test_report.py"}),
        Step("read_file", "Then the code under test.", {"path": "inventory/stock.py"}),
        Step("grep", "Looking for TODO/FIXME notes.", {"pattern": "TODO|FIXME|XXX", "path": "."}),
        Step("read_file", "And the verification policy.", {"path": ".mx-claw/project.json"}),
    ],
}
_KEYWORDS = [
    ("summary", r"summar|recap|what (did )?you (change|do|did)|总结"),
    ("fix", r"fix|bug|fail|broken|repair|修"),
    ("logs", r"log|build|artifact|error|warn|日志"),
    ("explore", r"explain|overview|structure|explore|describe|what does|介绍|结构"),
    ("review", r"review|read|look|code|files|审"),
]
ROTATION = ["fix", "logs", "explore", "review"]


def choose(goal: str, users: int, done: list[Done], messages: list[dict]) -> tuple[str, list[Step]]:
    """Plan for the goal's keywords; else the plan the visible calls follow; else by turn number."""
    for name, pattern in _KEYWORDS:
        if re.search(pattern, goal, re.IGNORECASE):
            return name, PLANS[name]
    if done:
        score = {n: sum(any(s.matches(d.name, d.args) for s in p) for d in done) for n, p in PLANS.items()}
        best = max(PLANS, key=lambda n: score[n])
        if score[best]:
            return best, PLANS[best]
    name = ROTATION[(max(users, 1) - 1) % len(ROTATION)]
    return name, PLANS[name]


def _count_lines(text: str | None, needle: str) -> int:
    return sum(1 for line in (text or "").splitlines() if needle in line)


def _stored(ctx: Ctx) -> str:
    aid = ctx.artifact_id()
    return f"stored as artifact {aid}" if aid else "shown in full (no artifact id visible)"


def _answer_fix(ctx: Ctx) -> str:
    before, after = ctx.result("bash", command=TEST_FIRST), ctx.result("bash", command=VERIFY)
    edit = ctx.result("edit_file", path="inventory/stock.py")
    grep_hits = max(0, len((ctx.result("grep", pattern="total_value", path=".") or "").splitlines()) - 1)
    if before is not None and before.startswith("exit code 0"):
        head = "The stock tests already pass, so there was nothing to fix."
    elif after is not None and after.startswith("exit code 0"):
        head = ("Fixed. `total_value` in inventory/stock.py looped over `items[1:]`, so the first item was never "
                "counted (101.75 instead of 155.75 EUR for the test shelf). I changed the loop to "
                "`for item in items:` and the verification command now passes.")
    else:
        head = "I could not get the tests to pass; the last run still fails (see below)."
    return (f"{head}\n\nWhat I did: listed the workspace, read inventory/stock.py, found {grep_hits} lines "
            f"mentioning total_value, ran the build (the long log was {_stored(ctx)}), ran the tests, edited the "
            f"file ({(edit or 'no edit').splitlines()[0]}), added tests/test_regression.py "
            f"({len(_SHELVES) + 1} cases: {', '.join(n for n, _, _ in _SHELVES)}, report total), re-ran the tests."
            f"\n\nThe change:\n    - {BUG_LINE.strip()}\n    + {FIXED_LINE.strip()}\n\nTest run before the fix:\n"
            f"{_tail(before)}\n\nAfter:\n{_tail(after, 4)}")


def _answer_logs(ctx: Ctx) -> str:
    errors = ctx.result("read_artifact", search="ERROR") or ctx.result("grep", pattern="ERROR")
    slow = sorted(_WARN.findall(ctx.result("read_artifact", search="WARN") or ""), key=lambda w: -int(w[3]))
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


_ANSWERS = {"fix": _answer_fix, "logs": _answer_logs, "explore": _answer_explore, "review": _answer_review,
            "summary": _answer_summary}


def final_answer(plan: str, ctx: Ctx) -> str:
    """The turn's closing answer for `plan`, built from the visible results."""
    return _ANSWERS[plan](ctx) + FOOTER


def failure_answer(failure: Done, ctx: Ctx) -> str:
    """Answer when a tool failed unexpectedly: say what failed and stop the turn."""
    first = (failure.result or "").strip().splitlines()[0][:300]
    hint = ""
    if first.lower().startswith("permission denied") and failure.name == "bash":
        hint = " Shell commands need approval: run the agent with approval='allow' or click Approve."
    elif "no such" in first.lower():
        hint = (" This workspace does not look like the demo's sample project; copy it with "
                "mxclaw_nb.demo_model.copy_demo_workspace(path).")
    args = ", ".join(f"{k}={v!r}" for k, v in failure.args.items())[:200]
    return (f"The call {failure.name}({args}) failed: {first}.{hint} I stop this turn here rather than "
            f"guess; {len(ctx.done)} tool call(s) were made.{FOOTER}")
