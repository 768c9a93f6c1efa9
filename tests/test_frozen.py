"""SPEC F1: frozen context read from real files in a temporary workspace and home."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mxclaw_nb.frozen import (
    MAX_FILE_CHARS,
    SYSTEM_PROMPT,
    frozen_layer,
    load_frozen_context,
    session_preamble,
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def full(tmp_path: Path) -> tuple[Path, Path]:
    ws, home = tmp_path / "ws", tmp_path / "home"
    _write(ws / "AGENTS.md", "# 规则\nRun the tests.\n")
    _write(ws / ".mx-claw" / "AGENTS.md", "Prefer small diffs.\n")
    _write(ws / ".mx-claw" / "project.json", json.dumps({"name": "p", "verification": {"command": "pytest -q"}}))
    _write(ws / ".mx-claw" / "skills" / "zeta" / "SKILL.md", "---\nname: zeta-skill\ndescription: Last one.\n---\nbody")
    _write(ws / ".mx-claw" / "skills" / "alpha" / "SKILL.md", "# Alpha heading\nmore text\n")
    _write(ws / ".mx-claw" / "memory.md", "项目记忆：价格保留两位小数\n")
    _write(home / ".mx-claw" / "memory.md", "User prefers terse answers.\n")
    return ws, home


def test_f1_all_layers_in_order_with_exact_first_lines(full: tuple[Path, Path]) -> None:
    ws, home = full
    msgs = load_frozen_context(ws, home=home)
    assert all(m["role"] == "system" for m in msgs)
    assert [m["content"] for m in msgs] == [
        "[project instructions] AGENTS.md\n# 规则\nRun the tests.",
        "[project instructions] .mx-claw/AGENTS.md\nPrefer small diffs.",
        '[verification policy] .mx-claw/project.json\n{\n  "command": "pytest -q"\n}',
        "[skill index]\n- alpha: Alpha heading\n- zeta-skill: Last one.",
        "[memory snapshot] user\nUser prefers terse answers.",
        "[memory snapshot] project\n项目记忆：价格保留两位小数",
    ]
    assert [frozen_layer(m) for m in msgs] == [
        "project instructions",
        "project instructions",
        "verification policy",
        "skill index",
        "memory snapshot",
        "memory snapshot",
    ]


def test_f1_is_deterministic_and_reads_files_again_for_a_new_session(full: tuple[Path, Path]) -> None:
    ws, home = full
    first = load_frozen_context(ws, home=home)
    assert load_frozen_context(ws, home=home) == first
    _write(ws / "AGENTS.md", "changed later\n")
    # The stored messages of the old session are values; only a new load sees the change.
    assert first[0]["content"].endswith("Run the tests.")
    assert load_frozen_context(ws, home=home)[0]["content"] == "[project instructions] AGENTS.md\nchanged later"


def test_f1_missing_and_empty_files_are_skipped(tmp_path: Path) -> None:
    assert load_frozen_context(tmp_path, home=tmp_path / "nohome") == []
    _write(tmp_path / "AGENTS.md", "\n  \n")
    (tmp_path / ".mx-claw" / "skills" / "no-skill-file").mkdir(parents=True)
    assert load_frozen_context(tmp_path, home=tmp_path / "nohome") == []


def test_f1_invalid_json_gives_a_visible_note(tmp_path: Path) -> None:
    _write(tmp_path / ".mx-claw" / "project.json", '{"verification": ')
    [msg] = load_frozen_context(tmp_path, home=tmp_path)
    first, body = msg["content"].split("\n", 1)
    assert first == "[verification policy] .mx-claw/project.json"
    assert body.startswith("(note: project.json is not valid JSON: Expecting value")
    assert body.endswith("no verification policy was loaded)")


def test_f1_unreadable_file_gives_a_note_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").mkdir()  # a folder where a file is expected cannot be read
    [msg] = load_frozen_context(tmp_path, home=tmp_path)
    assert msg["content"].startswith(
        "[project instructions] AGENTS.md\n(note: AGENTS.md was not read: it is a directory, not a regular file.)"
    )


def test_f1_policy_without_verification_key_shows_the_whole_file(tmp_path: Path) -> None:
    _write(tmp_path / ".mx-claw" / "project.json", '{"test": "make check", "说明": "全部"}')
    [msg] = load_frozen_context(tmp_path, home=tmp_path)
    assert (
        msg["content"] == '[verification policy] .mx-claw/project.json\n{\n  "test": "make check",\n  "说明": "全部"\n}'
    )


def test_f1_skill_front_matter_variants(tmp_path: Path) -> None:
    skills = tmp_path / ".mx-claw" / "skills"
    _write(skills / "a" / "SKILL.md", "---\nname: 'quoted'\ndescription: >\n  folded over\n  two lines\n---\n# H\n")
    _write(skills / "b" / "SKILL.md", "---\ndescription: no name given\n---\n")
    _write(skills / "c" / "SKILL.md", "\n\nplain first line\nsecond\n")
    _write(skills / "d" / "SKILL.md", "---\nname: long\ndescription: " + "x" * 1000 + "\n---\n")
    [msg] = load_frozen_context(tmp_path, home=tmp_path)
    lines = msg["content"].splitlines()
    assert lines[:4] == [
        "[skill index]",
        "- quoted: folded over two lines",
        "- b: no name given",
        "- c: plain first line",
    ]
    assert lines[4].startswith("- long: xxx") and len(lines[4]) == len("- long: ") + 300


def test_f1_large_files_are_capped_with_a_note(tmp_path: Path) -> None:
    _write(tmp_path / "AGENTS.md", "规" * (MAX_FILE_CHARS + 500))
    [msg] = load_frozen_context(tmp_path, home=tmp_path)
    body = msg["content"].split("\n", 1)[1]
    assert body.startswith("规" * MAX_FILE_CHARS + "\n[... truncated: the file has 20500 characters")


def test_f1_home_defaults_to_the_user_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _write(tmp_path / "fakehome" / ".mx-claw" / "memory.md", "from home")
    monkeypatch.setenv("HOME", str(tmp_path / "fakehome"))
    assert load_frozen_context(tmp_path / "ws") == [{"role": "system", "content": "[memory snapshot] user\nfrom home"}]


def test_f1_system_prompt_and_preamble(full: tuple[Path, Path]) -> None:
    ws, home = full
    assert SYSTEM_PROMPT.split("\n", 1)[0] == "[system prompt] mxclaw_nb coding agent"
    for name in ("read_file", "list_dir", "grep", "write_file", "edit_file", "bash", "read_artifact", "workspace"):
        assert name in SYSTEM_PROMPT
    pre = session_preamble(ws, home=home)
    assert pre[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert pre[1:] == load_frozen_context(ws, home=home)
    assert frozen_layer(pre[0]) == "system prompt"


@pytest.mark.parametrize(
    ("message", "layer"),
    [
        ({"role": "system", "content": "[skill index]\n- a: b"}, "skill index"),
        ({"role": "system", "content": [{"type": "text", "text": "[memory snapshot] user\nx"}]}, "memory snapshot"),
        ({"role": "system", "content": "[compressed conversation context]\nOlder..."}, None),
        ({"role": "user", "content": "[project instructions] AGENTS.md"}, None),
        ({"role": "system", "content": None}, None),
        ({"role": "system", "content": "text [system prompt] later"}, None),
    ],
)
def test_f1_frozen_layer_classifies_by_first_line(message: dict, layer: str | None) -> None:
    assert frozen_layer(message) == layer


def test_f1_demo_workspace_loads_every_layer(tmp_path: Path) -> None:
    demo = Path(__file__).resolve().parents[1] / "mxclaw_nb" / "demo" / "workspace"
    assert demo.is_dir(), "the demo workspace ships inside the package"
    layers = [frozen_layer(m) for m in load_frozen_context(demo, home=tmp_path)]
    assert {"project instructions", "verification policy", "skill index", "memory snapshot"} <= set(layers)
