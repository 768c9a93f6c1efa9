"""The DataFrames `%agent` commands display: the store's frames shaped for reading (SPEC N1, S4).

Why: the store's readers (`Store.sessions()`, `events()`, `transcript()`, `analysis.replay`) return stable,
complete frames for code; printed as they are, they bury the answer under 32-character ids, JSON payload
strings, `NaN`/`<NA>` in every column that does not apply to a row, and 31 replay columns. These
functions shape only what the magics show: short ids (the 8 characters `%agent resume` accepts), the
columns a reader looks at first, event payloads spread into columns (tool, stage, tokens, decision), and
an empty cell where a value does not apply. Each command's `--full` (`--all-columns` for replay) returns
the store's frame unchanged; a shaped frame names what it left out in `df.attrs["hidden_columns"]`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd

from mxclaw_nb.events import ContextCacheDecision, parse

SHORT_ID = 8  # characters of a session id shown (and accepted by %agent resume)
PREVIEW_CHARS = 120
DETAIL_CHARS = 90
UNITS = {"estimate": "est.", "estimates": "est.", "calibrated": "calibrated", "reported": "reported"}


def short(value: Any) -> str:
    """A session id as shown in tables: its first 8 characters."""
    return "" if value is None or value is pd.NA else str(value)[:SHORT_ID]


def short_ids(ids: pd.Series) -> pd.Series:
    """Each id by its first `SHORT_ID` characters, or as many more as tell it from every other id of `ids` (as
    git shortens hashes): each shown id is a prefix `%agent resume` takes. Imported ids start with `imp-`, so
    their first 8 characters often collide."""
    text = ids.astype("string").fillna("")
    order = sorted(set(text))
    length = dict.fromkeys(order, SHORT_ID)
    for a, b in zip(order, order[1:], strict=False):
        common = len(os.path.commonprefix([a, b]))
        length[a] = max(length[a], common + 1)
        length[b] = max(length[b], common + 1)
    return text.map(lambda s: s[:length[s]])


def one_line(text: Any, limit: int = PREVIEW_CHARS) -> str:
    """Whitespace folded to single spaces, cut at `limit` characters with an ellipsis."""
    if text is None or text is pd.NA or (isinstance(text, float) and pd.isna(text)):
        return ""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def blank(df: pd.DataFrame, keep: tuple[str, ...] = ()) -> pd.DataFrame:
    """No NaN/<NA>/None: a column with missing values shows empty cells; one with no value at all is left out."""
    out = df.copy()
    for col in list(out.columns):
        missing = out[col].isna()
        if not missing.any():
            continue
        if missing.all() and col not in keep:
            out = out.drop(columns=col)
            continue
        out[col] = out[col].astype(object).where(~missing, "")
    return out


def _hidden(shown: pd.DataFrame, source: pd.DataFrame) -> pd.DataFrame:
    shown.attrs["hidden_columns"] = [c for c in source.columns if c not in shown.columns]
    return shown


def sessions_frame(df: pd.DataFrame, current: str | None) -> pd.DataFrame:
    """`%agent sessions`: current marker, short id, title, size and compaction figures first."""
    out = pd.DataFrame({"current": df["id"] == current, "id": short_ids(df["id"])})
    for col in ("title", "turns", "messages", "model_calls", "compactions", "tokens_saved_est", "model", "source",
                "created_at", "workspace"):
        if col in df.columns:
            out[col] = df[col].dt.floor("s") if col == "created_at" else df[col]
    return _hidden(blank(out), df)


def _payload(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}


def _arguments(raw: Any) -> str:
    """Tool-call arguments as `key=value` pairs (the JSON string when it is not an object)."""
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return one_line(raw, DETAIL_CHARS)
    if not isinstance(args, dict):
        return one_line(raw, DETAIL_CHARS)
    return one_line(" ".join(f"{k}={v}" for k, v in args.items()), DETAIL_CHARS)


def _plain(value: Any) -> str:
    """A payload value as table text: scalars as they are, nested values as compact JSON."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _event_row(kind: str, p: dict[str, Any]) -> dict[str, Any]:
    """The payload keys that matter for one event type, as columns; `detail` is a one-line preview."""
    row: dict[str, Any] = {}
    if kind.startswith("tool."):
        row["tool"] = p.get("name") or ""
    if kind == "tool.started":
        row["detail"] = _arguments(p.get("arguments"))
    elif kind == "tool.finished":
        exit_code = p.get("exit_code")
        failed = bool(p.get("is_error"))
        row["status"] = (f"failed (exit {exit_code})" if failed and exit_code not in (None, 0) else
                         "failed" if failed else "ok")
        chars = p.get("chars")
        size = f" ({int(chars):,} chars)" if isinstance(chars, int) else ""
        artifact = f" [artifact {p['artifact_id']}]" if p.get("artifact_id") else ""
        row["detail"] = one_line(p.get("content"), DETAIL_CHARS) + size + artifact
    elif kind == "context.compacted":
        row.update(stage=p.get("stage"), tokens_before=p.get("before_tokens"), tokens_after=p.get("after_tokens"),
                   unit=UNITS.get(str(p.get("tokens_are") or "estimate"), p.get("tokens_are")),
                   threshold=p.get("threshold"), detail=one_line(p.get("summary"), DETAIL_CHARS),
                   cache_break=p.get("cache_break_tokens"))  # E3: prefix tokens rewritten (est., in `unit`)
    elif kind == "context.cache_decision":  # E4: kept a warm prefix or broke it, and why (the live log's line)
        event = parse(kind, p)
        text = event.text() if isinstance(event, ContextCacheDecision) else ""
        row.update(decision=p.get("decision"), detail=one_line(text, DETAIL_CHARS))
    elif kind == "approval.decided":
        row.update(tool="bash", decision=p.get("decision"), by=p.get("by"),
                   detail=one_line(p.get("command"), DETAIL_CHARS))
    elif kind == "turn.started":
        row["detail"] = one_line(p.get("prompt"), DETAIL_CHARS)
    elif kind == "turn.finished":
        row.update(status=p.get("status"), detail=one_line(p.get("text"), DETAIL_CHARS))
    elif kind == "turn.failed":
        row.update(status=p.get("kind") or "failed", detail=one_line(p.get("error"), DETAIL_CHARS))
    elif kind in ("provider.note", "frozen.note"):
        row["detail"] = one_line(p.get("note"), DETAIL_CHARS)
    elif kind == "turn.interrupted":
        n = p.get("iterations")
        row.update(status="interrupted", detail=f"interrupted after {n} model call{'s' if n != 1 else ''}"
                   if isinstance(n, int) else "interrupted")
    else:  # key=value pairs, JSON only for nested values: never a raw JSON object in the table
        row["detail"] = one_line(" · ".join(f"{k}={_plain(v)}" for k, v in p.items() if k != "session_id"),
                                 DETAIL_CHARS)
    return row


EVENT_COLUMNS = ["tool", "status", "stage", "tokens_before", "tokens_after", "unit", "threshold", "cache_break",
                 "decision", "by", "detail"]


def events_frame(df: pd.DataFrame, all_sessions: bool = False) -> pd.DataFrame:
    """`%agent events`: seq, turn, call, type, then the payload's useful keys as columns, then the time."""
    out = pd.DataFrame({"seq": df["seq"], "turn": df["turn"], "call": df["iteration"], "type": df["type"]},
                       index=df.index)
    if all_sessions:
        out.insert(0, "session", short_ids(df["session_id"]))
    rows = [_event_row(kind, _payload(p)) for kind, p in zip(df["type"], df["payload"], strict=True)]
    payload = pd.DataFrame(rows, index=df.index, columns=EVENT_COLUMNS)
    for col in ("tokens_before", "tokens_after", "threshold", "cache_break"):
        payload[col] = pd.to_numeric(payload[col], errors="coerce").astype("Int64")
    out = pd.concat([out, payload], axis=1)
    out["time"] = df["created_at"].dt.floor("s") if "created_at" in df.columns else ""
    return _hidden(blank(out.reset_index(drop=True)), df)


def _tool_names(df: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """Per row: the tools an assistant message calls; and tool_call_id -> tool name for the results."""
    calls: list[str] = []
    by_id: dict[str, str] = {}
    for raw in df["tool_calls"] if "tool_calls" in df.columns else [None] * len(df):
        try:
            items = json.loads(raw) if isinstance(raw, str) and raw else (raw if isinstance(raw, list) else [])
        except ValueError:
            items = []
        names = []
        for tc in items or []:
            name = str((tc.get("function") or {}).get("name") or "") if isinstance(tc, dict) else ""
            names.append(name)
            if isinstance(tc, dict) and tc.get("id"):
                by_id[str(tc["id"])] = name
        calls.append(", ".join(f"→ {n}" for n in names))
    return calls, by_id


def transcript_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`%agent transcript`: seq, turn, call, role, tool, a one-line preview and its length, tool outcome."""
    calls, by_id = _tool_names(df)
    ids = df["tool_call_id"] if "tool_call_id" in df.columns else pd.Series([None] * len(df), index=df.index)
    tool = [by_id.get(str(i), "") if role == "tool" else called
            for role, i, called in zip(df["role"], ids, calls, strict=True)]
    content = df["content"].astype(object).where(df["content"].notna(), "").astype(str)
    errors = df["is_error"] if "is_error" in df.columns else pd.Series([pd.NA] * len(df), index=df.index)
    outcome = ["failed" if e is True else "ok" if role == "tool" else ""
               for role, e in zip(df["role"], errors.astype(object).where(errors.notna(), None), strict=True)]
    out = pd.DataFrame({"seq": df["seq"], "turn": df["turn"], "call": df["iteration"], "role": df["role"],
                        "tool": tool, "content": content.map(one_line), "chars": content.str.len(),
                        "outcome": outcome}, index=df.index)
    return _hidden(blank(out.reset_index(drop=True), keep=("call",)), df)


REPLAY_COLUMNS = ["call", "turn", "stage", "n_messages", "n_sent", "full_tokens", "before_tokens", "after_tokens",
                  "saved_tokens", "threshold", "kept", "placeholder", "summarized", "dropped", "synthetic",
                  "fact_survival"]


def replay_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`%agent replay`: the call, its stage, token figures and what happened to the transcript's messages."""
    out = df[[c for c in REPLAY_COLUMNS if c in df.columns]].copy()
    if "cache_decision" in df.columns and df["cache_decision"].notna().any():  # E4: a `<name>-cache` strategy
        out["cache_decision"] = df["cache_decision"]
    if "fact_survival" in out.columns:  # a share where facts were compacted, empty where none were
        out["fact_survival"] = out["fact_survival"].round(3)
    return _hidden(blank(out, keep=("fact_survival",) if "fact_survival" in out.columns else ()), df)


def view_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`%agent view --before/--after`: the inspector's frame with empty cells where a value does not apply."""
    return blank(df)
