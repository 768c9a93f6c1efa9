"""SPEC N1: the %agent / %%agent magics in a real IPython InteractiveShell.

Real parts only: a real InteractiveShell, a temporary DuckDB file, the offline demo model or the
scripted TestServer over HTTP on 127.0.0.1 through the real openai client. Output is captured with
IPython's own capture machinery (stdout, stderr and rich display publications).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.notebook.commands import COMMANDS, HELP
from mxclaw_nb.notebook.livelog import LiveLog
from mxclaw_nb.notebook.magics import AgentMagics
from mxclaw_nb.widgets import CompactionInspector, ContextGauge, TokenTimeline
from mxclaw_nb.widgets.timeline import sent_unit

ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_DB", "MXCLAW_CONTEXT_WINDOW", "MY_KEY")
PNG_1PX = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
                           "RU5ErkJggg==")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean environment: no provider configured, MXCLAW_DB in a temp folder."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "store.duckdb"
    monkeypatch.setenv("MXCLAW_DB", str(db))
    monkeypatch.chdir(tmp_path)
    return db


@pytest.fixture
def ip(env: Path):
    """A real InteractiveShell with the extension loaded; unloaded (store closed) afterwards."""
    shell = InteractiveShell.instance()
    shell.config.pop("AgentMagics", None)  # %config merges into the (singleton) shell's config
    shell.run_line_magic("load_ext", "mxclaw_nb")
    yield shell
    shell.run_line_magic("unload_ext", "mxclaw_nb")
    shell.config.pop("AgentMagics", None)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, env: Path):
    """The scripted OpenAI-compatible server, configured through environment variables."""
    with TestServer(api_key="sk-right") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        monkeypatch.setenv("MXCLAW_MODEL", "test-model")
        yield srv


def magics(shell: InteractiveShell) -> AgentMagics:
    """The registered AgentMagics instance."""
    return shell.magics_manager.registry["AgentMagics"]


def agent(shell: InteractiveShell, line: str):
    """Run `%agent line`, capturing its output; returns (value, captured)."""
    with capture_output() as cap:
        value = shell.run_line_magic("agent", line)
    return value, cap


def user_texts(srv: TestServer) -> list[str]:
    """The last user message of each request the server received."""
    out = []
    for body in srv.requests:
        users = [m for m in body["messages"] if m["role"] == "user"]
        content = users[-1]["content"] if users else None
        out.append(content if isinstance(content, str) else next(p["text"] for p in content if p["type"] == "text"))
    return out


def test_n1_load_is_idempotent_and_unload_closes_the_store(env: Path) -> None:
    """N1: %load_ext twice keeps one instance; %unload_ext closes the store; %reload_ext starts clean."""
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mxclaw_nb")
    first = magics(shell)
    shell.run_line_magic("load_ext", "mxclaw_nb")
    from mxclaw_nb import load_ipython_extension

    load_ipython_extension(shell)  # called directly too: still one instance
    assert magics(shell) is first
    assert "agent" in shell.magics_manager.magics["line"] and "agent" in shell.magics_manager.magics["cell"]
    store = first.store()
    assert store.path == env
    shell.run_line_magic("reload_ext", "mxclaw_nb")
    assert magics(shell) is not first and first._store is None
    shell.run_line_magic("unload_ext", "mxclaw_nb")
    assert "AgentMagics" not in shell.magics_manager.registry
    assert "agent" not in shell.magics_manager.magics["line"]
    assert magics_count(shell) == 0


def magics_count(shell: InteractiveShell) -> int:
    """How many AgentMagics the shell still knows as configurables."""
    return sum(isinstance(c, AgentMagics) for c in shell.configurables)


def test_n1_percent_config_env_fallback_and_ipython_config(ip: InteractiveShell, monkeypatch) -> None:
    """N1: %config AgentMagics.x works, unset settings fall back to env vars, shell config is read at load."""
    monkeypatch.setenv("MXCLAW_CONTEXT_WINDOW", "20000")
    ip.run_line_magic("config", "AgentMagics.keep_recent_tokens = 1234")
    ip.run_line_magic("config", "AgentMagics.threshold_ratio = 0.5")
    m = magics(ip)
    assert m.keep_recent_tokens == 1234
    table, cap = agent(ip, "config")
    assert isinstance(table, pd.DataFrame) and set(table["setting"]) >= {"model", "db", "api_key_env", "live"}
    assert "python tool: runs in this kernel, outside the OS sandbox" in cap.stdout  # K1 said where it is set
    source = dict(zip(table["setting"], table["source"], strict=True))
    assert source["keep_recent_tokens"] == "config" and source["threshold_ratio"] == "config"
    assert source["context_window_tokens"] == "env $MXCLAW_CONTEXT_WINDOW" and source["approval"] == "default"
    assert "$OPENAI_API_KEY is not set" in source["api_key_env"]
    value = dict(zip(table["setting"], table["value"], strict=True))
    assert value["context_window_tokens"] == "20000" and value["model"] == ""  # the env's value; empty, not None
    assert not table["value"].map(lambda v: v is None).any()
    assert "demo model (offline)" in cap.stdout and "window 20,000" in cap.stdout and "threshold 10,000" in cap.stdout
    policy = m.get_agent().policy
    assert (policy.context_window_tokens, policy.threshold_ratio, policy.keep_recent_tokens) == (20000, 0.5, 1234)
    ip.run_line_magic("unload_ext", "mxclaw_nb")
    ip.config.pop("AgentMagics", None)
    ip.config.AgentMagics.max_iterations = 7  # what ipython_config.py sets
    ip.run_line_magic("load_ext", "mxclaw_nb")
    assert magics(ip).max_iterations == 7 and magics(ip).keep_recent_tokens == 8000


def test_n1_config_subcommand_sets_values_and_keeps_the_session(ip: InteractiveShell) -> None:
    """%agent config key=value changes settings; the agent is rebuilt on the same session."""
    m = magics(ip)
    sid = m.get_agent().session_id
    _, cap = agent(ip, "config max_iterations=3 approval=deny context_window_tokens=9000")
    assert "max_iterations = 3" in cap.stdout
    rebuilt = m.get_agent()
    assert rebuilt.session_id == sid and rebuilt.max_iterations == 3 and rebuilt.approval == "deny"
    assert rebuilt.policy.context_window_tokens == 9000
    for bad in ("nokey=1", "threshold_ratio=abc", "approval=maybe", "max_iterations"):
        with pytest.raises(UsageError):
            ip.run_line_magic("agent", f"config {bad}")
    with pytest.raises(UsageError, match=r"threshold_ratio must be a number in \(0, 1\]"):  # refused when set
        ip.run_line_magic("agent", "config threshold_ratio=1.5")
    assert m.threshold_ratio == 0.8 and m.get_agent().session_id == sid


def test_n1_cell_turn_on_demo_streams_the_live_log(ip: InteractiveShell) -> None:
    """N1: %%agent runs one turn on the demo model; the terminal log streams text, tool calls and results."""
    ip.run_line_magic("agent", "config approval=allow")
    with capture_output() as cap:
        result = ip.run_cell("%%agent\nfix the failing tests")
    assert result.success, result.error_in_exec
    out = cap.stdout
    assert out.startswith("demo model (offline) · session ")
    assert "turn 1" in out and "[ctx " in out and "est. / 12,800 threshold / 16,000 window · unchanged" in out
    assert "→ list_dir ." in out and "→ read_file inventory/stock.py  ok" in out
    # one turn model for every form (C10): the decision sits on its tool line, as in the widget log
    assert "→ bash python -m unittest -q tests.test_stock  ✓ approved by policy · failed (exit 1)" in out
    assert "✓ approved by policy" in out and "[demo model] Fixed." in out and "(done · " in out
    m = magics(ip)
    assert m.last_result.status == "ok" and m.last_result.text in out.replace("\n  ", "\n")
    stored = m.store().transcript(m.get_agent().session_id)
    assert (stored["role"] == "tool").sum() >= 5 and "Traceback" not in cap.stderr


def test_n1_live_log_in_display_mode_updates_one_display(env: Path) -> None:
    """The kernel form: one display handle updated in place; text/plain and text/html carry the whole log."""
    from mxclaw_nb.agent import Agent

    a = Agent(approval="deny")
    log = LiveLog(a.label, a.session_id, mode="display", throttle=0)
    a.subscribe(log.handle)
    with capture_output() as cap:
        a.run("fix the failing tests")
    a.close()
    outputs = cap.outputs
    assert len(outputs) > 5
    raw = cap._outputs  # the publications as sent: one display, then in-place updates of it
    assert len({o["transient"]["display_id"] for o in raw}) == 1
    assert [o["update"] for o in raw] == [False] + [True] * (len(raw) - 1)
    final = outputs[-1].data
    assert final["text/plain"].startswith("demo model (offline) · session")
    assert "→ list_dir ." in final["text/plain"] and "denied by policy" in final["text/plain"]
    assert "(done · " in final["text/plain"] and "<details" in final["text/html"]
    assert "Permission denied" in final["text/html"]  # the truncated tool result is one click away
    assert cap.stdout == ""


def test_n1_line_turn_on_the_test_server_and_prompts_that_start_with_a_command_word(
        ip: InteractiveShell, server: TestServer) -> None:
    """%agent <prompt> and %agent -- <command word ...> go to the model; the label names model and URL."""
    server.enqueue_tool_calls([("list_dir", {"path": "."})])
    server.enqueue_text("Listed it. 完成")
    server.enqueue_text("new features coming")
    server.enqueue_text("sessions answered")
    _, cap = agent(ip, "look around please")
    assert f"test-model @ {server.base_url}" in cap.stdout
    assert "→ list_dir ." in cap.stdout and "Listed it. 完成" in cap.stdout
    agent(ip, "-- new features please")
    with capture_output():
        ip.run_cell_magic("agent", "", "sessions please")
    assert user_texts(server) == ["look around please", "look around please", "new features please",
                                  "sessions please"]
    with pytest.raises(UsageError, match="write %agent -- new"):
        ip.run_line_magic("agent", "new features please")


def test_n1_options_dry_run_new_and_image(ip: InteractiveShell, server: TestServer, tmp_path: Path) -> None:
    """--dry-run calls no model; --new starts a session; --image attaches an image_url part."""
    view, cap = agent(ip, "--dry-run what would you see?")
    assert isinstance(view, CompactionInspector) and server.requests == []
    assert view.data.after[-1]["preview"] == "what would you see?" and "dry run, no model call" in cap.stdout
    sid = magics(ip).get_agent().session_id
    image = tmp_path / "pixel.png"
    image.write_bytes(PNG_1PX)
    server.enqueue_text("a single pixel")
    with capture_output() as cap:
        ip.run_cell_magic("agent", f"--new --image {image}", "describe the image")
    assert magics(ip).get_agent().session_id != sid and "a single pixel" in cap.stdout
    parts = server.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    with pytest.raises(UsageError, match="image file not found"):
        ip.run_line_magic("agent", f"--image {tmp_path / 'missing.png'} describe")
    with pytest.raises(UsageError):
        ip.run_cell_magic("agent", "--bogus", "hello")


def test_n1_every_subcommand_after_a_demo_turn(ip: InteractiveShell) -> None:
    """help, new, sessions, resume, config, view, compact, dry-run, events, sql, replay, transcript, timeline, gauge."""
    _, cap = agent(ip, "help")
    assert all(f"%agent {c.usage}" in cap.stdout for c in COMMANDS.values()) and cap.stdout.strip() == HELP
    _, cap = agent(ip, "help replay")
    assert "--window" in cap.stdout and "--tail" in cap.stdout
    _, cap = agent(ip, "view")
    assert "no model call in this session yet" in cap.stdout
    gauge, _ = agent(ip, "gauge")
    assert isinstance(gauge, ContextGauge) and gauge.data.record.stage == "unchanged"
    ip.run_line_magic("agent", "config approval=deny")
    with capture_output():
        ip.run_cell_magic("agent", "", "fix the failing tests")
    m = magics(ip)
    sid = m.get_agent().session_id
    inspector, cap = agent(ip, "view")
    assert isinstance(inspector, CompactionInspector) and "demo model (offline)" in cap.stdout
    assert "what the model saw" in cap.stdout
    before, _ = agent(ip, "view --before")
    after, _ = agent(ip, "view --after")
    assert len(before) == len(after) == len(m.last_view.messages) and set(after["action"]) == {"kept"}
    with pytest.raises(UsageError):
        ip.run_line_magic("agent", "view --before --after")
    stored_rows = len(m.store().transcript(sid))
    assert stored_rows == len(before) + 1  # the last view plus the final answer
    unchanged, cap = agent(ip, "compact")
    assert unchanged.data.record.stage == "unchanged"
    if unchanged.data.record.after_tokens <= 8_000:  # the sentence matches the figures above it
        assert "Everything fits in the safe tail (" in cap.stdout and "keep_recent_tokens=8,000" in cap.stdout
    else:
        assert "Nothing older than the safe tail to compact" in cap.stdout and "fits" not in cap.stdout
    ip.run_line_magic("agent", "config keep_recent_tokens=300")
    compacted, cap = agent(ip, "compact")
    assert compacted.data.record.stage in ("micro", "summary", "fallback") and "Nothing is stored" in cap.stdout
    policy = m.get_agent().current_policy()  # the forced run still reports the session's real limits
    rec = compacted.data.record
    assert (rec.threshold, rec.window_tokens) == (policy.threshold, policy.context_window_tokens)
    assert len(m.store().transcript(sid)) == stored_rows  # the transcript is unchanged
    dry, _ = agent(ip, "dry-run and then?")
    assert dry.data.after[-1]["preview"] == "and then?"
    events, _ = agent(ip, "events --type approval.decided")
    assert len(events) >= 1 and (events["by"] == "policy").all() and (events["decision"] == "deny").all()
    assert "payload" not in events.columns and "session_id" not in events.columns
    raw, _ = agent(ip, "events --type approval.decided --full")  # the store's frame, payload as JSON text
    assert raw["payload"].str.contains('"by": "policy"').all() and (raw["session_id"] == sid).all()
    tail, _ = agent(ip, "events --tail 2")
    assert list(tail["type"])[-1] == "turn.finished" and len(tail) == 2
    counts, _ = agent(ip, "sql SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY role")
    assert dict(zip(counts["role"], counts["n"], strict=True))["user"] == 1
    replay, cap = agent(ip, "replay --window 3000 --ratio 0.5 --tail 400")
    assert len(replay) == m.last_result.iterations and "window 3,000" in cap.stdout
    assert (replay["stage"] != "unchanged").any() and (replay["threshold"] == 1500).all()
    transcript, _ = agent(ip, "transcript")
    assert list(transcript["role"])[:1] == ["system"] and transcript["content"].str.len().max() <= 121
    full, _ = agent(ip, "transcript --full")
    assert len(full) == len(transcript) and len(full.columns) > len(transcript.columns)
    timeline, _ = agent(ip, "timeline")
    assert isinstance(timeline, TokenTimeline) and len(timeline.data) == m.last_result.iterations
    # the y axis names the counter the threshold was checked on, as stored (T3: never `est.` for calibrated)
    stored_counters = set(m.store().requests(sid)["counter"].dropna())
    assert "calibrated" in stored_counters and "calibrated" in sent_unit(timeline.data)
    gauge, _ = agent(ip, "gauge")
    assert gauge.data.record.after_tokens == m.last_view.after_tokens
    sessions, _ = agent(ip, "sessions")
    assert sessions.loc[sessions["current"], "id"].tolist() == [sid[:8]]
    _, cap = agent(ip, "new")
    assert m.get_agent().session_id != sid and "new session" in cap.stdout
    _, cap = agent(ip, f"resume {sid[:6]}")
    assert m.get_agent().session_id == sid and "resumed: 1 turn," in cap.stdout
    before_again, _ = agent(ip, "view --before")  # read back from the stored request record
    assert len(before_again) == len(before)


def test_n1_usage_errors_have_no_traceback(ip: InteractiveShell) -> None:
    """Bad options and unknown sub-commands raise UsageError; run_cell shows one line, no traceback."""
    bad = ["--bogus hi", "resume zzzz", "events --tail x", "help nosuch", "replay --ratio 2", "sql", "new now",
           "sessions --nope", "compact"]
    for line in bad:
        with pytest.raises(UsageError):
            ip.run_line_magic("agent", line)
    with pytest.raises(UsageError, match="empty"):
        ip.run_cell_magic("agent", "", "   ")
    sid = magics(ip).get_agent().session_id
    for empty in ("resume ''", 'resume "  "'):  # N1: not "the only session" by accident
        with pytest.raises(UsageError, match="give the first characters of a session id"):
            ip.run_line_magic("agent", empty)
    assert magics(ip).get_agent().session_id == sid
    with capture_output() as cap:
        result = ip.run_cell("%agent resume zzzz")
    assert isinstance(result.error_in_exec, UsageError)
    assert "UsageError" in cap.stderr and "no session id starts with 'zzzz'" in cap.stderr
    assert "Traceback" not in cap.stderr and "Traceback" not in cap.stdout


def test_n1_provider_error_is_one_paragraph_and_the_message_is_stored(ip: InteractiveShell, server: TestServer,
                                                                     monkeypatch) -> None:
    """A 401 prints one paragraph naming the URL, the key variable and where the message is stored."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with capture_output() as cap:
        result = ip.run_cell("%agent hello there")
    assert result.error_in_exec is None
    m = magics(ip)
    sid = m.get_agent().session_id
    err = cap.stderr.strip()
    assert err.startswith(f"Provider at {server.base_url} refused the key (401). Set OPENAI_API_KEY or "
                          "%config AgentMagics.api_key_env. Your message is stored (session ")
    assert sid[:8] in err and "\n" not in err and "Traceback" not in err
    stored = m.store().transcript(sid)
    assert stored["content"].iloc[-1] == "hello there"
    monkeypatch.setenv("MY_KEY", "sk-right")
    ip.run_line_magic("config", "AgentMagics.api_key_env = 'MY_KEY'")
    server.enqueue_text("now it works")
    _, cap = agent(ip, "hello again")
    assert "now it works" in cap.stdout and cap.stderr == ""
    assert m.get_agent().session_id == sid  # same session after the key change
    _, cap = agent(ip, "sql DELETE FROM messages")
    assert "read-only" in cap.stderr and "Traceback" not in cap.stderr


def test_n1_keyboard_interrupt_keeps_what_is_stored(ip: InteractiveShell, server: TestServer) -> None:
    """L4: an interrupt mid-turn prints one line; stored rows stay; the next turn repairs the view."""
    server.enqueue_tool_calls([("list_dir", {"path": "."})])
    m = magics(ip)
    a = m.get_agent()
    fired = []

    def interrupt(kind: str, payload: dict) -> None:
        if kind == "tool.started" and not fired:
            fired.append(kind)
            raise KeyboardInterrupt

    a.subscribe(interrupt)
    _, cap = agent(ip, "list things")
    assert fired and cap.stderr.strip().startswith("Interrupted. Everything done so far is stored (session ")
    assert len(cap.stderr.strip().splitlines()) == 1
    roles = m.store().transcript(a.session_id)["role"].tolist()
    assert roles[-2:] == ["user", "assistant"]
    server.enqueue_text("continuing")
    _, cap = agent(ip, "go on")
    sent = server.requests[-1]["messages"]
    assert sent[-2]["role"] == "tool" and "interrupted" in sent[-2]["content"].lower()  # C4 synthetic result
    assert "continuing" in cap.stdout


def test_n1_headless_approval_denies_and_is_stored(ip: InteractiveShell) -> None:
    """approval=ask with nobody able to answer (no tty, no frontend): the command is denied, the decision stored."""
    assert magics(ip).approval == "ask"
    with capture_output() as cap:
        ip.run_cell_magic("agent", "", "fix the failing tests")
    assert "✗ denied by nobody: python tools/gen_log.py" in cap.stdout
    events = magics(ip).store().events(magics(ip).get_agent().session_id, "approval.decided")
    assert len(events) >= 1 and events["payload"].str.contains('"by": "nobody"').all()


def test_n1_storage_error_is_one_paragraph(ip: InteractiveShell, tmp_path: Path) -> None:
    """S1/N1: a database path that cannot be used prints the store's paragraph (path + remedy), no traceback."""
    folder = tmp_path / "a-folder"
    folder.mkdir()
    ip.run_line_magic("config", f"AgentMagics.db = {str(folder)!r}")
    with capture_output() as cap:
        result = ip.run_cell("%agent sessions")
    assert result.error_in_exec is None
    err = cap.stderr.strip()
    assert err.startswith(str(folder)) and "is a folder, not a database file" in err
    assert "\n" not in err and "Traceback" not in err


def test_n1_docs_cover_every_command_and_setting() -> None:
    """The README's magics section documents every command, option and setting."""
    from mxclaw_nb.notebook.commands import _parser
    from mxclaw_nb.settings import CONFIG_KEYS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    doc = readme.split("## The `%agent` magics", 1)[1].split("\n## ", 1)[0]
    for name, command in COMMANDS.items():
        assert f"`%agent {name}" in doc, name
        for action in _parser(name, command)._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or flag in doc, (name, flag)
    for key in CONFIG_KEYS:
        assert f"| `{key}` |" in doc, key
    for option in ("--new", "--dry-run", "--image"):
        assert option in doc


def test_c10_compaction_notice_in_the_live_log(ip: InteractiveShell) -> None:
    """C10/N1: each compaction appears in the live log as it happens, with stage and before -> after tokens."""
    import json

    ip.run_line_magic("agent", "config approval=allow context_window_tokens=6000 keep_recent_tokens=1500")
    with capture_output() as cap:
        ip.run_cell_magic("agent", "", "fix the failing tests")
    m = magics(ip)
    events = m.store().events(m.get_agent().session_id, "context.compacted")
    assert len(events) >= 1
    for payload in events["payload"].map(json.loads):
        unit = "est." if payload["tokens_are"] == "estimates" else payload["tokens_are"]
        line = (f"⟳ context compacted before call {{}}: {payload['stage']} · {payload['before_tokens']:,} → "
                f"{payload['after_tokens']:,} {unit} tokens")
        assert any(line.format(i) in cap.stdout for i in range(1, 21)), line
    assert cap.stdout.count("⟳ context compacted") == len(events)
    log = LiveLog("x", "s")
    for payload in events["payload"].map(json.loads):
        log.handle("context.compacted", {**payload, "iteration": 3})
    html = log.to_html()
    assert html.count("<details>") == len(events) and "[microcompaction]" in html and "mx-chip" in html


def test_n1_live_off_prints_only_the_answer(ip: InteractiveShell, server: TestServer) -> None:
    """live=False: no log, just the final answer; a failed turn prints no stale answer."""
    ip.run_line_magic("agent", "config live=False")
    server.enqueue_text("just the answer")
    _, cap = agent(ip, "quiet please")
    assert cap.stdout == "just the answer\n"
    server.enqueue_error(400, "bad request for this test")
    _, cap = agent(ip, "fail please")
    assert cap.stdout == "" and "rejected the request (400)" in cap.stderr
    assert magics(ip).last_result is None


def test_l2_demo_answers_an_unscripted_prompt_plainly_and_still_runs_scripts(ip: InteractiveShell) -> None:
    """L2: `%agent What is 2+2?` on the demo runs no tool and lists the scripted tasks; a task still runs."""
    from mxclaw_nb.demo.plans import TASKS

    ip.run_line_magic("agent", "config approval=allow")
    with capture_output() as cap:
        ip.run_cell("%agent What is 2+2?")
    m = magics(ip)
    assert "→ " not in cap.stdout and "offline demo model" in cap.stdout and "(done · 1 model call)" in cap.stdout
    assert all(example in cap.stdout for _, _, example in TASKS)
    assert m.last_result.status == "ok" and m.last_result.iterations == 1
    with capture_output() as cap:
        ip.run_cell_magic("agent", "", TASKS[0][2])
    assert "→ list_dir ." in cap.stdout and "[demo model] Fixed." in cap.stdout


def _final_texts(cap) -> list[str]:
    """stdout, stderr and the text/plain of each display's final publication (updates replace earlier ones)."""
    finals: dict[str, str] = {}
    for i, raw in enumerate(cap._outputs):
        key = (raw.get("transient") or {}).get("display_id") or f"plain-{i}"
        finals[key] = raw["data"].get("text/plain", "")
    return [cap.stdout, cap.stderr, *finals.values()]


def test_l7_provider_error_is_shown_once_and_names_the_setting_used(ip: InteractiveShell, monkeypatch) -> None:
    """L7/N1: in a kernel the error appears once (in the turn view, not again on stderr) and its remedy names
    `%config AgentMagics.base_url` / `.model` when those were set, the environment variables when they were."""
    monkeypatch.setattr(ip, "kernel", object(), raising=False)  # the live view path of a Jupyter kernel
    for widgets in (True, False):  # the LiveTurnView widget, or the HTML log with the paragraph below it
        ip.run_line_magic("config", f"AgentMagics.widgets = {widgets}")
        with TestServer() as srv:
            srv.enqueue_error(404, "model 'nope' not found")
            ip.run_line_magic("config", f"AgentMagics.base_url = {srv.base_url!r}")
            ip.run_line_magic("config", "AgentMagics.model = 'nope'")
            with capture_output() as cap:
                result = ip.run_cell("%agent hello")
        assert result.error_in_exec is None
        texts = _final_texts(cap)
        shown = [t for t in texts if "does not know model 'nope'" in t]
        assert len(shown) == 1 and sum(t.count("does not know model") for t in texts) == 1, texts
        err = shown[0]
        assert "Check %config AgentMagics.model (the server's models: GET " in err
        assert "and %config AgentMagics.base_url." in err
        assert "OPENAI_BASE_URL" not in err and "MXCLAW_MODEL" not in err and "Your message is stored (session " in err
        assert (cap.stderr == "") is widgets  # without the widget the paragraph is the cell's stderr


def test_l7_connection_error_names_the_environment_variable_when_that_was_used(ip: InteractiveShell,
                                                                                 monkeypatch) -> None:
    """The same remedy names OPENAI_BASE_URL when the URL came from the environment (terminal: once, on stderr)."""
    with TestServer() as srv:
        url = srv.base_url  # closed below: nothing listens there any more
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("MXCLAW_MODEL", "m")
    ip.run_line_magic("agent", "config call_deadline=20")
    with capture_output() as cap:
        ip.run_cell("%agent hello")
    err = cap.stderr.strip()
    assert err.startswith(f"Could not connect to the provider at {url}") and "\n" not in err
    assert "Check that the server is running and OPENAI_BASE_URL is right." in err and "%config" not in err
    assert "Could not connect" not in cap.stdout and "(failed (see below))" in cap.stdout


def test_n1_quickstart_run_twice_in_one_kernel_starts_its_own_session(ip: InteractiveShell, monkeypatch,
                                                                      tmp_path: Path) -> None:
    """N1: notebook 01's cells run again in the same shell start a new session in a fresh sample copy (`--new`),
    in the store the notebook names now ($MXCLAW_DB changed), so the first turn fixes the tests again."""
    prompt = "The unit tests of the inventory package fail. Find out why and fix them."
    m = magics(ip)
    seen = []
    for run, db in enumerate((tmp_path / "run1.duckdb", tmp_path / "run2.duckdb", None)):
        if db is not None:
            monkeypatch.setenv("MXCLAW_DB", str(db))  # the quickstart's first cell: a fresh store per run
        ip.run_line_magic("load_ext", "mxclaw_nb")  # a no-op after the first run
        ip.run_line_magic("config", 'AgentMagics.model = "mxclaw-demo"')
        ip.run_line_magic("config", 'AgentMagics.approval = "allow"')
        with capture_output() as cap:
            ip.run_cell_magic("agent", "--new", prompt)
        agent_now = m.get_agent()
        assert "[demo model] Fixed." in cap.stdout and "nothing to fix" not in cap.stdout, run
        assert m.store().path == (db or tmp_path / "run2.duckdb") and " · turn 1" in cap.stdout
        seen.append((agent_now.session_id, agent_now.workspace))
    assert len({sid for sid, _ in seen}) == 3 and len({ws for _, ws in seen}) == 3
    _, cap = agent(ip, "new")
    assert "a fresh sample copy" in cap.stdout and m.get_agent().workspace not in {ws for _, ws in seen}


def _noise_free(df: pd.DataFrame) -> bool:
    """No NaN/<NA>/None cell and no 32-character session id anywhere in a displayed frame."""
    text = df.astype(str)
    return (not df.isna().any().any() and not text.isin(["<NA>", "nan", "NaN", "None", "NaT"]).any().any()
            and not text.apply(lambda col: col.str.fullmatch(r"[0-9a-f]{32}")).any().any())


def test_n1_command_frames_are_tidy_and_replay_shows_progress(ip: InteractiveShell, monkeypatch) -> None:
    """N1/S4: sessions, events, transcript, replay and view frames: short ids, payloads as columns, no NaN
    noise, a focused replay (the rest with --all-columns); a replay past PROGRESS_DELAY shows a tqdm bar."""
    import importlib

    replay_module = importlib.import_module("mxclaw_nb.analysis.replay")  # the module, not the function
    # 7,400 (threshold 5,920): the demo's call 4 is ~6,200 before and ~5,700 after microcompaction (both with the
    # ~920 tokens of tool definitions, T1-T3), both well clear of it (at 6,000 without the tool definitions the
    # "after" sat 10-30 tokens under the threshold: the temp path in a traceback could tip it to summary)
    ip.run_line_magic("agent", "config approval=allow context_window_tokens=7400 keep_recent_tokens=1500")
    with capture_output():
        ip.run_cell_magic("agent", "", "fix the failing tests")
    sid = magics(ip).get_agent().session_id
    sessions, cap = agent(ip, "sessions")
    assert list(sessions.columns[:2]) == ["current", "id"] and sessions["id"].tolist() == [sid[:8]]
    assert _noise_free(sessions) and "--full" in cap.stdout
    events, _ = agent(ip, "events")
    assert list(events.columns[:4]) == ["seq", "turn", "call", "type"] and _noise_free(events)
    assert {"tool", "status", "stage", "tokens_before", "tokens_after", "unit", "decision", "by", "detail"} <= set(
        events.columns) and "payload" not in events.columns
    # the frame of a micro compaction (which call compacts first shifts with the tool definitions, T1-T3)
    micro = events[(events["type"] == "context.compacted") & (events["stage"] == "micro")]
    assert len(micro), events.loc[events["type"] == "context.compacted",
                                  ["call", "stage", "tokens_before", "tokens_after"]]
    compacted = micro.iloc[0]
    assert compacted["tokens_before"] > compacted["tokens_after"] > 0
    assert compacted["unit"] in ("est.", "calibrated") and compacted["detail"].startswith("[microcompaction]")
    finished = events[events["type"] == "tool.finished"]
    assert finished["tool"].iloc[0] == "list_dir" and set(finished["status"]) == {"ok", "failed (exit 1)"}
    approval = events[events["type"] == "approval.decided"].iloc[0]
    assert (approval["decision"], approval["by"], approval["tool"]) == ("allow", "policy", "bash")
    assert events.loc[events["type"] == "turn.started", "detail"].tolist() == ["fix the failing tests"]
    assert events.loc[events["type"] == "turn.started", "stage"].tolist() == [""]  # empty, not NaN
    everywhere, _ = agent(ip, "events --all --tail 3")
    assert everywhere["session"].tolist() == [sid[:8]] * 3
    transcript, _ = agent(ip, "transcript")
    assert list(transcript.columns) == ["seq", "turn", "call", "role", "tool", "content", "chars", "outcome"]
    assert _noise_free(transcript)
    tools = transcript[transcript["role"] == "tool"]
    assert tools["tool"].iloc[0] == "list_dir" and set(tools["outcome"]) == {"ok", "failed"}
    assert transcript.loc[transcript["role"] == "assistant", "tool"].iloc[0] == "→ list_dir"
    assert set(transcript.loc[transcript["role"] != "tool", "outcome"]) == {""}
    monkeypatch.setattr(replay_module, "PROGRESS_DELAY", 0)  # every replay counts as long here
    replayed, cap = agent(ip, "replay --window 3000 --tail 400")
    assert len(replayed.columns) <= 16 and "session_id" not in replayed.columns and _noise_free(replayed)
    assert list(replayed.columns[:3]) == ["call", "turn", "stage"] and "--all-columns" in cap.stdout
    assert "session_id" in replayed.attrs["hidden_columns"] and "survival_path" in replayed.attrs["hidden_columns"]
    assert f"replay {sid[:8]}" in cap.stderr and "call" in cap.stderr  # the tqdm bar (text form outside a kernel)
    everything, _ = agent(ip, "replay --window 3000 --tail 400 --all-columns")
    assert len(everything.columns) > 25 and (everything["session_id"] == sid).all()
    assert everything["stage"].tolist() == replayed["stage"].tolist()
    assert everything["after_tokens"].tolist() == replayed["after_tokens"].tolist()
    # C12: the same replay under another strategy by name and numbers; an unknown one is a UsageError naming them
    masked, cap = agent(ip, "replay --window 3000 --tail 400 --strategy masking:keep_last=1")
    assert "strategy masking(keep_last=1)" in cap.stdout and masked["placeholder"].iloc[-1] >= \
        replayed["placeholder"].iloc[-1]
    with pytest.raises(UsageError, match="unknown strategy 'mask'; known strategies: article, masking, clearing"):
        agent(ip, "replay --strategy mask")
    # E4: a cache-aware variant by name; its per-call decision is a column of the focused frame
    aware, cap = agent(ip, "replay --window 3000 --tail 400 --strategy masking-cache:keep_last=1,clear_at_least=500")
    assert "strategy masking-cache(keep_last=1, clear_at_least=500)" in cap.stdout
    assert "cache_decision" not in masked.columns and set(aware["cache_decision"].iloc[1:]) <= {
        "plain", "deferred", "compacted"} and len(aware) == len(masked)
    for flag in ("--before", "--after"):
        frame, _ = agent(ip, f"view {flag}")
        assert _noise_free(frame) and len(frame) > 5, flag


def test_c3_compact_says_why_nothing_changed_over_the_tail_budget():
    """`%agent compact` at 8,115 tokens with an 8,000 tail used to say everything "fits in the safe tail"."""
    from types import SimpleNamespace

    from mxclaw_nb.notebook.shown import nothing_to_compact

    over = nothing_to_compact(SimpleNamespace(counter="calibrated", after_tokens=8_115), 8_000)
    assert "fits" not in over and "8,115 calibrated tokens" in over and "keep_recent_tokens=8,000" in over
    assert "last message" in over and "(SPEC C3)" in over
    under = nothing_to_compact(SimpleNamespace(counter="estimate", after_tokens=2_000), 8_000)
    assert under.startswith("Everything fits in the safe tail (2,000 ≤ keep_recent_tokens=8,000 est. tokens)")


def test_n1_events_frame_says_interrupted_in_words_and_sessions_have_a_title(tmp_path):
    """`turn.interrupted` read as words, not raw JSON; other payloads as key=value; a session's title is its
    first prompt (the `title` column of `%agent sessions` was empty)."""
    import pandas as pd

    from mxclaw_nb import Agent
    from mxclaw_nb.notebook.frames import events_frame, sessions_frame

    df = pd.DataFrame({"seq": [0, 1], "turn": [1, 1], "iteration": [2, 2],
                       "type": ["turn.interrupted", "memory.note"],
                       "payload": ['{"iterations": 2}', '{"path": "a.md", "lines": [1, 2]}'],
                       "created_at": pd.to_datetime(["2026-01-01", "2026-01-01"])})
    out = events_frame(df)
    assert out["detail"].tolist() == ["interrupted after 2 model calls", 'path=a.md · lines=[1, 2]']
    assert out["status"].iloc[0] == "interrupted" and "{" not in out["detail"].iloc[0]
    agent = Agent(db=str(tmp_path / "t.duckdb"), approval="allow", home=tmp_path / "home")
    agent.run("Look at the build log and tell me what the slowest step was.")
    shown = sessions_frame(agent.store.sessions(), agent.session_id)
    assert shown["title"].tolist() == ["Look at the build log and tell me what the slowest step was."]


def test_s4_replay_saves_nothing_where_nothing_was_compacted(ip: InteractiveShell) -> None:
    """S4, T1-T3: `full_tokens` (what an uncompacted request would cost) counts the tool definitions as
    `before_tokens`/`after_tokens` do, so a call sent unchanged saved 0 tokens (before: every row of the demo's
    first `%agent replay` said `saved_tokens -1331`, the tool definitions' layer)."""
    ip.run_line_magic("agent", "config approval=allow")
    with capture_output():
        ip.run_cell_magic("agent", "", "fix the failing tests")
    replayed, _ = agent(ip, "replay")
    unchanged = replayed[replayed["stage"] == "unchanged"]
    assert len(unchanged) and (unchanged["saved_tokens"] == 0).all(), unchanged
    assert (unchanged["full_tokens"] == unchanged["before_tokens"]).all()
    tight, _ = agent(ip, "replay --window 3000 --tail 400")
    compacted = tight[tight["stage"] != "unchanged"]
    assert len(compacted) and (compacted["saved_tokens"] == compacted["full_tokens"] - compacted["after_tokens"]).all()
    assert (compacted["saved_tokens"] > 0).all()


def test_n1_session_ids_shown_are_long_enough_to_resume(ip: InteractiveShell) -> None:
    """N1: `%agent sessions` shows each id by its first 8 characters, or as many more as it takes to tell it from
    every other session, so each shown id resumes its session. Imported ids start with `imp-`: 4 of the 8 shown
    characters, so two imports collide there (~26% for 200 sessions); before, both showed as `imp-1a2b` and that
    shown id gave "matches 2 sessions"."""
    store = magics(ip).store()
    for sid in ("imp-1a2b3c4d000000000000000", "imp-1a2b9f9f000000000000000", "imp-77776666000000000000000"):
        store.create_session(source="import:x.jsonl", title=sid, session_id=sid)
    shown, _ = agent(ip, "sessions")
    by_title = dict(zip(shown["title"], shown["id"], strict=True))
    assert by_title["imp-1a2b3c4d000000000000000"] == "imp-1a2b3"
    assert by_title["imp-1a2b9f9f000000000000000"] == "imp-1a2b9"
    assert by_title["imp-77776666000000000000000"] == "imp-7777"
    _, cap = agent(ip, f"resume {by_title['imp-1a2b9f9f000000000000000']}")
    assert magics(ip).get_agent().session_id == "imp-1a2b9f9f000000000000000" and "resumed" in cap.stdout
