"""The demo model's scripts: which tool calls it makes for which kind of request, and its answers.

Why separate from `demo_model`: the engine (how the next step is found from a trimmed request) is
generic; these plans are content, written for the sample workspace in `demo_workspace/`. Four plans
cover what a small coding agent does: fix the failing test (list, read, grep, a large build log that
becomes an artifact, the failing test, an edit, the verification command), inspect the build log
through `read_artifact`, explore the project, and review files. Each builder may return None to skip
its step (e.g. no edit when the test already passes), so the plans adapt to what the tools returned.
"""

from __future__ import annotations

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


def _grep_log(ctx: Ctx) -> dict | None:
    return None if ctx.artifact_id() else {"pattern": "ERROR", "path": "logs"}


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
        Step("bash", "Re-running the verification command from .mx-claw/project.json.", {"command": VERIFY}),
    ],
    "logs": [
        Step("bash", "Generating the build log (large output, stored as an artifact).", {"command": GEN_LOG}),
        Step("read_artifact", "Searching the stored log for ERROR lines.", _read_artifact("ERROR", 10),
             {"search": "ERROR"}),
        Step("grep", "No artifact id visible; searching the saved log file instead.", _grep_log,
             {"pattern": "ERROR"}),
        Step("read_artifact", "And the slow steps (WARN).", _read_artifact("WARN", 5), {"search": "WARN"}),
        Step("read_file", "Checking the project memory for known issues.", {"path": ".mx-claw/memory.md"}),
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
        best = max(ROTATION, key=lambda n: score[n])
        if score[best]:
            return best, PLANS[best]
    name = ROTATION[(max(users, 1) - 1) % len(ROTATION)]
    return name, PLANS[name]


def _count_lines(text: str | None, needle: str) -> int:
    return sum(1 for line in (text or "").splitlines() if needle in line)


def final_answer(plan: str, ctx: Ctx) -> str:
    """The turn's closing answer for `plan`, built from the visible results."""
    aid = ctx.artifact_id()
    stored = f"stored as artifact {aid}" if aid else "shown in full (no artifact id visible)"
    if plan == "fix":
        before, after = ctx.result("bash", command=TEST_FIRST), ctx.result("bash", command=VERIFY)
        edit = ctx.result("edit_file", path="inventory/stock.py")
        grep_hits = max(0, len((ctx.result("grep", pattern="total_value", path=".") or "").splitlines()) - 1)
        if before is not None and before.startswith("exit code 0"):
            head = "The stock tests already pass, so there was nothing to fix."
        elif after is not None and after.startswith("exit code 0"):
            head = ("Fixed. `total_value` in inventory/stock.py looped over `items[1:]`, so the first item "
                    "was never counted (101.75 instead of 155.75 EUR for the test shelf). I changed the loop "
                    "to `for item in items:` and the verification command now passes.")
        else:
            head = "I could not get the tests to pass; the last run still fails (see below)."
        return (f"{head}\n\nWhat I did: listed the workspace, read inventory/stock.py, found {grep_hits} "
                f"lines mentioning total_value, ran the build (the long log was {stored}), ran the tests, "
                f"edited the file ({(edit or 'no edit').splitlines()[0]}), re-ran the tests.\n\n"
                f"Test run before the fix:\n{_tail(before)}\n\nAfter:\n{_tail(after, 4)}{FOOTER}")
    if plan == "logs":
        errors = ctx.result("read_artifact", search="ERROR") or ctx.result("grep", pattern="ERROR")
        warns = ctx.result("read_artifact", search="WARN")
        memory = ctx.result("read_file", path=".mx-claw/memory.md") or ""
        known = " The project memory says these barcode-plugin errors are known and harmless." \
            if "barcode" in memory else ""
        return (f"The build log was {stored}. It has {_count_lines(errors, 'ERROR')} ERROR lines in view, all "
                f"about the optional `barcode` plugin, and {_count_lines(warns, 'WARN')} slow steps (WARN) "
                f"among the hits I asked for.{known}\n\nERROR lines:\n{_tail(errors, 6)}{FOOTER}")
    if plan == "explore":
        defs = [line.split(":", 2)[-1].strip() for line in (ctx.result("grep", path="inventory") or "").splitlines()
                if "def " in line]
        listing = ctx.result("list_dir", path="inventory") or ""
        return (f"`inventory` is a tiny stock-keeping library ({listing.splitlines()[0] if listing else 'not listed'})"
                f". Functions: {', '.join(defs) or 'none found'}. `report.render` prints one line per item, "
                f"the total and the low-stock SKUs; tests run with `{VERIFY}`.{FOOTER}")
    source = ctx.result("read_file", path="inventory/stock.py") or ""
    read = [d.args.get("path") for d in ctx.done if d.name == "read_file" and d.result is not None]
    note = ("`total_value` loops over `items[1:]` and skips the first item; "
            "`test_total_counts_every_item` catches it. Ask me to fix the failing test.") \
        if "items[1:]" in source else "I did not spot a bug in what I read."
    return f"Reviewed {', '.join(map(str, read)) or 'nothing (no file could be read)'}. {note}{FOOTER}"


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
