"""SPEC L6: the provider key and URL credentials are never stored, shown or sent.

Real parts: a real InteractiveShell running `%%agent`, the real `openai` client against the shipped
test server on 127.0.0.1, a real DuckDB file that is read back byte for byte and table by table, and
a real sandboxed shell that runs `env` and `cat .env`.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb import secrets
from mxclaw_nb.demo.server import TestServer

KEY = "sk-proj-L6drill-4f9c2a7e1b"
PASSWORD = "hunter2-L6-pass"


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_DB", "MXCLAW_CONTEXT_WINDOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "store.duckdb"))
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.config.pop("AgentMagics", None)
    ip.run_line_magic("load_ext", "mxclaw_nb")
    yield ip
    ip.run_line_magic("unload_ext", "mxclaw_nb")
    ip.config.pop("AgentMagics", None)


def _all_text(captures: list) -> str:
    out = []
    for cap in captures:
        out += [cap.stdout, cap.stderr]
        for o in cap.outputs:
            out += [str(v) for v in o.data.values()]
    return "\n".join(out)


def _database_text(db: Path) -> str:
    """Every table of the store as text (DuckDB compresses strings, so raw bytes alone could miss one)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        parts = []
        for t in tables:
            parts.append(con.execute(f'SELECT * FROM "{t}"').df().to_csv())
        return "\n".join(parts)
    finally:
        con.close()


def test_l6_key_and_url_password_never_stored_shown_or_sent(shell: InteractiveShell, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"OPENAI_API_KEY={KEY}\nDATABASE_URL=postgres://app:{PASSWORD}@db/app\n")
    with TestServer() as srv:
        url = srv.base_url.replace("http://", f"http://bob:{PASSWORD}@")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("MXCLAW_MODEL", "test-model")
        srv.enqueue_tool_calls([("bash", {"command": "env; cat .env; echo key=$OPENAI_API_KEY"}),
                                ("read_file", {"path": ".env"}), ("grep", {"pattern": "sk-", "path": "."})])
        srv.enqueue_text(f"The key is {KEY} and the URL is {url}.")  # a model that repeats what it saw
        srv.enqueue_error(400, f"Bad request. Received headers: Authorization: Bearer {KEY}; url {url}")
        caps = []
        for line, cell in [("config workspace=" + str(ws), None), ("config approval=allow", None),
                           ("", "print the environment and the .env file"), ("", "again"), ("config", None),
                           ("view", None), ("timeline", None), ("events", None), ("sessions", None)]:
            with capture_output() as cap:
                if cell is None:
                    shell.run_line_magic("agent", line)
                else:
                    shell.run_cell_magic("agent", line, cell)
            caps.append(cap)
        sent = json.dumps(srv.requests)
    shown = _all_text(caps)
    assert "Bad request" in shown  # the provider error was shown ...
    assert "key=" in json.dumps(sent) or "exit code" in sent  # ... and the tool output was sent to the model
    for secret in (KEY, PASSWORD):
        assert secret not in shown, f"{secret} shown in a notebook output"
        assert secret not in sent, f"{secret} sent to the model in a request body"
    shell.run_line_magic("unload_ext", "mxclaw_nb")  # close the store: everything on disk
    shell.run_line_magic("load_ext", "mxclaw_nb")
    db = tmp_path / "store.duckdb"
    stored = _database_text(db)
    assert "[redacted]" in stored and "bob:***@" in stored
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("store.duckdb*") if p.is_file())
    for secret in (KEY, PASSWORD):
        assert secret not in stored, f"{secret} stored in a table"
        assert secret.encode() not in raw, f"{secret} in the database file"


def test_l6_redact_known_values_bearer_and_url_credentials() -> None:
    secrets.register("sk-unit-0123456789")
    text = ("sk-unit-0123456789 | Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig | "
            "https://u:p4ssw0rd@h/x?api_key=abc123&q=1 | password = input() | Bearer {token}")
    out = secrets.redact(text)
    assert "sk-unit" not in out and "eyJhbGci" not in out and "p4ssw0rd" not in out and "abc123" not in out
    assert "password = input()" in out and "Bearer {token}" in out  # source code is left alone
    assert secrets.display_url("https://user:s3cr3t-pw@api.example.com:8443/v1") == \
        "https://user:***@api.example.com:8443/v1"
    assert "s3cr3t-pw" in secrets.known()
    secrets.register("demo")  # placeholders and short values are not secrets
    assert secrets.redact("demo model") == "demo model"


def test_l6_stream_redactor_catches_a_key_split_across_pieces() -> None:
    secrets.register(KEY)
    secrets.register(PASSWORD)
    text = f"Here is the key {KEY} and a URL http://u:{PASSWORD}@h/v1 done"
    for size in (1, 3, 7, 24):
        redactor = secrets.StreamRedactor()
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        shown = [redactor.feed(p) for p in pieces] + [redactor.flush()]
        joined = "".join(shown)
        assert KEY not in joined and PASSWORD not in joined and joined.startswith("Here is the key [redacted]")
        assert sum(1 for s in shown if s) > 3  # still streamed, word by word
    cjk = secrets.StreamRedactor()
    assert cjk.feed("上下文压缩") == "上下文压缩" and cjk.feed("正在运行") == "正在运行"  # no spaces: not held


@given(st.text(), st.text(), st.sampled_from(["", "https://u:", "Bearer ", "?api_key="]))
@settings(max_examples=300, deadline=None)
def test_l6_redact_property_a_known_key_never_survives(before: str, after: str, glue: str) -> None:
    key = "sk-prop-" + "Z9" * 8
    secrets.register(key)
    out = secrets.redact(before + glue + key + after)
    assert key not in out
    assert secrets.redact(out) == out  # redacting twice changes nothing more
