"""The demo model's scripts: which tool calls it makes for which kind of request.

Why separate from `demo.model`: the engine (how the next step is found from a trimmed request) is
generic; these plans are content, written for the sample workspace in `demo/workspace/`. Five plans
cover what a small coding agent does: fix the failing test (list, read, grep, a large build log that
becomes an artifact, the failing test, an edit, the verification command), inspect the build log
through `read_artifact`, explore the project, review files, and summarize the session. A sixth, the data
task (load the shipped sales CSV into a DataFrame with `python`, find the planted anomaly, plot it), runs only
when the request offers the kernel's `python` tool (K1: the agent was given a namespace). Each builder may
return None to skip its step (e.g. no edit when the test already passes), so the plans adapt to what
the tools returned. A prompt no plan's keywords match ("What is 2+2?") runs nothing: the model says it
is an offline demo and lists the tasks it knows, with prompts that run them (`capabilities`), rather than
pretending a script answers it. The closing answers live in `demo_answers`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mxclaw_nb.demo.model import Done

# The interpreter the shell tool will find: the kernel's PATH may lack `python` (e.g. Debian).
PY = "python" if shutil.which("python") else "python3" if shutil.which("python3") else shlex.quote(sys.executable)
_FAILURE = re.compile(r"^\s*(Tool failed|Invalid|Permission denied|Forbidden)", re.IGNORECASE)
USER_DENIED = "Permission denied: the user denied"  # the shell tool's result when the person said no
WARN_LINE = re.compile(r"(\S+Z) WARN\s+\[(\w+)\s*\]\s+(\S+)\s+(\d+) ms")
_ARTIFACT = re.compile(r"\[artifact ([^\]\s:<>]+)")  # an id, not the "<id>" placeholder of the system prompt
BUG_LINE = "    for item in items[1:]:\n"
FIXED_LINE = "    for item in items:\n"
FOOTER = ("\n\n(This is the offline demo model: its steps are scripted for the sample workspace. To use a real "
          "model set OPENAI_API_KEY, or OPENAI_BASE_URL and MXCLAW_MODEL; in a notebook also "
          "%config AgentMagics.base_url / .model.)")


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

    # what to say instead of `say` when the person denied the shell command whose output `say` quotes (the demo
    # never claims to have seen a result it was refused)
    denied: tuple[str, str] | None = None  # (command, text)

    def said(self, ctx: Ctx) -> str:
        """The narration of this step, given what the turn actually saw."""
        if self.denied is not None and any(d.denied_by_user and d.args.get("command") == self.denied[0]
                                           for d in ctx.done):
            return self.denied[1]
        return self.say

    def build(self, ctx: Ctx) -> dict | None:
        """Arguments for this step, or None to skip it."""
        return self.args(ctx) if callable(self.args) else dict(self.args)

    def matches(self, name: str, args: dict) -> bool:
        """True when a visible call is this step."""
        ident = self.ident or (self.args if isinstance(self.args, dict) else {})
        return name == self.tool and all(args.get(k) == v for k, v in ident.items())


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


SHELVES = [
    ("empty", [], "0.0"), ("one_item", [("TEA-001", "green", 12, 4.5)], "54.0"),
    ("first_item_counts", [("TEA-001", "green", 1, 100.0), ("CUP-010", "cup", 1, 1.0)], "101.0"),
    ("only_first_item_has_stock", [("TEA-001", "green", 5, 4.5), ("CUP-010", "cup", 0, 2.0)], "22.5"),
    ("cjk_names", [("TEA-002", "乌龙茶", 3, 7.25), ("TEA-003", "普洱茶", 2, 12.0)], "45.75"),
    ("cents_rounding", [("SUG-001", "sugar", 3, 0.1), ("SUG-002", "salt", 3, 0.2)], "0.9"),
    ("zero_quantity", [("CUP-011", "mug", 0, 9.99), ("CUP-012", "saucer", 4, 2.5)], "10.0"),
    ("many_items", [(f"TEA-{n:03d}", f"tea {n}", n, 1.5) for n in range(1, 7)], "31.5"),
    ("large_order", [("TEA-100", "龙井 longjing", 250, 18.8), ("CUP-100", "gaiwan", 30, 24.0)], "5420.0"),
]


def _regression(ctx: Ctx) -> dict | None:
    body = ["import unittest", "", "from inventory.report import render", "from inventory.stock import Item, "
            "total_value", "", "", "class TotalValueRegressionTest(unittest.TestCase):",
            '    """Regression tests for total_value: every item counts, including the first one."""', ""]
    for name, items, total in SHELVES:
        shelf = ", ".join(f"Item({sku!r}, {label!r}, {qty}, {price})" for sku, label, qty, price in items)
        body += [f"    def test_{name}(self):", f"        shelf = [{shelf}]",
                 f"        self.assertAlmostEqual(total_value(shelf), {total}, places=2)", ""]
    body += ["    def test_report_total_matches(self):",
             '        shelf = [Item("TEA-001", "绿茶 green", 12, 4.5), Item("CUP-010", "cup", 40, 2.0)]',
             '        self.assertIn("134.00", render(shelf))', "", "", 'if __name__ == "__main__":',
             "    unittest.main()", ""]
    return {"path": REGRESSION, "content": "\n".join(body)}


def _slow_report(ctx: Ctx) -> dict | None:
    slow = sorted(WARN_LINE.findall(ctx.result("read_artifact", search="WARN") or ""), key=lambda w: -int(w[3]))
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


_RECALL = re.compile(r"recall #(\d+)\]")  # C13: the stored seq a placeholder names


def _recall_placeholder(ctx: Ctx) -> dict | None:
    """R1: the seq named by the earliest compacted tool output still visible (None: nothing is compacted)."""
    for m in ctx.messages:
        content = m.get("content")
        found = _RECALL.search(content) if m.get("role") == "tool" and isinstance(content, str) else None
        if found:
            return {"seq": int(found.group(1))}
    return None


def message_text_of(message: dict) -> str:
    """Content text plus tool-call arguments of a message (where paths of earlier writes appear)."""
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    calls = message.get("tool_calls") or []
    return text + "".join(str((c.get("function") or {}).get("arguments")) for c in calls if isinstance(c, dict))


def _grep_log(ctx: Ctx) -> dict | None:
    return None if ctx.artifact_id() else {"pattern": "ERROR", "path": "logs"}


# SPEC K1/K2: the data-notebook task, offered only when the request lists the `python` tool (the agent was given a
# kernel namespace). It reads the shipped sample (`demo/workspace/data/sales.csv`: 360 days of sales, one planted
# spike) by its absolute path: `python` runs in the user's kernel, whose working folder is not the workspace.
SALES_CSV = Path(__file__).resolve().parent / "workspace" / "data" / "sales.csv"
DATA_LOAD = (f"import pandas as pd\nsales = pd.read_csv({str(SALES_CSV)!r}, parse_dates=['date'])\n"
             "print(sales.to_string())")
DATA_DESCRIBE = "stats = sales.describe()\nprint(stats.to_string())"
DATA_FIND = ("anomalies = sales[((sales.revenue - sales.revenue.median()) / sales.revenue.std()).abs() > 4]\n"
             "print('\\n'.join(f'anomaly: {r.date:%Y-%m-%d} {r.region} units={r.units} revenue={r.revenue:,.2f} '\n"
             "                f'(median {sales.revenue.median():,.2f})' for r in anomalies.itertuples()))\n"
             "anomalies")
DATA_WEEKLY = "weekly = sales.set_index('date').resample('W')['revenue'].sum()\nprint(weekly.to_string())"
DATA_PLOT = ("import matplotlib.figure\nfig = matplotlib.figure.Figure(figsize=(9, 3))\n"
             "fig.subplots().plot(sales['date'], sales['revenue'], linewidth=0.8)\n"
             "fig.axes[0].scatter(anomalies['date'], anomalies['revenue'], color='red', zorder=3)\n"
             "fig.axes[0].set_title('Daily revenue, the anomaly in red')\nfig")
DATA_PLAN = [
    Step("kernel_variables", "First, what is already in the kernel, so I do not overwrite anything.", {}),
    Step("python", "Loading the shipped sample data/sales.csv into a DataFrame `sales` and printing it whole (a "
         "large output: later it compacts to a typed placeholder naming `sales`).", {"code": DATA_LOAD}),
    Step("python", "Summary statistics per column: a spike shows up as a max far above the quartiles.",
         {"code": DATA_DESCRIBE}),
    Step("python", "Flagging days whose revenue is more than 4 standard deviations from the median.",
         {"code": DATA_FIND}),
    Step("python", "Weekly revenue, to see whether the spike is one day or a trend.", {"code": DATA_WEEKLY}),
    Step("python", "Plotting daily revenue with the anomaly in red (a matplotlib Figure `fig` in the kernel).",
         {"code": DATA_PLOT}),
]

REGRESSION, SLOW_REPORT = "tests/test_regression.py", "reports/slow_steps.md"
TEST_FIRST = f"{PY} -m unittest -q tests.test_stock"
VERIFY = f"{PY} -m unittest -q"
GEN_LOG = f"{PY} tools/gen_log.py"
PLANS: dict[str, list[Step]] = {
    "fix": [
        Step("list_dir", "Let me look at the workspace first: which packages, tests and tools exist, and whether "
             "there is a project policy under .mx-claw/.", {"path": "."}),
        Step("read_file", "The failing tests are about stock numbers, and those live in "
             "inventory/stock.py; reading the whole module before touching anything.", {"path": "inventory/stock.py"}),
        Step("grep", "total_value is the most likely suspect. Where is it used, so a change does not "
             "break the report?", {"pattern": "total_value", "path": "."}),
        Step("bash", "Building first to rule out an environment problem. The build log is "
             "long, so it should come back as an artifact preview, not in full.", {"command": GEN_LOG}),
        Step("bash", "Running the stock tests to see the exact failure and the expected "
             "versus actual values.", {"command": TEST_FIRST}),
        Step("edit_file", "The assertion says 101.75 != 155.75: exactly the first item's value (12 x 4.50 = 54.00) is "
             "missing. total_value loops over items[1:], so it skips the first item. Fixing the loop.",
             _edit, {"path": "inventory/stock.py"},
             (TEST_FIRST, "I did not see the test run (you denied it), so this comes from reading the code: "
              "total_value loops over items[1:], so it skips the first item. Fixing the loop.")),
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
    "data": DATA_PLAN,
    "recall": [  # R1: after a compaction, read a compacted output back by the seq its placeholder names (C13)
        Step("recall", "That output was compacted out of my context, but its placeholder names the stored message, "
             "so I read it back with the recall tool.", _recall_placeholder),
    ],
}
_KEYWORDS = [  # \b before Latin words: "already" is not "read", "prefix" is not "fix", "catalog" is not "log"
    ("data", r"\b(csv|data ?frames?|datasets?|anomal|outlier|spike|sales|pandas|plot)|数据|异常"),  # with `python` only
    ("recall", r"\brecall\b|compacted (tool )?output|找回"),  # R1: not in TASKS (the capability list is unchanged)
    ("summary", r"\b(summar|recap)|what (did )?you (change|do|did)|总结"),
    ("fix", r"\b(fix|bug|debug|fail|broken|repair)|修"),
    ("logs", r"\b(logs?\b|build|artifact|error|warn)|日志"),
    ("explore", r"\b(explain|overview|structure|explore|describe|what does)|介绍|结构"),
    ("review", r"\b(review|read|look|code|files?\b)|审"),
]
# What the demo says it can do when a prompt matches no script: one task per plan, with a prompt that runs it.
TASKS = [
    ("fix", "fix the failing unit tests of the sample project",
     "The unit tests of the inventory package fail. Find out why and fix them."),
    ("logs", "find the slowest step in the long build log (an artifact)",
     "Look at the build log and tell me what the slowest step was."),
    ("explore", "explain the project's structure", "Explain the project structure."),
    ("review", "review the tests and the code", "Review the tests and the code."),
    ("summary", "summarize what was changed and checked in this session",
     "Summarize what you changed and what you checked, with file names."),
]


DATA_TASK = ("data", "find the anomaly in the shipped sales data with the kernel's `python` tool",
             "Load the sample sales CSV, find the anomaly and plot it.")


def tool_names(tools: list[dict] | None) -> set[str]:
    """Names of the tools a request offers (OpenAI `tools` list)."""
    return {str((t.get("function") or {}).get("name")) for t in tools or [] if isinstance(t, dict)}


def capabilities(goal: str, kernel: bool = False) -> str:
    """The answer to a prompt no script matches: what the demo model is, and the tasks it knows
    (the data task only when `kernel`: the request offers the `python` tool)."""
    asked = " ".join(goal.split())
    asked = (f'"{asked}"' if len(asked) <= 80 else f'"{asked[:80]}…"') if asked else "free questions"
    tasks = "\n".join(f"- {what}: \"{example}\"" for _, what, example in [*TASKS, *([DATA_TASK] if kernel else [])])
    return (f"I am the offline demo model, not a real language model, so I cannot answer {asked}. "
            "I only play a few scripted tasks on the sample project (`inventory`, copied into the workspace) to "
            f"show the context engine at work. A prompt that asks for one of them runs its script, e.g.:\n{tasks}"
            "\n\nNothing was run for this prompt." + FOOTER)


def choose(goal: str, done: list[Done], kernel: bool = False) -> tuple[str, list[Step]] | None:
    """Plan for the goal's keywords; else the plan the visible calls follow; None when no script fits.
    The data plan is a candidate only when `kernel` (the request offers `python`); without it, as before."""
    plans = {n: p for n, p in PLANS.items() if kernel or n != "data"}
    for name, pattern in _KEYWORDS:
        if name in plans and re.search(pattern, goal, re.IGNORECASE):
            return name, plans[name]
    if done:  # mid-turn with the goal trimmed away: follow the calls still visible
        score = {n: sum(any(s.matches(d.name, d.args) for s in p) for d in done) for n, p in plans.items()}
        best = max(plans, key=lambda n: score[n])
        if score[best]:
            return best, plans[best]
    return None
