"""Probe recall: ask a model about a transcript through each policy's view, next to fact presence (SPEC S4).

Why: fact survival (``facts.py``) measures *presence*: is the path, number or error still somewhere in
the text the model receives. Whether a model *recalls* it when asked is another matter (LongMemEval
facts at 50% compaction: grep still finds 82-93%, models recall 0-7%). Following Factory's evaluation
of context compression, this module derives four types of probes from a transcript, deterministically
(same transcript, same probes), and asks any OpenAI-compatible model each probe against each policy's
request view:

- ``recall``: a detail of an early tool call (the path the first ``open`` used, the file the first
  edit changed, or an id passed to a tool).
- ``artifact``: something produced (a number a tool's output showed, with its line quoted and the
  number blanked; a file a tool created).
- ``continuation``: the user's last request (a path, id or number it named) and the next step (what
  the agent actually did at the probed call: the file or value of its next tool call).
- ``decision``: the last error a tool reported (its exception type) and what was done about it (the
  first tool call after it).

Every probe is asked at one point of the transcript, ``at``: the index of an assistant message (by
default the last), so the view is what the model saw when it wrote that message, rebuilt exactly as
``replay`` does (SPEC C7). A probe's ``source`` is the transcript index of the message its answer
comes from (for the next-step probe that is ``at`` itself: the answer is what came next).

Scoring (``score_answer``): the expected answer must occur in the reply as a whole word, compared
case- and whitespace-insensitively ("normalised exact match"). ``present`` applies the same test to
the view's text: was the answer there to be found. With ``judge=...`` a second model also grades each
reply; its figures are in separate ``judge_*`` columns, labelled as a judge's opinion, never mixed
into ``recall``. ``recall=True`` (R2, C13) also counts a probe as answerable when the agent could recall its
answer: its source message is one a placeholder of the view names (``recall #seq``) or inside the range a
summary names (``Recall: #a-#b``), which the recall tool reads from this session (columns ``recallable`` and
``answerable`` = present or recallable; ``summarize_probes`` adds the share ``answerable``). ``runs=N`` asks
everything N times; ``summarize_probes`` reports the mean and the
sample standard deviation (ddof=1) of the per-run recall, per policy and probe type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.facts import message_text, normalize, number_tokens, path_tokens
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.analysis.replay import SessionCaches, _turns, replay_messages
from mxclaw_nb.analysis.sources import conversations
from mxclaw_nb.context import ContextPolicy, RequestView, TokenCache, build_request_view, build_structured_summary
from mxclaw_nb.messages import Message, content_text, tool_call_args, tool_call_name

PROBE_TYPES = ("recall", "artifact", "continuation", "decision")
PROBE_KINDS = {
    "recall": ("path_read", "path_edited", "tool_value"),
    "artifact": ("number", "file_created"),
    "continuation": ("last_request", "next_step"),
    "decision": ("last_error", "error_action"),
}
FULL = "full"  # label of the uncompacted baseline view (the whole transcript up to the probed call)
FULL_POLICY = ContextPolicy(context_window_tokens=2**62, threshold_ratio=1.0)  # a window no transcript reaches
PROBE_PROMPT = ("Answer from the conversation above only; do not call tools.\n"
                "Question: {question}\nGive the answer only, as briefly as possible.")
JUDGE_PROMPT = ("You grade an answer to a question about an earlier conversation.\n"
                "Question: {question}\nExpected answer: {expected}\nGiven answer: {reply}\n"
                "Does the given answer state the expected answer (formatting aside)? Reply with exactly YES or NO.")
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file_name", "file", "notebook_path", "target_file")
SHELL_KEYS = ("command", "cmd", "script")
MAX_LINE = 120  # characters of a quoted output line in an artifact/number question
MAX_COMMAND = 80  # a shell command longer than this is not used as an expected answer
# C13: what a view names for the recall tool (the replay's seqs are transcript indices): a placeholder's original
# and a summary's range
_NAMED_ONE = re.compile(r"\[old tool output compacted: [\d,]+ characters;[^\n]*?recall #(\d+)\]")
_NAMED_RANGE = re.compile(r"^Recall: #(\d+)(?:-#(\d+))? (?:is|are) in the transcript", re.MULTILINE)

_CREATE = re.compile(r"create|write", re.IGNORECASE)
_EDIT = re.compile(r"edit|replace|insert|patch", re.IGNORECASE)
# An id: a token of 5+ characters mixing letters and digits ("mia_li_3668", "ZFA04Y"), or all capitals ("MDCLVA").
_ID = re.compile(r"(?<![\w./-])(?:(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{4,}|[A-Z][A-Z0-9]{4,})(?![\w/-])")
_CODE = re.compile(r"`([^`\n]{2,40})`")
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception))\b")
# A line that reports an error (not code that mentions one): a traceback's last line, a linter's
# "E999 SyntaxError: ...", "error: ..." or "Error: ...".
_ERROR_LINE = re.compile(r"^\W*(?:E\d+\s+)?(?:[A-Z][A-Za-z0-9_.]*(?:Error|Exception)\b|error:)", re.IGNORECASE)


@dataclass(frozen=True)
class Probe:
    """One question about a transcript with a short, exact-matchable answer."""

    id: str  # "<type>/<kind>", unique within a transcript
    type: str  # one of PROBE_TYPES
    kind: str  # the sub-type (PROBE_KINDS)
    question: str
    expected: str
    source: int  # transcript index of the message the answer comes from
    at: int  # the probed call: the view is built from messages[:at]


# -- deriving probes ------------------------------------------------------------------------------------------------
def _ordinal(n: int) -> str:
    if n == 1:
        return "first"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class _Call:
    index: int  # transcript index of the assistant message
    tool: str
    nth: int  # 1 for the first call of this tool in the transcript, ...
    args: dict[str, Any]
    id: str | None  # the tool call's id (its result's tool_call_id)


def _calls(messages: Sequence[Any], start: int, end: int) -> list[_Call]:
    seen: dict[str, int] = {}
    out = []
    for i, m in enumerate(messages[:end]):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            name = tool_call_name(call) or "?"
            seen[name] = seen.get(name, 0) + 1
            if i >= start:
                call_id = call.get("id") if isinstance(call, dict) else None
                out.append(_Call(i, name, seen[name], tool_call_args(call) or {}, call_id))
    return out


def _path_arg(call: _Call) -> str | None:
    for key in PATH_KEYS:
        value = call.args.get(key)
        if isinstance(value, str) and value.strip() and "\n" not in value:
            return value.strip()
    return None


def _command(call: _Call) -> str | None:
    for key in SHELL_KEYS:
        value = call.args.get(key)
        if isinstance(value, str) and value.strip():
            return normalize(value.strip().splitlines()[0])
    return None


def _first_path(text: str) -> str | None:
    found = sorted(path_tokens(text), key=lambda p: (text.find(p), -len(p)))
    return found[0] if found else None


def _id_value(call: _Call) -> tuple[str, str] | None:
    """(key, value) of the call's first id argument: a key ending in "id" with a one-word value, or an id."""
    for key, value in call.args.items():
        if isinstance(value, str) and (_ID.fullmatch(value.strip()) or (
                key.lower().endswith("id") and re.fullmatch(r"[\w.:-]{3,60}", value.strip()))):
            return key, value.strip()
    return None


def _action(call: _Call) -> str:
    """"create", "edit" or "read": what a tool call did to the path it names."""
    sub = call.args.get("command") if isinstance(call.args.get("command"), str) else None
    if sub is not None and _path_arg(call):  # str_replace_editor style: command=view|create|str_replace|insert
        return "create" if sub == "create" else "read" if sub == "view" else "edit"
    if _CREATE.search(call.tool):
        return "create"
    return "edit" if _EDIT.search(call.tool) else "read"


def _primary(call: _Call) -> str | None:
    """The value that says what a tool call acted on: its path, a path in its command, the command, or an id."""
    path = _path_arg(call)
    if path:
        return path
    command = _command(call)
    if command:
        return _first_path(command) or (command if len(command) <= MAX_COMMAND else None)
    found = _id_value(call)
    return found[1] if found else None


def _salient(text: str) -> str | None:
    """The most specific handle in a user's request: a path, an id, a number, or a `code` span."""
    for pick in (_first_path(text), _first_match(_ID, text), _first_number(text), _first_match(_CODE, text, 1)):
        if pick:
            return pick
    return None


def _first_match(pattern: re.Pattern[str], text: str, group: int = 0) -> str | None:
    m = pattern.search(text)
    return m.group(group) if m else None


def _first_number(text: str) -> str | None:
    found = sorted(number_tokens(text, facts_only=True), key=lambda n: (text.find(n), -len(n)))
    return found[0] if found else None


def _number_line(text: str) -> tuple[str, str] | None:
    """(line with the number blanked as ___, the number) for the first line showing one fact number once.

    The number must stand as a whole word (not "105th", not the start of a hex id), as scoring matches it."""
    for raw in text.splitlines():
        line = normalize(raw)
        if sum(c.isalpha() for c in line) < 3:
            continue
        for number in sorted(number_tokens(line, facts_only=True), key=line.find):
            spots = [m.start() for m in re.finditer(rf"(?<![\w.,]){re.escape(number)}(?!\w|[.,]\d)", line)]
            if len(spots) != 1:
                continue
            at = spots[0]
            shown = line[:at] + "___" + line[at + len(number):]
            if len(shown) > MAX_LINE:  # a window around the blank, cut at spaces where it can be
                left = max(0, min(at - MAX_LINE // 2, len(shown) - MAX_LINE))
                right = left + MAX_LINE
                if left:
                    left = shown.find(" ", left, at) + 1 or left
                if right < len(shown):
                    right = shown.rfind(" ", at + 3, right) if shown.rfind(" ", at + 3, right) > 0 else right
                shown = ("..." if left else "") + shown[left:right].strip() + ("..." if right < len(shown) else "")
            if len(normalize(shown.replace("___", ""))) >= 6:
                return shown, number
    return None


def _last_error(messages: Sequence[Any], end: int) -> tuple[int, str] | None:
    """(index, exception type) of the last tool result before ``end`` that reports an error."""
    for i in range(end - 1, -1, -1):
        m = messages[i]
        if not isinstance(m, dict) or m.get("role") != "tool":
            continue
        text = content_text(m.get("content"))
        names = [n for line in text.splitlines() if _ERROR_LINE.match(line.strip())
                 for n in _EXCEPTION.findall(line)]
        if names:
            return i, names[-1]
    return None


def last_call(messages: Sequence[Any]) -> int | None:
    """Index of the last assistant message after the first message (the last simulated call), or None."""
    for i in range(len(messages) - 1, 0, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "assistant":
            return i
    return None


def derive_probes(messages: Sequence[Message], *, at: int | None = None) -> list[Probe]:
    """The probes of a transcript asked at call ``at`` (an assistant message's index; default the last).

    Deterministic: at most one probe per kind (PROBE_KINDS), each from the earliest (recall, artifact)
    or latest (continuation, decision) message that yields one. A kind with nothing to ask is left out.
    """
    msgs = list(messages)
    if at is None:
        at = last_call(msgs)
        if at is None:
            return []
    if not (0 < at < len(msgs)) or not isinstance(msgs[at], dict) or msgs[at].get("role") != "assistant":
        raise ValueError(f"at={at} is not the index of an assistant message (a simulated call)")
    out: list[Probe] = []

    def add(type_: str, kind: str, question: str, expected: str, source: int) -> None:
        out.append(Probe(f"{type_}/{kind}", type_, kind, question, expected, source, at))

    calls = _calls(msgs, 0, at)
    # recall: the path the first reading call used, the file the first edit changed, an id passed to a tool
    read = next(((c, p) for c in calls if _action(c) == "read" for p in [_path_arg(c)] if p), None)
    if read is None:
        read = next(((c, p) for c in calls if _action(c) == "read" for p in [_first_path(_command(c) or "")] if p),
                    None)
    if read:
        c, p = read
        add("recall", "path_read", f"Which path did the {_ordinal(c.nth)} call to the `{c.tool}` tool in this "
            "conversation use? Answer with the path only.", p, c.index)
    edit = next(((c, p) for c in calls if _action(c) == "edit" for p in [_path_arg(c)] if p), None)
    if edit:
        c, p = edit
        add("recall", "path_edited", f"Which file did the {_ordinal(c.nth)} call to the `{c.tool}` tool in this "
            "conversation change? Answer with its path only.", p, c.index)
    ided = next(((c, kv) for c in calls for kv in [_id_value(c)] if kv), None)
    if ided:
        c, (key, value) = ided
        add("recall", "tool_value", f"What `{key}` did the {_ordinal(c.nth)} call to the `{c.tool}` tool in this "
            "conversation use? Answer with the value only.", value, c.index)
    # artifact: a number a tool's output showed, a file a tool created
    by_id = {c.id: c for c in calls if c.id}
    for i, m in enumerate(msgs[:at]):
        if not isinstance(m, dict) or m.get("role") != "tool":
            continue
        found = _number_line(content_text(m.get("content")))
        if found:
            line, number = found
            owner = by_id.get(m.get("tool_call_id") or "")
            which = f"the {_ordinal(owner.nth)} call to the `{owner.tool}` tool" if owner else "a tool call"
            add("artifact", "number", f'The output of {which} in this conversation had a line reading "{line}". '
                "What number stood where ___ is? Answer with the number only.", number, i)
            break
    created = next(((c, p) for c in calls if _action(c) == "create" for p in [_path_arg(c)] if p), None)
    if created:
        c, p = created
        add("artifact", "file_created", f"Which file did the {_ordinal(c.nth)} call to the `{c.tool}` tool in this "
            "conversation create? Answer with its path only.", p, c.index)
    # continuation: the user's last request, and what the agent did next at the probed call
    user = next((i for i in range(at - 1, -1, -1) if isinstance(msgs[i], dict) and msgs[i].get("role") == "user"),
                None)
    if user is not None:
        handle = _salient(content_text(msgs[user].get("content")))
        if handle:
            add("continuation", "last_request", "What did the user ask for in their most recent message? Restate "
                "the request briefly, keeping any file name, id or number it mentioned.", handle, user)
    nxt = next((p for c in _calls(msgs, at, at + 1) for p in [_primary(c)] if p), None)
    if nxt:
        add("continuation", "next_step", "What is the next step? Name the tool you would call next and the file "
            "path, command or value you would pass to it.", nxt, at)
    # decision: the last error a tool reported, and the first thing done after it
    err = _last_error(msgs, at)
    if err:
        i, name = err
        add("decision", "last_error", "What was the last error a tool reported in this conversation? Answer with "
            "the error's type (its exception name) only.", name, i)
        after = next((c for c in calls if c.index > i), None)
        if after:
            add("decision", "error_action", "What did you do right after the last error a tool reported? Name the "
                "tool you called and the file path, command or value you passed to it.",
                _primary(after) or after.tool, after.index)
    return out


# -- scoring -------------------------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    return normalize(text).casefold()


def score_answer(reply: str | None, expected: str) -> bool:
    """Normalised exact match: ``expected`` occurs in ``reply`` as a whole word, case/whitespace-insensitive."""
    if not reply:
        return False
    want = _norm(expected)
    if not want:
        return False
    left = r"(?<!\w)" if want[0].isalnum() or want[0] == "_" else ""
    right = r"(?!\w)" if want[-1].isalnum() or want[-1] == "_" else ""
    return re.search(left + re.escape(want) + right, _norm(reply)) is not None


def view_text(messages: Sequence[Message]) -> str:
    """All text a view shows the model (contents, tool names and arguments), for ``present``."""
    return "\n".join(message_text(m) for m in messages if isinstance(m, dict))


def transcript_text(messages: Sequence[Message]) -> str:
    """A view as plain text, one block per message (``[role]`` headers; tool calls as ``-> name(args)``)."""
    blocks = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role") or "?")
        head = f"[{role} {m['name']}]" if role == "tool" and m.get("name") else f"[{role}]"
        lines = [content_text(m.get("content"))]
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else ""
            lines.append(f"-> {tool_call_name(call) or '?'}({args if isinstance(args, str) else args!r})")
        blocks.append(head + "\n" + "\n".join(line for line in lines if line))
    return "Conversation so far:\n\n" + "\n\n".join(blocks)


# -- views ---------------------------------------------------------------------------------------------------------
def policy_view(messages: Sequence[Message], policy: ContextPolicy | dict[str, Any], at: int, *,
                summarize: Callable[[list[Message]], str] | None = build_structured_summary,
                cache: TokenCache | None = None) -> RequestView:
    """The request view the loop would send for the call at transcript index ``at`` (as ``replay`` builds it).

    SPEC C7: the first call of a user turn is built from the whole transcript so far; each later call of
    the turn from the previous view's ``next_input`` plus the messages added since.
    """
    msgs = list(messages)
    _, pol = as_policy(policy)
    turns = _turns(msgs)
    calls = [i for i in range(1, at + 1) if isinstance(msgs[i], dict) and msgs[i].get("role") == "assistant"]
    if not calls or calls[-1] != at:
        raise ValueError(f"at={at} is not the index of an assistant message (a simulated call)")
    chain = [i for i in calls if turns[i - 1] == turns[at - 1]]
    cache = cache if cache is not None else TokenCache()
    view = build_request_view(msgs[:chain[0]], pol, summarize, cache=cache)
    prev = chain[0]
    for i in chain[1:]:
        view = build_request_view(view.next_input(msgs[prev:i]), pol, summarize, cache=cache)
        prev = i
    return view


# -- asking --------------------------------------------------------------------------------------------------------
def _provider(spec: Any, **kw: Any) -> Any:
    if hasattr(spec, "complete"):
        return spec
    from mxclaw_nb.connect import resolve_provider
    from mxclaw_nb.settings import DEMO_MODEL

    settings = {**kw, **spec} if isinstance(spec, dict) else kw
    provider = resolve_provider(**settings)
    if getattr(provider, "is_demo", False) and settings.get("model") != DEMO_MODEL:
        # resolve_provider falls back to the offline demo model; its "recall" would measure nothing
        raise ValueError("no model is configured for the probes: pass base_url=/api_key=/model= (or provider=), "
                         f"or set OPENAI_API_KEY / OPENAI_BASE_URL / MXCLAW_MODEL (model={DEMO_MODEL!r} asks the "
                         "offline demo model on purpose)")
    return provider


def _ask(provider: Any, messages: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(reply text, error message): a failed call is recorded, not scored as wrong."""
    from mxclaw_nb.provider.errors import ProviderError

    try:
        out = provider.complete(messages, None)
    except ProviderError as exc:
        return None, exc.message
    return content_text(out.message.get("content")), None


@dataclass
class _View:
    policy: str
    messages: list[Message]
    text: str
    stage: str
    after_tokens: int
    compacted: int  # transcript messages summarized, replaced by a placeholder or dropped in this view
    fact_survival: float
    named: tuple[frozenset[int], tuple[tuple[int, int], ...]] = (frozenset(), ())  # C13: seqs, seq ranges

    def recallable(self, seq: int) -> bool:
        """R2: the recall tool can read transcript message `seq` from this view (named by a placeholder or
        inside a summary's range)."""
        one, ranges = self.named
        return seq in one or any(a <= seq <= b for a, b in ranges)


def named_seqs(messages: Sequence[Message]) -> tuple[frozenset[int], tuple[tuple[int, int], ...]]:
    """C13: the seqs a view's placeholders name and the seq ranges its summaries name."""
    one: set[int] = set()
    ranges: list[tuple[int, int]] = []
    for m in messages:
        text = content_text(m.get("content")) if isinstance(m, dict) else ""
        if m.get("role") == "tool":
            one.update(int(g) for g in _NAMED_ONE.findall(text))
        elif m.get("role") == "system":
            ranges += [(int(a), int(b or a)) for a, b in _NAMED_RANGE.findall(text)]
    return frozenset(one), tuple(ranges)


def _views(sid: str, msgs: list[Message], pols: list[tuple[str, ContextPolicy]], at: int, full: bool,
           summarize: Callable[[list[Message]], str] | None) -> list[_View]:
    out = []
    if full:  # the whole transcript so far, repaired (C4) but never compacted: a window nothing reaches
        whole = build_request_view(msgs[:at], FULL_POLICY, None)
        out.append(_View(FULL, whole.messages, _norm(view_text(whole.messages)), whole.stage, whole.after_tokens, 0,
                         1.0))
    caches = SessionCaches()
    for label, pol in pols:
        view = policy_view(msgs, pol, at, summarize=summarize, cache=caches.token_cache(pol))
        replayed: list[RequestView] = []  # its placeholders name transcript indices (C13), the probes' sources
        row = replay_messages(msgs[:at + 1], pol, session_id=sid, summarize=summarize, caches=caches,
                              views=replayed)[-1]
        total = row.get("facts_total") or 0
        survival = row["facts_visible"] / total if total else 1.0  # nothing compacted held a fact: nothing lost
        compacted = sum(int(row[k]) for k in ("summarized", "placeholder", "dropped"))
        out.append(_View(label, view.messages, _norm(view_text(view.messages)), view.stage, view.after_tokens,
                         compacted, survival, named_seqs(replayed[-1].messages)))
    return out


ANSWER_COLUMNS = ["session_id", "policy", "run", "probe_id", "type", "kind", "at", "source", "question", "expected",
                  "present", "reply", "correct", "error", "stage", "after_tokens", "compacted", "fact_survival"]


def evaluate_probes(transcripts: Any, policies: Sequence[ContextPolicy | dict[str, Any]] | Any, *,
                    model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                    provider: Any = None, runs: int = 1, judge: Any = None, full: bool = True,
                    at: int | None = None, store: Any = None, workers: int = 1, as_text: bool = False,
                    recall: bool = False,
                    summarize: Callable[[list[Message]], str] | None = build_structured_summary) -> pd.DataFrame:
    """Ask every probe of every transcript against every policy's view; one row per answer.

    ``transcripts``: anything ``compare`` takes; ``at`` (an assistant message's index) suits one transcript.
    The model: ``provider`` (an ``OpenAIProvider``), else ``model``/``base_url``/``api_key`` (else the
    environment, as ``resolve_provider`` reads it; none at all is an error, not the demo model).
    ``full=True`` adds the uncompacted view (label ``"full"``) as the model's ceiling. ``judge``: None
    (default, no judge), True (the same model) or a provider / dict of provider settings; adds
    ``judge_reply`` and ``judge_correct``. ``as_text=True`` sends each view as one user message of plain
    text (``transcript_text``), for endpoints that refuse tool-call history without tool definitions.
    ``workers > 1`` asks in parallel threads (scripted answers that vary per ask then arrive in no fixed
    order). A failed call leaves ``correct`` empty (NaN) and its message in ``error``. ``recall=True`` (R2):
    columns ``recallable`` (not present, but its source is named for the recall tool) and ``answerable``.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    pols = [as_policy(p) for p in ([policies] if isinstance(policies, ContextPolicy | dict) else policies)]
    labels = [label for label, _ in pols]
    if full and FULL in labels:
        raise ValueError(f"a policy is labelled {FULL!r}, the name of the uncompacted baseline; rename it")
    if len(set(labels)) != len(labels):
        raise ValueError(f"policies need distinct labels, got {labels}; add a 'name' to each dict")
    asker = _provider(provider, model=model, base_url=base_url, api_key=api_key, stream=False)
    grader = None if judge in (None, False) else asker if judge is True else _provider(judge, stream=False)
    tasks: list[dict[str, Any]] = []
    for sid, messages in conversations(transcripts, store):
        msgs = list(messages)
        probes = derive_probes(msgs, at=at)
        if not probes:
            continue
        views = _views(sid, msgs, pols, probes[0].at, full, summarize)
        for run in range(1, runs + 1):
            for view in views:
                for probe in probes:
                    tasks.append({"session_id": sid, "run": run, "view": view, "probe": probe})

    def one(task: dict[str, Any]) -> dict[str, Any]:
        view, probe = task["view"], task["probe"]
        prompt = PROBE_PROMPT.format(question=probe.question)
        if as_text:
            request = [{"role": "user", "content": f"{transcript_text(view.messages)}\n\n{prompt}"}]
        else:
            request = [*view.messages, {"role": "user", "content": prompt}]
        reply, error = _ask(asker, request)
        row = {"session_id": task["session_id"], "policy": view.policy, "run": task["run"], "probe_id": probe.id,
               "type": probe.type, "kind": probe.kind, "at": probe.at, "source": probe.source,
               "question": probe.question, "expected": probe.expected,
               "present": score_answer(view.text, probe.expected), "reply": reply,
               "correct": math.nan if error else float(score_answer(reply, probe.expected)), "error": error,
               "stage": view.stage, "after_tokens": view.after_tokens, "compacted": view.compacted,
               "fact_survival": view.fact_survival}
        if recall:
            row["recallable"] = not row["present"] and view.recallable(probe.source)
            row["answerable"] = row["present"] or row["recallable"]
        if grader is not None:
            verdict, jerr = (None, "no reply to grade") if reply is None else _ask(grader, [{
                "role": "user", "content": JUDGE_PROMPT.format(question=probe.question, expected=probe.expected,
                                                               reply=reply)}])
            row["judge_reply"] = verdict
            row["judge_correct"] = math.nan if jerr else float(_norm(verdict or "").startswith("yes"))
        return row

    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            rows = list(pool.map(one, tasks))
    else:
        rows = [one(t) for t in tasks]
    columns = (ANSWER_COLUMNS + (["recallable", "answerable"] if recall else [])
               + (["judge_reply", "judge_correct"] if grader is not None else []))
    df = pd.DataFrame(rows, columns=columns)
    df["policy"] = pd.Categorical(df["policy"], [*([FULL] if full else []), *labels], ordered=True)
    df.attrs["model"] = getattr(asker, "label", repr(asker))
    if grader is not None:
        df.attrs["judge"] = getattr(grader, "label", repr(grader))
    return df


def _run_stats(d: pd.DataFrame, column: str) -> tuple[float, float]:
    per_run = d.groupby("run")[column].mean()
    mean = float(per_run.mean()) if len(per_run) else math.nan
    std = float(per_run.std(ddof=1)) if len(per_run) > 1 else math.nan
    return mean, std


def summarize_probes(answers: pd.DataFrame) -> pd.DataFrame:
    """Presence beside recall: one row per (policy, probe type), plus type "all" per policy.

    ``fact_survival``: share of the compacted messages' facts still visible in the view (``facts.py``;
    1.0 when nothing with a fact was compacted, and for the ``full`` view). ``presence``: share of the
    probes whose answer is in the view's text. ``recall``: mean over runs of the share answered
    correctly (normalised exact match); ``recall_std``: its sample standard deviation over runs (NaN
    with one run). ``answerable`` (answers evaluated with ``recall=True``): share of the probes present or
    recallable through the recall tool (R2). ``judge_recall``/``judge_recall_std`` likewise from the judge's
    verdicts (a judge's opinion, not exact match). ``errors``: calls that failed (not counted as wrong).
    """
    rows = []
    judged = "judge_correct" in answers
    for policy, d in answers.groupby("policy", observed=True, sort=True):
        once = d[d["run"] == d["run"].min()]
        survival = float(once.drop_duplicates("session_id")["fact_survival"].mean())
        for type_ in [*PROBE_TYPES, "all"]:
            t = d if type_ == "all" else d[d["type"] == type_]
            if t.empty:
                continue
            first = t[t["run"] == t["run"].min()]
            recall, std = _run_stats(t, "correct")
            row: dict[str, Any] = {"policy": policy, "type": type_, "probes": len(first), "runs": t["run"].nunique(),
                                   "fact_survival": survival, "presence": float(first["present"].mean()),
                                   "recall": recall, "recall_std": std}
            if "answerable" in first:
                row["answerable"] = float(first["answerable"].mean())
            if judged:
                row["judge_recall"], row["judge_recall_std"] = _run_stats(t, "judge_correct")
            row["errors"] = int(t["error"].notna().sum())
            rows.append(row)
    out = pd.DataFrame(rows)
    if not out.empty:
        out["policy"] = pd.Categorical(out["policy"], list(answers["policy"].cat.categories)
                                       if hasattr(answers["policy"], "cat") else None, ordered=True)
    out.attrs.update(answers.attrs)
    return out


def probe_table(probes: Sequence[Probe]) -> pd.DataFrame:
    """Probes as a DataFrame (to read them before spending calls on them)."""
    return pd.DataFrame([asdict(p) for p in probes], columns=["id", "type", "kind", "question", "expected", "source",
                                                              "at"])
