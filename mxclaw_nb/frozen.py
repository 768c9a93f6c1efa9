"""Frozen per-session context: system prompt, project instructions, policy, skills, memory (SPEC F1).

Why frozen: project rules, skills and memory are read once, on a session's first turn, and stored
as system messages in the transcript. Changing ``AGENTS.md`` halfway through a task would change
the rules under the model's feet; with freezing, edits only affect new sessions, and the stored
transcript shows exactly which rules the session ran under.

Each message's first line names its layer (``[project instructions] AGENTS.md`` ...), so the UI's
context gauge can classify layers with ``frozen_layer`` without extra stored fields. Reading is
forgiving: a missing file is skipped, an unreadable file or invalid JSON gives a visible note inside
the message instead of a crash, and each file is capped so one huge file cannot fill the window.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MAX_FILE_CHARS = 20_000
MAX_SKILL_DESCRIPTION = 300
POLICY_KEYS = ("verification", "verificationPolicy", "verification_policy", "verify")

SYSTEM_PROMPT = """[system prompt] mxclaw_nb coding agent
You are mxclaw_nb, a coding agent working inside a Jupyter notebook on the user's workspace folder.
All file paths are relative to the workspace root; tools cannot reach files outside it.
Tools:
- list_dir{path}, read_file{path, offset?, limit?}, grep{pattern, path}: look around before changing things.
- write_file{path, content}, edit_file{path, old_string, new_string}: change files; old_string must occur exactly
  once, so copy it from read_file output with enough surrounding lines.
- bash{command}: run a shell command in the workspace (subject to the user's approval, a forbidden-command list
  and a timeout); the result gives the exit code, stdout and stderr.
- read_artifact{artifact_id, ...}: tool results over 50 KB are stored whole as artifacts and you see only a
  preview with "[artifact <id>]"; read the rest by byte range, line range, or search.
Work in small verified steps: inspect, change, then run the project's checks. Failures (Tool failed, Invalid,
Permission denied, Forbidden) are evidence: do not repeat a failing action unchanged.
Older parts of a long conversation may appear as a compressed summary; the full transcript is kept.
Answer with a short summary of what you did and what remains when the task is done."""

_LAYERS = (
    ("[system prompt]", "system prompt"),
    ("[project instructions]", "project instructions"),
    ("[verification policy]", "verification policy"),
    ("[skill index]", "skill index"),
    ("[memory snapshot]", "memory snapshot"),
)


def _system(first_line: str, body: str) -> dict[str, Any]:
    return {"role": "system", "content": f"{first_line}\n{body}"}


def _cap(text: str) -> str:
    if len(text) <= MAX_FILE_CHARS:
        return text
    note = f"[... truncated: the file has {len(text)} characters; first {MAX_FILE_CHARS} kept]"
    return text[:MAX_FILE_CHARS] + "\n" + note


def _read(path: Path) -> tuple[str | None, str | None]:
    """(text, None) for a readable non-empty file, (None, note) when unreadable, (None, None) if absent/empty."""
    try:
        if not path.exists():
            return None, None
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        return None, f"(note: could not read {path.name}: {type(exc).__name__}: {exc.strerror or exc})"
    text = text.strip("\n")
    return (text, None) if text.strip() else (None, None)


def _file_message(first_line: str, path: Path) -> dict[str, Any] | None:
    text, note = _read(path)
    if note is not None:
        return _system(first_line, note)
    return None if text is None else _system(first_line, _cap(text))


def _policy_message(path: Path) -> dict[str, Any] | None:
    first = "[verification policy] .mx-claw/project.json"
    text, note = _read(path)
    if note is not None or text is None:
        return None if note is None else _system(first, note)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return _system(first, f"(note: project.json is not valid JSON: {exc}; no verification policy was loaded)")
    if isinstance(data, dict):
        key = next((k for k in POLICY_KEYS if k in data), None)
        data = data[key] if key else data
    policy = data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False)
    return _system(first, _cap(policy))


def _front_matter(text: str) -> dict[str, str]:
    """name/description from a '---' YAML front-matter block (simple 'key: value', folded '>'/'|')."""
    m = re.match(r"\A---[ \t]*\n(.*?)\n---[ \t]*(\n|\Z)", text, re.S)
    if not m:
        return {}
    fields: dict[str, str] = {}
    key = None
    for line in m.group(1).splitlines():
        kv = re.match(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$", line)
        if kv:
            key, value = kv.group(1), kv.group(2).strip()
            fields[key] = "" if value in (">", "|", ">-", "|-") else value.strip("'\"")
        elif key and line.startswith((" ", "\t")):
            fields[key] = (fields[key] + " " + line.strip()).strip()
    return fields


def _skill_line(skill_md: Path) -> str:
    name = skill_md.parent.name
    text, note = _read(skill_md)
    if text is None:
        return f"- {name}: {note or '(empty SKILL.md)'}"
    meta = _front_matter(text)
    body = text[text.find("\n---", 3) + 4 :] if meta else text
    first = next((ln.strip().lstrip("#").strip() for ln in body.splitlines() if ln.strip()), "")
    desc = " ".join((meta.get("description") or first or "(no description)").split())
    if len(desc) > MAX_SKILL_DESCRIPTION:
        desc = desc[: MAX_SKILL_DESCRIPTION - 1] + "…"
    return f"- {meta.get('name') or name}: {desc}"


def _skills_message(skills_dir: Path) -> dict[str, Any] | None:
    try:
        files = sorted(skills_dir.glob("*/SKILL.md")) if skills_dir.is_dir() else []
    except OSError:
        files = []
    if not files:
        return None
    return _system("[skill index]", "\n".join(_skill_line(f) for f in files))


def load_frozen_context(workspace: Path, *, home: Path | None = None) -> list[dict[str, Any]]:
    """F1 system messages in a fixed order; missing files skipped, broken ones noted, never raises."""
    ws = Path(workspace)
    user_home = Path.home() if home is None else Path(home)
    candidates = [
        _file_message("[project instructions] AGENTS.md", ws / "AGENTS.md"),
        _file_message("[project instructions] .mx-claw/AGENTS.md", ws / ".mx-claw" / "AGENTS.md"),
        _policy_message(ws / ".mx-claw" / "project.json"),
        _skills_message(ws / ".mx-claw" / "skills"),
        _file_message("[memory snapshot] user", user_home / ".mx-claw" / "memory.md"),
        _file_message("[memory snapshot] project", ws / ".mx-claw" / "memory.md"),
    ]
    return [m for m in candidates if m is not None]


def session_preamble(workspace: Path, *, home: Path | None = None) -> list[dict[str, Any]]:
    """The system prompt followed by the frozen context: what a new session stores first."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, *load_frozen_context(workspace, home=home)]


def frozen_layer(message: dict[str, Any]) -> str | None:
    """The frozen layer a system message belongs to, from its first line; None for anything else."""
    if message.get("role") != "system":
        return None
    content = message.get("content")
    if isinstance(content, list):
        content = next((p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"), "")
    if not isinstance(content, str):
        return None
    first = content.split("\n", 1)[0]
    return next((layer for prefix, layer in _LAYERS if first.startswith(prefix)), None)
