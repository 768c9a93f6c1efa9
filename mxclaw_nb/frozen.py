"""Frozen per-session context: system prompt, project instructions, policy, skills, memory (SPEC F1).

Why frozen: project rules, skills and memory are read once, on a session's first turn, and stored
as system messages in the transcript. Changing ``AGENTS.md`` halfway through a task would change
the rules under the model's feet; with freezing, edits only affect new sessions, and the stored
transcript shows exactly which rules the session ran under.

Each message's first line names its layer (``[project instructions] AGENTS.md`` ...), so the UI's
context gauge can classify layers with ``frozen_layer`` without extra stored fields. Reading is
forgiving: a missing file is skipped, an unreadable file or invalid JSON gives a visible note inside
the message instead of a crash, and each file is capped so one huge file cannot fill the window.

SPEC L9: these files are read the way the file tools read (``tools.beneath``): opened beneath the workspace
(the user memory beneath the home folder) without following a link out of it at any component, regular
files with one link only, non-blocking (a FIFO cannot hang the first turn), and at most ``MAX_FILE_BYTES``
read whatever the file claims (a link to ``/dev/zero`` cannot exhaust memory). A cloned repository or an
earlier shell command can plant such links; anything refused is a visible note in the message, never
content, and ``load_frozen`` returns the notes so the agent stores and shows them (``frozen.note``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mxclaw_nb.tools.beneath import NotReadable, OutsideWorkspace, open_beneath, read_capped

MAX_FILE_CHARS = 20_000
MAX_FILE_BYTES = 256 * 1024  # L9: read at most this much of one file (MAX_FILE_CHARS of 4-byte characters and more)
MAX_SKILLS = 200  # skill folders listed in the index
_READ_CAPPED = " characters kept]"
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
    if len(text) <= MAX_FILE_CHARS or text.endswith(_READ_CAPPED):  # already capped when read (L9)
        return text
    note = f"[... truncated: the file has {len(text)} characters; first {MAX_FILE_CHARS} kept]"
    return text[:MAX_FILE_CHARS] + "\n" + note


class _Reader:
    """Reads the frozen files of one load beneath their root (L9), collecting a note for each refusal."""

    def __init__(self) -> None:
        self.notes: list[dict[str, str]] = []

    def read(self, root: Path, rel: str, shown: str) -> tuple[str | None, str | None]:
        """(text, None) for a readable file ("" when blank), (None, note) when refused, (None, None) if absent."""
        try:
            got = read_capped(root, rel, MAX_FILE_BYTES + 1)
        except NotReadable as exc:
            said = f"{shown} was not read: {exc.reason}."
            self.notes.append({"file": shown, "note": said})
            return None, f"(note: {said})"
        if got is None:
            return None, None
        data, size = got
        text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
        if len(data) > MAX_FILE_BYTES or size > MAX_FILE_BYTES:
            text = text[:MAX_FILE_CHARS] + (f"\n[... truncated: the file has {max(size, len(data))} bytes; at most "
                                            f"{MAX_FILE_BYTES} were read, first {MAX_FILE_CHARS}{_READ_CAPPED}")
        text = text.strip("\n")
        return (text if text.strip() else ""), None

    def file_message(self, first_line: str, root: Path, rel: str, shown: str) -> dict[str, Any] | None:
        text, note = self.read(root, rel, shown)
        if note is not None:
            return _system(first_line, note)
        return _system(first_line, _cap(text)) if text else None

def _policy_message(reader: _Reader, ws: Path) -> dict[str, Any] | None:
    first = "[verification policy] .mx-claw/project.json"
    text, note = reader.read(ws, ".mx-claw/project.json", ".mx-claw/project.json")
    if note is not None or not text:
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


def _skill_line(reader: _Reader, ws: Path, name: str) -> str | None:
    rel = f".mx-claw/skills/{name}/SKILL.md"
    text, note = reader.read(ws, rel, rel)
    if note is not None or not text:
        return None if text is None and note is None else f"- {name}: {note or '(empty SKILL.md)'}"
    meta = _front_matter(text)
    body = text[text.find("\n---", 3) + 4 :] if meta else text
    first = next((ln.strip().lstrip("#").strip() for ln in body.splitlines() if ln.strip()), "")
    desc = " ".join((meta.get("description") or first or "(no description)").split())
    if len(desc) > MAX_SKILL_DESCRIPTION:
        desc = desc[: MAX_SKILL_DESCRIPTION - 1] + "…"
    return f"- {meta.get('name') or name}: {desc}"


def _skill_names(reader: _Reader, ws: Path) -> list[str]:
    """The folder names under `.mx-claw/skills`, listed through a descriptor opened beneath the workspace (L9)."""
    rel = ".mx-claw/skills"
    try:
        root_fd = os.open(ws, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        fd = open_beneath(ws, root_fd, rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        reason = (f"it {exc.strerror}; links out are never followed" if isinstance(exc, OutsideWorkspace) else
                  f"it cannot be opened ({exc.strerror})")
        reader.notes.append({"file": rel, "note": f"{rel} was not read: {reason}."})
        return []
    finally:
        os.close(root_fd)
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) or e.is_symlink())
    finally:
        os.close(fd)
    return names[:MAX_SKILLS]


def _skills_message(reader: _Reader, ws: Path) -> dict[str, Any] | None:
    lines = []
    before = len(reader.notes)
    names = _skill_names(reader, ws)
    if len(reader.notes) > before:  # the skills folder itself was refused
        return _system("[skill index]", f"(note: {reader.notes[-1]['note']})")
    for name in names:
        line = _skill_line(reader, ws, name)
        if line is not None:
            lines.append(line)
    if not lines:
        return None
    return _system("[skill index]", "\n".join(lines))


def load_frozen(workspace: Path, *, home: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """F1 system messages in a fixed order, and a note per file refused (L9); never raises."""
    ws = Path(workspace)
    user_home = Path.home() if home is None else Path(home)
    reader = _Reader()
    candidates = [
        reader.file_message("[project instructions] AGENTS.md", ws, "AGENTS.md", "AGENTS.md"),
        reader.file_message("[project instructions] .mx-claw/AGENTS.md", ws, ".mx-claw/AGENTS.md",
                            ".mx-claw/AGENTS.md"),
        _policy_message(reader, ws),
        _skills_message(reader, ws),
        reader.file_message("[memory snapshot] user", user_home, ".mx-claw/memory.md", "~/.mx-claw/memory.md"),
        reader.file_message("[memory snapshot] project", ws, ".mx-claw/memory.md", ".mx-claw/memory.md"),
    ]
    return [m for m in candidates if m is not None], reader.notes


def load_frozen_context(workspace: Path, *, home: Path | None = None) -> list[dict[str, Any]]:
    """F1 system messages in a fixed order; missing files skipped, broken or refused ones noted, never raises."""
    return load_frozen(workspace, home=home)[0]


def session_preamble(workspace: Path, *, home: Path | None = None) -> list[dict[str, Any]]:
    """The system prompt followed by the frozen context: what a new session stores first."""
    return preamble_and_notes(workspace, home=home)[0]


def preamble_and_notes(workspace: Path, *,
                       home: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """`session_preamble` and the L9 notes of the files it refused (each stored and shown as `frozen.note`)."""
    messages, notes = load_frozen(workspace, home=home)
    return [{"role": "system", "content": SYSTEM_PROMPT}, *messages], notes


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
