"""SPEC L6: the provider key and URL credentials are never stored, shown or sent.

Real parts: a real InteractiveShell running `%%agent`, the real `openai` client against the shipped
test server on 127.0.0.1, a real DuckDB file that is read back byte for byte and table by table, and
a real sandboxed shell that runs `env` and `cat .env`.
"""

from __future__ import annotations

import base64
import json
import re
import string
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote_plus

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


# -- L6 beyond the exact value: encoded forms, and a key split across tool outputs ------------------------------

B64 = re.compile(r"[A-Za-z0-9+/_-]{4,}")
HEX = re.compile(r"[0-9A-Fa-f]{2,}")
KEY_CHARS = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=20, max_size=64)


def _runs_of(key: bytes, data: bytes) -> bool:
    """True when `data` holds a run of at least MIN_FRAGMENT bytes of `key`."""
    n = secrets.MIN_FRAGMENT
    return any(key[i:i + n] in data for i in range(len(key) - n + 1))


def _b64_recovers(key: bytes, text: str) -> bool:
    """Decode every base64/base64url run of `text` at each of its 4 character alignments: any key run inside?"""
    for run in B64.findall(text):
        for start in range(4):
            part = run[start:][: (len(run) - start) // 4 * 4]
            for alt in (part, part.replace("-", "+").replace("_", "/")):
                try:
                    if _runs_of(key, base64.b64decode(alt, validate=True)):
                        return True
                except ValueError:
                    pass
    return False


def _hex_recovers(key: bytes, text: str) -> bool:
    for run in HEX.findall(text):
        for start in range(2):
            part = run[start:][: (len(run) - start) // 2 * 2]
            if part and _runs_of(key, bytes.fromhex(part)):
                return True
    return False


@given(KEY_CHARS, st.binary(max_size=5), st.binary(max_size=5), st.text(max_size=20))
@settings(max_examples=300, deadline=None)
def test_l6_property_no_encoded_form_of_a_key_survives(key: str, before: bytes, after: bytes, noise: str) -> None:
    """base64, base64url (at any byte alignment inside longer data), hex, URL-encoded and reversed: nothing of the
    key can be decoded back out of the redacted text."""
    secrets.register(key)
    try:
        data, raw = before + key.encode() + after, key.encode()
        for encoded in (base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode().rstrip("="),
                        data.hex(), data.hex().upper()):
            out = secrets.redact(noise + " " + encoded + " " + noise)
            assert not _b64_recovers(raw, out) and not _hex_recovers(raw, out), (encoded, out)
        text = before.decode("latin-1") + key + after.decode("latin-1")
        for encoded in (quote(text, safe=""), quote_plus(text), text[::-1]):
            out = secrets.redact(noise + encoded + noise)
            assert not _runs_of(raw, unquote_plus(out).encode()) and not _runs_of(raw, out[::-1].encode()), out
    finally:
        secrets.forget(key)


@given(KEY_CHARS, st.lists(st.integers(min_value=1, max_value=63), max_size=3), st.lists(st.text(max_size=12),
       min_size=8, max_size=8))
@settings(max_examples=300, deadline=None)
def test_l6_property_a_key_split_across_outputs_leaves_no_long_part(key: str, cuts: list[int],
                                                                     noise: list[str]) -> None:
    """A key cut anywhere into up to 4 consecutive outputs: no output keeps MIN_FRAGMENT characters of it, so
    the key is in none of them, nor in all of them joined."""
    secrets.register(key)
    try:
        points = sorted({c for c in cuts if c < len(key)})
        pieces = [key[a:b] for a, b in zip([0, *points], [*points, len(key)], strict=True)]
        outputs = [secrets.redact(noise[2 * i] + "\n" + piece + "\n" + noise[2 * i + 1])
                   for i, piece in enumerate(pieces)]
        assert key not in "".join(outputs)
        for out in outputs:
            assert not _runs_of(key.encode(), out.encode()), (pieces, out)
        assert secrets.redact(outputs[0]) == outputs[0]  # redacting twice changes nothing more
    finally:
        secrets.forget(key)


def test_l6_env_file_values_are_registered_by_name() -> None:
    text = ('# comment\nexport STRIPE_SECRET_KEY="sk_live_L6envfile123"\nDEBUG=true\nDB_PASSWORD=\'pw-L6-env-77\'\n'
            "PUBLIC_URL=https://example.com\n")
    try:
        assert secrets.register_env(text) == 2
        assert {"sk_live_L6envfile123", "pw-L6-env-77"} <= set(secrets.known())
        assert "true" not in secrets.known() and "https://example.com" not in secrets.known()
    finally:
        secrets.forget("sk_live_L6envfile123")
        secrets.forget("pw-L6-env-77")


ENV_KEY = "ghp_L6encodedFormsAndSplits0x7f3c9a"


def test_l6_drill_encoded_and_split_key_from_a_workspace_env_never_stored_or_sent(tmp_path: Path) -> None:
    """Through the real agent, shell and store: a key kept only in the workspace `.env` (not the provider key)
    is printed base64, base64url, hex, URL-encoded, reversed, and in two halves by two consecutive commands;
    neither the DuckDB file nor any request body holds it or a MIN_FRAGMENT-long part of it."""
    from mxclaw_nb import Agent
    from mxclaw_nb.provider.client import OpenAIProvider

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"GITHUB_TOKEN={ENV_KEY}\n")
    half = len("GITHUB_TOKEN=") + 15
    commands = ["base64 -w0 .env", "base64 -w0 .env | tr '+/' '-_'", "od -An -tx1 .env | tr -d ' \\n'",
                "xxd -p .env | tr -d '\\n'", "python3 -c \"import urllib.parse;print(urllib.parse.quote(open('.env')"
                ".read()))\"", "rev .env", f"head -c {half} .env", f"tail -c +{half + 1} .env"]
    try:
        with TestServer() as srv:
            srv.enqueue_tool_calls([("bash", {"command": c}) for c in commands[:6]])
            srv.enqueue_tool_calls([("bash", {"command": commands[6]})])
            srv.enqueue_tool_calls([("bash", {"command": commands[7]})])
            srv.enqueue_text("done")
            provider = OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model")
            agent = Agent(workspace=ws, db=str(tmp_path / "s.duckdb"), provider=provider, approval="allow",
                          home=tmp_path / "home")
            assert agent.run("show the env file in every encoding").text == "done"
            sent = json.dumps(srv.requests)
            outputs = [m["content"] for m in agent.transcript() if m["role"] == "tool"]
            agent.close()
        assert len(outputs) == 8 and all("exit code 0" in o or "exit 0" in o or "[redacted]" in o for o in outputs), \
            outputs
        assert sum("[redacted]" in o for o in outputs) >= 7, outputs  # `head` may end before a long enough part
        raw = ENV_KEY.encode()
        stored = _database_text(tmp_path / "s.duckdb")
        for where, text in (("sent", sent), ("stored", stored), ("tool outputs", "\n".join(outputs))):
            assert ENV_KEY not in text, where
            assert not _runs_of(raw, text.encode()), where
            assert not _b64_recovers(raw, text) and not _hex_recovers(raw, text), where
            assert not _runs_of(raw, unquote_plus(text).encode()) and not _runs_of(raw, text[::-1].encode()), where
    finally:
        secrets.forget(ENV_KEY)
