"""SPEC L7 (text that is not valid Unicode is stored with a reversible escape), with L4, S2 and C4.

Two halves. Properties of `mxclaw_nb.text_policy` (Hypothesis, over strings that include lone surrogates
and the backslash sequences the escape itself uses): `escape` is total, its result always encodes as
UTF-8, and `unescape` reverses it; the store codec and the sent form (`sanitize`) built on it are
lossless and always encodable. Then real turns — `mxclaw_nb.Agent`, the shipped test server over HTTP
with the real `openai` client, a DuckDB file in tmp_path — through the cases that used to abort a turn:
non-UTF-8 file names and contents (made with `os.open` on bytes paths), lone surrogates in the prompt,
in tool arguments and in model text, NUL bytes, and a 10 MB tool output. Each turn must end "ok"
with `turn.finished`, every message must be in the database (read back with a separate DuckDB
connection), the stored transcript must equal what was appended, and a later view must need no repair.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb import Agent
from mxclaw_nb.context import estimate_tokens
from mxclaw_nb.context.repair import plan_counted
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.messages import sanitize
from mxclaw_nb.store.codec import message_to_row, row_to_message
from mxclaw_nb.text_policy import (
    ESCAPED_KEY,
    display,
    escape,
    escape_value,
    is_valid,
    json_text,
    unescape,
    unescape_value,
)
from mxclaw_nb.tokenizers import exact_counter

# -- properties -------------------------------------------------------------------------------------------

# Biased towards what the escape must get right: surrogates (incl. the surrogateescape range), backslashes,
# and the letters and digits of its own sequences (\x5c, \xff, \ud800), next to arbitrary characters.
tricky_char = st.one_of(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF),
    st.sampled_from(list("\\\\\\xud5c89abcdefF0\x00")),
    st.characters(),
)
any_text = st.one_of(st.text(tricky_char, max_size=40), st.text(max_size=40),
                     st.builds(lambda a, b: a + "\\" + b, st.text(tricky_char, max_size=5),
                               st.sampled_from(["x5c", "xff", "x80", "x7f", "ud800", "udfff", "uD800", "xFF", "\\"])))
json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), any_text),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(any_text, inner, max_size=3)), max_leaves=8)


@settings(max_examples=1_500, deadline=None)
@given(any_text)
def test_escape_is_total_encodable_and_reversible(text: str) -> None:
    """L7: escape never raises, always gives UTF-8-encodable text, and unescape gives the original back."""
    escaped = escape(text)
    escaped.encode("utf-8")  # never raises
    assert is_valid(escaped)
    assert unescape(escaped) == text
    assert escape(escaped) == escaped or "\\" in escaped  # escaped text is valid: only lookalikes change again
    shown = display(text)
    shown.encode("utf-8")
    assert display(shown) == shown  # idempotent: text displayed again is never escaped twice
    assert shown == text or not is_valid(text)  # valid text is shown unchanged


# The lookalikes as the module docstring states them (restated here, not imported).
LOOKALIKE = re.compile(r"\\(x5c|x[89a-f][0-9a-f]|ud[89a-f][0-9a-f]{2})")


@settings(max_examples=1_000, deadline=None)
@given(any_text)
def test_valid_text_without_lookalikes_is_never_changed(text: str) -> None:
    """The fast path: valid text whose backslashes start no escape is stored and shown byte for byte."""
    if is_valid(text) and not LOOKALIKE.search(text):
        assert escape(text) == text
    if is_valid(text):
        assert display(text) == text


def reference_escape(text: str, backslashes: bool = True) -> str:
    """The escaped form character by character, straight from the module docstring (the oracle);
    `backslashes=False`: the display form (lone surrogates only)."""
    out = []
    for i, c in enumerate(text):
        code = ord(c)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif backslashes and c == "\\" and LOOKALIKE.match(text, i):
            out.append("\\x5c")
        else:
            out.append(c)
    return "".join(out)


@settings(max_examples=2_000, deadline=None)
@given(any_text)
def test_the_fast_escape_is_the_documented_one(text: str) -> None:
    """The C-speed paths (codec error handler, byte runs, literal-prefix regexes) give the oracle's text."""
    assert escape(text) == reference_escape(text)
    assert display(text) == reference_escape(text, backslashes=False)


def test_escape_forms_are_the_documented_ones() -> None:
    """surrogateescape bytes as \\xHH, other lone surrogates as \\uHHHH, lookalike backslashes as \\x5c."""
    assert escape("\udcff.txt") == "\\xff.txt"
    assert escape("caf\udce9") == "caf\\xe9"
    assert escape("\ud800 and \udc7f") == "\\ud800 and \\udc7f"
    assert escape("b'\\xff' \udcff") == "b'\\x5cxff' \\xff"
    assert display("b'\\xff' \udcff") == "b'\\xff' \\xff"  # the display form leaves backslashes alone
    assert escape("plain \\n \\\\ C:\\temp") == "plain \\n \\\\ C:\\temp"  # valid, no lookalike: unchanged
    assert escape("nul \x00 byte") == "nul \x00 byte"
    assert json.loads(json_text('{"path": "\udcff.txt"}')) == {"path": "\udcff.txt"}
    assert json_text('{"path": "\udcff.txt"}') == '{"path": "\\udcff.txt"}'


@settings(max_examples=500, deadline=None)
@given(json_value)
def test_escape_value_round_trips_nested_json(value: object) -> None:
    escaped = escape_value(value)
    json.dumps(escaped, ensure_ascii=False).encode("utf-8")
    assert unescape_value(escaped) == (json.loads(json.dumps(value)) if isinstance(value, tuple) else value)


COLUMN_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error", "reasoning", "attachments")
message = st.one_of(
    st.builds(lambda c, r: {"role": r, "content": c}, st.one_of(any_text, st.none()),
              st.sampled_from(["user", "system", "assistant"])),
    st.builds(lambda c: {"role": "user", "content": [{"type": "text", "text": c}]}, any_text),
    st.builds(lambda i, n, a, r: {"role": "assistant", "content": None, "reasoning": r, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}]},
              any_text.filter(bool), any_text, any_text, any_text),
    st.builds(lambda i, c, e: {"role": "tool", "tool_call_id": i, "content": c, **e}, any_text, any_text,
              st.dictionaries(any_text.filter(lambda k: k not in COLUMN_KEYS),
                              json_value.filter(lambda v: v is not None), max_size=2)),  # None extras: not kept
)


@settings(max_examples=800, deadline=None)
@given(message)
def test_store_codec_is_lossless_and_always_encodable(msg: dict) -> None:
    """L7 + S2: every row value encodes as UTF-8, and the row decodes back to exactly the appended dict."""
    row = message_to_row(msg)
    for value in row:
        if isinstance(value, str):
            value.encode("utf-8")
    assert row_to_message(row) == msg
    extra = row[-1]
    assert (extra is not None and ESCAPED_KEY in json.loads(extra)) == (row != message_to_row_plain(msg))


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory):
    from mxclaw_nb.store.writer import Store

    with Store(tmp_path_factory.mktemp("db") / "prop.duckdb") as store:
        yield store


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(message, min_size=1, max_size=4))
def test_duckdb_round_trip_of_any_text(module_store, messages: list[dict]) -> None:
    """L7 + S2 through a real DuckDB file: appending never raises and the transcript comes back exactly."""
    sid = module_store.create_session(workspace="/w\udcff", title="t\ud800", meta={"m": "\udcfe"})
    module_store.append_messages(sid, messages, turn=1)
    module_store.append_event(sid, "x", {"messages": messages})
    assert module_store.load_transcript(sid) == messages
    payload = module_store.sql("SELECT payload FROM events WHERE session_id = ?", [sid])["payload"].iloc[0]
    stored = json.loads(payload)
    if stored.pop(ESCAPED_KEY, False):  # marked: every string in it is escaped
        stored = unescape_value(stored)
    assert stored == {"messages": messages}


def test_the_marker_key_is_reserved() -> None:
    """A message that itself carries the marker key takes the escaped path; the key does not come back."""
    msg = {"role": "user", "content": "\\xff literal", ESCAPED_KEY: "mine"}
    assert row_to_message(message_to_row(msg)) == {"role": "user", "content": "\\xff literal"}


def message_to_row_plain(msg: dict) -> tuple:
    """The row without the text policy (what valid messages always get)."""
    from mxclaw_nb.store.codec import _encode

    return _encode(msg)


@settings(max_examples=400, deadline=None)
@given(st.lists(message, max_size=6))
def test_the_sent_form_always_encodes_and_the_one_pass_plan_agrees(messages: list[dict]) -> None:
    """L7 at the provider edge: the sent form of any message is JSON the openai client can encode as UTF-8,
    and the cold build's inline fast paths send exactly what `sanitize` sends."""
    exact = exact_counter("o200k_base")
    for m in messages:
        sent = sanitize(m)
        json.dumps(sent, ensure_ascii=False).encode("utf-8")
        assert estimate_tokens(m) == estimate_tokens(sent) >= 0  # C1 counts the escaped form that is sent
        if exact is not None:
            assert exact.count(m) >= 0
    plan = plan_counted(messages)
    for (_, m), out in zip(plan.steps, plan.sent, strict=True):
        assert json.dumps(out) == json.dumps(sanitize(m))
        json.dumps(out, ensure_ascii=False).encode("utf-8")


# -- real turns -------------------------------------------------------------------------------------------


def _touch(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@pytest.fixture
def odd_workspace(tmp_path: Path) -> Path:
    """A workspace whose names and contents are not all UTF-8."""
    ws = tmp_path / "ws"
    ws.mkdir()
    root = os.fsencode(ws)
    _touch(root + b"/\xff.txt", b"needle in a file whose name is byte 0xff\n")
    _touch(root + b"/latin1.txt", b"caf\xe9 needle\nplain line\n")
    os.mkdir(root + b"/d\xe9j\xe0")
    _touch(root + b"/d\xe9j\xe0/inner.txt", b"needle inside a non-UTF-8 folder\n")
    (ws / "a.txt").write_text("alpha\n", encoding="utf-8")
    (ws / "\\xff.txt").write_text("a name with a real backslash\n", encoding="utf-8")  # looks like an escape
    return ws


def make_agent(server: TestServer, workspace: Path, tmp_path: Path, **kw) -> Agent:
    kw.setdefault("approval", "allow")
    return Agent(workspace=workspace, db=str(tmp_path / "text.duckdb"), base_url=server.base_url, api_key="k",
                 model="test-model", home=tmp_path / "home", **kw)


def assert_clean(agent: Agent, turns: int) -> list[dict]:
    """Every turn finished, nothing failed, the transcript needs no repair; returns the stored transcript."""
    events = agent.store.events(agent.session_id)
    kinds = list(events["type"])
    assert kinds.count("turn.finished") == turns and "turn.failed" not in kinds, kinds
    assert kinds.count("tool.started") == kinds.count("tool.finished")
    stored = agent.transcript()
    issued = [c["id"] for m in stored if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in stored if m["role"] == "tool"]
    assert issued == answered  # no dangling call (C4 has nothing to synthesise)
    view = agent.dry_run("next")
    assert not view.repaired
    json.dumps(view.messages, ensure_ascii=False).encode("utf-8")  # the next request is sendable
    return stored


def db_rows(path: Path, session_id: str) -> list[tuple]:
    """The session's message rows through a separate DuckDB connection (after the agent closed)."""
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT role, content, tool_calls, extra FROM messages WHERE session_id = ? ORDER BY seq",
                           [session_id]).fetchall()


def test_non_utf8_names_and_contents_through_list_dir_grep_and_read_file(test_server, odd_workspace, tmp_path):
    """L7: odd names are shown as \\xHH, undecodable bytes too; a shown name can be read back."""
    test_server.enqueue_tool_calls([("list_dir", {"path": "."}), ("grep", {"pattern": "needle", "path": "."})])
    test_server.enqueue_tool_calls([("read_file", {"path": "\\xff.txt"}), ("read_file", {"path": "latin1.txt"}),
                                    ("list_dir", {"path": "d\\xe9j\\xe0"}),
                                    ("read_file", {"path": "d\\xe9j\\xe0/inner.txt"}),
                                    ("read_file", {"path": "\\x5cxff.txt"}), ("read_file", {"path": "\ud800"})])
    test_server.enqueue_text("all read")
    agent = make_agent(test_server, odd_workspace, tmp_path)
    result = agent.run("look around")
    assert result.status == "ok" and result.text == "all read"
    stored = assert_clean(agent, 1)
    listing, hits, named, latin1, sub, inner, backslashed, surrogate = (m["content"] for m in stored
                                                                        if m["role"] == "tool")
    assert "\\xff.txt  (41 bytes)" in listing and "d\\xe9j\\xe0/" in listing
    assert "\\x5cxff.txt  (29 bytes)" in listing  # the real backslash name cannot be mistaken for byte 0xff
    assert backslashed == "a name with a real backslash\n"
    assert surrogate == "Invalid arguments: 'path' '\\ud800' holds a lone surrogate no file name can have"
    assert "\\xff.txt:1: needle" in hits and "latin1.txt:1: caf\\xe9 needle" in hits
    assert "d\\xe9j\\xe0/inner.txt:1: needle" in hits
    assert named == "needle in a file whose name is byte 0xff\n"
    assert latin1 == "caf\\xe9 needle\nplain line\n"
    assert "inner.txt" in sub and inner == "needle inside a non-UTF-8 folder\n"
    # what the model got is exactly what is stored (the tool edge escaped it; nothing is left to escape)
    sent_tools = [m["content"] for m in test_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert sent_tools == [listing, hits, named, latin1, sub, inner, backslashed, surrogate]
    agent.close()
    rows = db_rows(tmp_path / "text.duckdb", agent.session_id)
    assert len(rows) == len(stored) and [r[0] for r in rows] == [m["role"] for m in stored]


def test_lone_surrogates_in_prompt_arguments_and_model_text(test_server, odd_workspace, tmp_path):
    """L7: a lone surrogate anywhere (prompt, tool-call id and arguments, model text, reasoning) is stored
    exactly and sent escaped; the model's `{"path": "\\udcff.txt"}` names the file b'\\xff.txt'."""
    prompt = "read \udcff.txt and \ud800 please"
    test_server.enqueue_tool_calls([("read_file", {"path": "\udcff.txt"}), ("list_dir", {"path": "\udcfe"})],
                                   text="calling \udcff")
    test_server.enqueue_raw_tool_call("read_file", '{"path":"\\udcff.txt"}')  # the JSON escape, as text
    test_server.enqueue_text("the file says needle \udcff\ud800", reasoning="think \udcfe")
    agent = make_agent(test_server, odd_workspace, tmp_path)
    result = agent.run(prompt)
    assert result.status == "ok" and result.text == "the file says needle \udcff\ud800"
    stored = assert_clean(agent, 1)
    user = [m for m in stored if m["role"] == "user"][-1]
    assert user["content"] == prompt  # stored exactly (the escape is reversed on load)
    first = [m for m in stored if m["role"] == "assistant"][0]
    assert first["content"] == "calling \udcff"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"path": "\udcff.txt"}
    tools = [m for m in stored if m["role"] == "tool"]
    assert tools[0]["content"] == "needle in a file whose name is byte 0xff\n"
    assert "no such directory: '\\xfe'" in tools[1]["content"] and tools[1]["is_error"]
    assert tools[2]["content"] == tools[0]["content"]
    assert stored[-1]["reasoning"] == "think \udcfe"
    # on the wire: escaped, valid UTF-8, arguments still JSON meaning the same path
    wire = test_server.requests[1]["messages"]
    assert wire[-4]["content"] == "read \\xff.txt and \\ud800 please"
    assert wire[-3]["content"] == "calling \\xff"
    assert json.loads(wire[-3]["tool_calls"][0]["function"]["arguments"]) == {"path": "\udcff.txt"}
    agent.run("again")  # the next turn sends the model's own odd text back, escaped
    assert test_server.requests[-1]["messages"][-2]["content"] == "the file says needle \\xff\\ud800"
    assert_clean(agent, 2)
    sid = agent.session_id
    agent.close()
    rows = db_rows(tmp_path / "text.duckdb", sid)
    assert len(rows) == len(stored) + 2
    assert rows[[r[0] for r in rows].index("user")][1] == "read \\xff.txt and \\ud800 please"
    # marked rows: the prompt, the assistant with odd text and arguments, the odd answer (tool results were
    # escaped at the tool edge, the raw-arguments call is plain ASCII JSON text)
    assert sum(1 for r in rows if r[3] and ESCAPED_KEY in json.loads(r[3])) == 3
    resumed = Agent.resume(sid, db=str(tmp_path / "text.duckdb"), workspace=odd_workspace,
                           base_url=test_server.base_url, api_key="k", model="test-model", home=tmp_path / "home")
    assert resumed.transcript()[: len(stored)] == stored  # S2: exactly what was appended


def test_nul_bytes_are_stored_and_sent(test_server, odd_workspace, tmp_path):
    """NUL in a prompt, in tool arguments (write_file content) and in a shell tool's output."""
    test_server.enqueue_tool_calls([("write_file", {"path": "nul.txt", "content": "a\x00b\n"}),
                                    ("bash", {"command": "printf 'x\\000y'"})])
    test_server.enqueue_text("wrote \x00 it")
    agent = make_agent(test_server, odd_workspace, tmp_path)
    result = agent.run("nul \x00 here")
    assert result.status == "ok" and result.text == "wrote \x00 it"
    assert (odd_workspace / "nul.txt").read_bytes() == b"a\x00b\n"
    stored = assert_clean(agent, 1)
    assert [m for m in stored if m["role"] == "user"][-1]["content"] == "nul \x00 here"
    assert any("x\x00y" in m["content"] for m in stored if m["role"] == "tool")
    assert test_server.requests[-1]["messages"][-4]["content"] == "nul \x00 here"
    agent.close()
    rows = db_rows(tmp_path / "text.duckdb", agent.session_id)
    assert len(rows) == len(stored) and any(r[1] == "nul \x00 here" for r in rows)


def test_a_10_mb_tool_output_with_undecodable_bytes(test_server, odd_workspace, tmp_path):
    """A1 + L7: a 10 MB file with non-UTF-8 bytes becomes an escaped artifact and a bounded preview."""
    line = b"row \xff of a big latin-1 log: caf\xe9 " + b"x" * 60 + b"\n"
    data = line * (10_000_000 // len(line) + 1)
    _touch(os.fsencode(odd_workspace) + b"/big\xff.log", data)
    test_server.enqueue_tool_calls([("read_file", {"path": "big\\xff.log"})])
    test_server.enqueue_text("big file read")
    agent = make_agent(test_server, odd_workspace, tmp_path)
    result = agent.run("read the big log")
    assert result.status == "ok" and result.text == "big file read"
    stored = assert_clean(agent, 1)
    preview = [m for m in stored if m["role"] == "tool"][0]["content"]
    assert preview.startswith("row \\xff of a big latin-1 log: caf\\xe9 ") and "[artifact artifact-" in preview
    artifact_id = preview.split("[artifact ")[1].split("]")[0]
    text = agent.store.get_artifact(agent.session_id, artifact_id)
    assert text is not None and len(text) == len(data) + 6 * data.count(b"\n") and is_valid(text)


def test_a_workspace_whose_own_path_is_not_utf8(test_server, tmp_path):
    """L7: the workspace folder's name itself holds byte 0xff: the session row, the frozen context, tool
    results naming the workspace and the whole turn are stored; the path is shown as \\xff."""
    os.mkdir(os.fsencode(tmp_path) + b"/w\xff")
    ws = Path(os.fsdecode(os.fsencode(tmp_path) + b"/w\xff"))
    (ws / "AGENTS.md").write_bytes(b"house rules\n")
    test_server.enqueue_tool_calls([("list_dir", {"path": "."}), ("read_file", {"path": "/etc/hostname"})])
    test_server.enqueue_text("done")
    agent = make_agent(test_server, ws, tmp_path)
    result = agent.run("where am I?")
    assert result.status == "ok"
    stored = assert_clean(agent, 1)
    denied = [m for m in stored if m["role"] == "tool"][1]
    assert denied["is_error"] and "outside the workspace" in denied["content"] and "w\\xff" in denied["content"]
    assert agent.store.sessions()["workspace"].iloc[0].endswith("/w\\xff")
    assert any("house rules" in str(m.get("content")) for m in stored if m["role"] == "system")


def test_writing_text_that_is_not_valid_unicode_is_an_invalid_argument(test_server, odd_workspace, tmp_path):
    """L7: write_file/edit_file with a lone surrogate in the text: a clear Invalid failure (kept as failure
    evidence, C5), nothing written, and the model's next call in the same turn works."""
    test_server.enqueue_tool_calls([("write_file", {"path": "new/w.txt", "content": "x\udcff"}),
                                    ("edit_file", {"path": "a.txt", "old_string": "alpha", "new_string": "\ud800"})])
    test_server.enqueue_tool_calls([("write_file", {"path": "new/w.txt", "content": "x\\xff"})])
    test_server.enqueue_text("written")
    agent = make_agent(test_server, odd_workspace, tmp_path)
    assert agent.run("write it").status == "ok"
    stored = assert_clean(agent, 1)
    write, edit, retry = (m for m in stored if m["role"] == "tool")
    assert write["is_error"] and write["content"] == (
        "Invalid arguments: 'content' holds text that is not valid Unicode (\\xff at character 1); "
        "files are written as UTF-8 text")
    assert edit["is_error"] and "'new_string'" in edit["content"] and "\\ud800" in edit["content"]
    assert (odd_workspace / "a.txt").read_text(encoding="utf-8") == "alpha\n"
    assert not retry.get("is_error") and (odd_workspace / "new" / "w.txt").read_bytes() == b"x\\xff"


def test_marked_rows_survive_a_parquet_round_trip(tmp_path):
    """S4 + L7: exported to Parquet and imported into another file, an escaped transcript decodes exactly."""
    from mxclaw_nb.store.writer import Store

    messages = [{"role": "user", "content": "odd \udcff and \ud800, real \\xff"},
                {"role": "assistant", "content": "ok \x00", "reasoning": "\udcfe"}]
    with Store(tmp_path / "a.duckdb") as a:
        sid = a.create_session(workspace="/w\udcff")
        a.append_messages(sid, messages, turn=1)
        a.export_parquet(tmp_path / "pq")
    with Store(tmp_path / "b.duckdb") as b:
        b.import_parquet(tmp_path / "pq")
        assert b.load_transcript(sid) == messages
        assert b.sessions()["workspace"].tolist() == ["/w\\xff"]


def test_compaction_quotes_odd_text_escaped(test_server, odd_workspace, tmp_path):
    """C5/C6 + L7: the structured summary quotes user goals and failures that hold lone surrogates; the
    summary sent is escaped, the turn goes on, and the transcript keeps the originals."""
    agent = make_agent(test_server, odd_workspace, tmp_path, context_window_tokens=4_000, keep_recent_tokens=600,
                       counter="estimate")
    for k in range(6):
        test_server.enqueue_tool_calls([("read_file", {"path": "\udcfe-missing.txt"})])
        test_server.enqueue_text(f"step {k} done \udcff")
        assert agent.run(f"goal {k}: fix \udcff{k} " + "pad " * 700).status == "ok"
    events = agent.store.events(agent.session_id, type="context.compacted")
    assert len(events) >= 1
    sent = [m for r in test_server.requests for m in r["messages"] if m["role"] == "system"
            and m["content"].startswith("[compressed conversation context]")]
    assert sent and "fix \\xff" in sent[-1]["content"] and "no such file: '\\xfe-missing.txt'" in sent[-1]["content"]
    stored = assert_clean(agent, 6)
    assert [m["content"][:10] for m in stored if m["role"] == "user"][:2] == ["goal 0: fi", "goal 1: fi"]
    assert sum("\udcff" in (m.get("content") or "") for m in stored if m["role"] == "user") == 6
