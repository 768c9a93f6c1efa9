"""The shipped real transcripts (mxclaw_nb.datasets): well-formed, unrepaired, licensed, and in the wheel.

Why: notebooks 03 and 04 run on these files on a fresh clone, so they must load with the importer's own
reader, keep the quirks the engine repairs only in the view (SPEC C4), import as the same sessions as the
full shared files (S1), and actually reach users: a wheel that forgets its package data, or data that
ships without its MIT licence texts, fails here.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mxclaw_nb import datasets
from mxclaw_nb.analysis import conversations, import_openai_jsonl
from mxclaw_nb.analysis.importers import ROLES, message_problem
from mxclaw_nb.context import repair_tool_call_transcript
from mxclaw_nb.store.writer import Store
from tests.conftest import REPO, SHARED_TRANSCRIPTS

NAMES = ["swe-agent", "tau-bench"]
SHIPPED = ["README.md", *(f"{n}.jsonl.gz" for n in NAMES), *(f"LICENSE.{n}.txt" for n in NAMES)]


def tool_call_ids(messages: list[dict]) -> list[str]:
    return [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]


def test_available_names_the_shipped_datasets() -> None:
    assert datasets.available() == NAMES
    with pytest.raises(ValueError, match="available: swe-agent, tau-bench"):
        datasets.load("nope")


@pytest.mark.parametrize("name", NAMES)
def test_load_returns_well_formed_openai_conversations(name: str) -> None:
    """Every message is one the store accepts; calls and results have the OpenAI chat shape."""
    convs = datasets.load(name)
    assert len(convs) == datasets.DATASETS[name].conversations
    assert len({c.id for c in convs}) == len(convs) and all(c.source == name for c in convs)
    for conv in convs:
        assert conv.messages and conv.messages[0]["role"] in ("system", "user")
        for k, m in enumerate(conv.messages):
            assert message_problem(m, k) is None and m["role"] in ROLES
            for call in m.get("tool_calls") or []:
                assert call["type"] == "function" and isinstance(call["id"], str) and call["id"]
                assert isinstance(call["function"]["name"], str)
                json.loads(call["function"]["arguments"])
            if m["role"] == "tool":
                assert isinstance(m["tool_call_id"], str)


def test_the_real_world_quirks_are_kept_and_repaired_only_in_the_view() -> None:
    """17 dangling swe-agent submits, reused tool-call ids and CRLF survive shipping; repair pairs them (C4)."""
    swe, tau = datasets.load("swe-agent"), datasets.load("tau-bench")
    dangling = [c for c in swe if set(tool_call_ids(c.messages)) - {m.get("tool_call_id") for m in c.messages}]
    assert len(dangling) == 17
    reused = [c for c in swe + tau if len(set(ids := tool_call_ids(c.messages))) < len(ids)]
    assert len(reused) == 3 + 19
    assert any("\r\n" in (m.get("content") or "") for c in swe for m in c.messages
               if isinstance(m.get("content"), str))
    assert max(len(m.get("content") or "") for c in swe for m in c.messages if m["role"] == "tool") > 20_000
    for conv in dangling + reused:
        view = repair_tool_call_transcript(conv.messages)
        for k, m in enumerate(view):
            if m["role"] == "assistant" and m.get("tool_calls"):
                ids = [c["id"] for c in m["tool_calls"]]
                assert [r.get("tool_call_id") for r in view[k + 1:k + 1 + len(ids)]] == ids


@pytest.mark.parametrize("name", NAMES)
def test_licence_texts_and_readme_ship_beside_the_data(name: str) -> None:
    text = datasets.licence_text(name)
    assert text.startswith("MIT License") and "Copyright (c) 2024" in text
    assert "Permission is hereby granted" in text
    readme = (datasets.path(name).parent / "README.md").read_text(encoding="utf-8")
    assert f"{name}.jsonl.gz" in readme and f"LICENSE.{name}.txt" in readme and "MIT" in readme
    holder = text.split("Copyright (c) 2024 ", 1)[1].splitlines()[0]
    assert holder in datasets.DATASETS[name].licence


def test_info_reports_counts_sizes_and_licences() -> None:
    rows = {r["name"]: r for r in datasets.info()}
    assert rows["tau-bench"]["conversations"] == 50 and rows["tau-bench"]["of"] == 200
    assert all(r["licence"].startswith("MIT") for r in rows.values())
    assert sum(r["bytes"] for r in rows.values()) < 1_000_000  # a modest package: well under 1 MB


def test_a_gzipped_file_imports_as_the_same_sessions_as_the_plain_one(tmp_path: Path) -> None:
    """``x.jsonl.gz`` and ``x.jsonl`` are one source: importing the other copy adds nothing (S1)."""
    store = Store(tmp_path / "s.duckdb")
    try:
        first = import_openai_jsonl(store, datasets.path("swe-agent"), progress=False)
        assert first.ok and len(first.sessions) == 23 and first.messages == 498
        plain = tmp_path / "swe-agent.jsonl"
        plain.write_bytes(gzip.decompress(datasets.path("swe-agent").read_bytes()))
        again = import_openai_jsonl(store, plain, progress=False)
        assert not again.sessions and len(again.skipped) == 23
        assert set(store.sessions()["source"]) == {"import:swe-agent.jsonl"}
        assert store.load_transcript(first.sessions[0]) == datasets.load("swe-agent")[0].messages
    finally:
        store.close()


def test_a_folder_of_gzipped_files_is_a_source_for_compare() -> None:
    pairs = conversations(datasets.path("swe-agent").parent)
    assert len(pairs) == 23 + 50


def test_full_loads_the_shared_file_or_says_where_it_looked(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setenv(datasets.ENV_FOLDER, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="MXCLAW_TRANSCRIPTS"):
        datasets.load("tau-bench", full=True)
    line = {"id": "t1", "source": "tau-bench", "messages": [{"role": "user", "content": "hi"}]}
    (tmp_path / "tau-bench.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert datasets.shared_folder() == tmp_path
    assert [c.id for c in datasets.load("tau-bench", full=True)] == ["t1"]
    assert len(datasets.load("tau-bench")) == 50  # the default stays the shipped subset


@pytest.mark.parametrize("name", NAMES)
def test_shipped_lines_are_byte_identical_to_the_shared_set(name: str) -> None:
    """Nothing re-serialised or repaired: every shipped line is a line of the shared file."""
    source = datasets.full_path(name)  # $MXCLAW_TRANSCRIPTS or ../shared/transcripts
    if source is None:
        pytest.skip(f"the full shared set is not present ({SHARED_TRANSCRIPTS}; set MXCLAW_TRANSCRIPTS)")
    full = set(source.read_bytes().split(b"\n"))
    shipped = [ln for ln in gzip.decompress(datasets.path(name).read_bytes()).split(b"\n") if ln]
    assert len(shipped) == datasets.DATASETS[name].conversations and set(shipped) <= full


def test_the_wheel_carries_the_data_readme_and_licences(tmp_path: Path) -> None:
    """``pip wheel`` of the project includes every shipped file (pyproject package-data)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode and "satisfies the requirement setuptools" in proc.stderr:
        pytest.skip("no package index for the build backend (setuptools) here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("mxclaw_nb-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for file in SHIPPED:
            assert f"mxclaw_nb/datasets/{file}" in names
        assert zf.read("mxclaw_nb/datasets/tau-bench.jsonl.gz") == datasets.path("tau-bench").read_bytes()
        assert "mxclaw_nb/demo/workspace/data/sales.csv" in names  # K1: the demo data task's sample data
