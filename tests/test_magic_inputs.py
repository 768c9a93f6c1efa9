"""SPEC N1, L1, L7: stray input at the magic gives a one-line UsageError or the intended action, never a traceback.

Every input goes through `shell.run_cell`, the path a notebook cell takes (IPython's input
transformers, then the magic), in a real InteractiveShell with a temporary DuckDB file and either the
offline demo model or the scripted TestServer over HTTP.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb.agent import Agent, sniff_image
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.notebook.parsing import agent_input_guard, edit_distance, near_command
from mxclaw_nb.settings import LIMITS, MAX_IMAGE_BYTES, check_setting, describe_setting
from tests import test_magics
from tests.test_magics import PNG_1PX, magics, user_texts

env, ip, server = test_magics.env, test_magics.ip, test_magics.server  # the same fixtures as test_magics

COMMAND_NAMES = ("help", "new", "sessions", "resume", "config", "view", "compact", "dry-run", "events", "sql",
                 "replay", "transcript", "timeline", "gauge")


def cell(shell: InteractiveShell, source: str) -> tuple[BaseException | None, str]:
    """Run one cell as a notebook would; returns (exception raised, everything printed)."""
    with capture_output() as cap:
        result = shell.run_cell(source)
    text = cap.stdout + cap.stderr
    assert "Traceback" not in text, text[-3000:]
    return result.error_in_exec, text


def usage_error(shell: InteractiveShell, source: str, *needles: str) -> str:
    """Run a cell that must end in exactly one UsageError line containing every needle."""
    error, text = cell(shell, source)
    assert isinstance(error, UsageError), (source, error, text[-2000:])
    message = str(error)
    assert "\n" not in message.strip() or message.startswith("usage:"), message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def sessions_stored(shell: InteractiveShell) -> int:
    return len(magics(shell).store().sessions())


# -- `?` at the end of a line: IPython's help syntax must not take the prompt ----------------------------
def test_n1_prompt_ending_with_question_mark_reaches_the_agent(ip: InteractiveShell, server: TestServer) -> None:
    server.enqueue_text("It manages stock numbers.")
    error, text = cell(ip, "%agent what does this project do?")
    assert error is None and "It manages stock numbers." in text and "not found" not in text
    server.enqueue_text("Fine.")
    error, text = cell(ip, "%agent -- is it fine??")
    assert error is None and "Fine." in text
    assert user_texts(server) == ["what does this project do?", "is it fine??"]


def test_n1_dry_run_with_question_mark_and_other_placements(ip: InteractiveShell) -> None:
    error, text = cell(ip, "%agent dry-run what next?")
    assert error is None and "dry run, no model call" in text and "Docstring" not in text
    assert magics(ip).get_agent().dry_run("what next?").messages[-1]["content"] == "what next?"
    # indented inside a block, and as the cell magic's body
    error, text = cell(ip, "x = 1\nif x:\n    %agent dry-run is x one?\n")
    assert error is None and "dry run, no model call" in text
    error, text = cell(ip, "%%agent --dry-run\nwhat next?")
    assert error is None and "dry run, no model call" in text
    assert sessions_stored(ip) == 0  # dry runs store nothing


def test_n1_help_syntax_still_works_where_it_is_meant() -> None:
    """`%agent?` is help on the magic; strings, continued lines and cell-magic bodies are left as typed."""
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mxclaw_nb")
    try:
        assert agent_input_guard in shell.input_transformers_cleanup
        assert "pinfo" in shell.transform_cell("%agent?") and "pinfo" in shell.transform_cell("%agent??")
        assert shell.transform_cell("%agent what next?") == "get_ipython().run_line_magic('agent', 'what next?')\n"
        kept = ['s = """\n', "%agent not a magic?\n", '"""\n']
        assert agent_input_guard(kept) == kept
        body = ["%%bash\n", "%agent echo?\n"]
        assert agent_input_guard(body) == body
        continued = ["%agent one \\\n", "%agent two?\n"]
        assert agent_input_guard(continued)[1] == "%agent two?\n"
        assert agent_input_guard(["  %agent a 'quoted' b?"]) == [
            "  get_ipython().run_line_magic('agent', \"a 'quoted' b?\")\n"]
        with capture_output() as cap:
            shell.run_cell("%agent?")
        assert "mxclaw_nb: a coding agent" in cap.stdout
    finally:
        shell.run_line_magic("unload_ext", "mxclaw_nb")
    assert agent_input_guard not in shell.input_transformers_cleanup


def test_n1_a_prompt_is_literal_text(ip: InteractiveShell, server: TestServer) -> None:
    """`$x` and `{x}` are not expanded (no IPython variable expansion on a prompt)."""
    ip.user_ns["x"] = "SECRET-VALUE"
    server.enqueue_text("ok")
    error, _ = cell(ip, "%agent what is $x and {x}?")
    assert error is None and user_texts(server) == ["what is $x and {x}?"]


# -- command-name typos --------------------------------------------------------------------------------
def test_n1_one_word_typo_of_a_command_asks_and_dash_dash_sends_it(ip: InteractiveShell, server: TestServer) -> None:
    for typo, command in (("sesions", "sessions"), ("veiw", "view"), ("confg", "config"), ("timline", "timeline"),
                          ("Sessions", "sessions"), ("nwe", "new"), ("dryrun", "dry-run")):
        usage_error(ip, f"%agent {typo}", f"did you mean `%agent {command}`?", "(use -- to send it as a prompt",
                    f"%agent -- {typo}")
    usage_error(ip, "%agent config?", "did you mean `%agent help config`?")
    assert server.requests == [] and sessions_stored(ip) == 0
    server.enqueue_text("sent as typed")
    error, text = cell(ip, "%agent -- sesions")
    assert error is None and "sent as typed" in text and user_texts(server) == ["sesions"]


def test_n1_near_command_ignores_ordinary_words() -> None:
    for word in ("hello", "fix", "why", "refactor", "tests", "explain", "now?", "summarise", "run", "go"):
        assert near_command(word, COMMAND_NAMES) is None, word
    assert near_command("sessions", COMMAND_NAMES) is None  # an exact command is not a typo
    assert edit_distance("veiw", "view") == 1 and edit_distance("sesions", "sessions") == 1
    assert edit_distance("", "abc") == 3 and edit_distance("kitten", "sitting") == 3


# -- settings validated when set -------------------------------------------------------------------------
BAD_SETTINGS = [("max_iterations", "-3"), ("max_iterations", "0"), ("context_window_tokens", "0"),
                ("context_window_tokens", "999"), ("approval_timeout", "-1"), ("approval_timeout", "0"),
                ("threshold_ratio", "5"), ("threshold_ratio", "0"), ("threshold_ratio", "nan"),
                ("keep_recent_tokens", "-1"), ("max_prompt_bytes", "0"), ("max_iterations", "abc")]


@pytest.mark.parametrize(("key", "raw"), BAD_SETTINGS)
def test_n1_agent_config_refuses_out_of_range_values(ip: InteractiveShell, key: str, raw: str) -> None:
    m = magics(ip)
    before = getattr(m, key)
    usage_error(ip, f"%agent config {key}={raw}", f"{key} must be {describe_setting(key)}", "nothing was changed")
    assert getattr(m, key) == before or (before != before)  # noqa: PLR0124 - NaN never equals itself


def test_n1_percent_config_refuses_out_of_range_values(ip: InteractiveShell,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    m = magics(ip)
    for key, value in (("max_iterations", "-3"), ("threshold_ratio", "5"), ("approval_timeout", "-1"),
                       ("context_window_tokens", "0")):
        before = getattr(m, key)
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            error, _ = cell(ip, f"%config AgentMagics.{key} = {value}")
        assert error is None and getattr(m, key) == before
        assert f"{key} must be {describe_setting(key)}" in caplog.text, caplog.text
    error, _ = cell(ip, "%config AgentMagics.max_iterations = 7")
    assert error is None and m.max_iterations == 7 and m.get_agent().max_iterations == 7


def test_n1_agent_arguments_are_checked_with_the_same_table(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    for kwargs, needle in (({"max_iterations": -3}, "max_iterations must be an integer >= 1 (got -3)"),
                           ({"context_window_tokens": 0}, "context_window_tokens must be an integer >= 1,000"),
                           ({"threshold_ratio": 5}, "threshold_ratio must be a number in (0, 1] (got 5)"),
                           ({"keep_recent_tokens": -1}, "keep_recent_tokens must be an integer >= 0"),
                           ({"shell_timeout": 0}, "shell_timeout must be a number > 0"),
                           ({"max_prompt_bytes": 0}, "max_prompt_bytes must be an integer >= 1")):
        with pytest.raises(ValueError, match="must be") as err:
            Agent(db=str(db), workspace=str(tmp_path), **kwargs)
        assert needle in str(err.value)
    with pytest.raises(ValueError, match=r"\(got 500\); it came from MXCLAW_CONTEXT_WINDOW='500'"):
        Agent(db=str(db), workspace=str(tmp_path), env={"MXCLAW_CONTEXT_WINDOW": "500"})
    for name, limit in LIMITS.items():  # every range accepts its own bound or a value just inside it
        inside = limit.low if not limit.low_open else limit.low + 0.5
        assert check_setting(name, int(inside) if limit.integer else inside) is not None


def test_n1_readme_states_every_range() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for name in LIMITS:
        if name == "shell_timeout":  # an Agent argument only
            continue
        rows = [line for line in readme.splitlines() if line.startswith(f"| `{name}` |")]
        assert any(describe_setting(name).replace(" (or unset)", "") in row for row in rows), name


# -- the store is swapped only after the new one opened --------------------------------------------------
def test_n1_a_db_that_cannot_open_leaves_the_current_store_working(ip: InteractiveShell, env: Path,
                                                                   tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "sub" / "x.duckdb"
    error, text = cell(ip, "%agent sessions")
    assert error is None
    usage_error(ip, f"%agent config db={bad}", "db not changed", "cannot create the database folder")
    assert magics(ip).db in (None, "") or magics(ip).db == str(env)
    error, text = cell(ip, "%agent sessions")
    assert error is None and "0 sessions in" in text and "closed" not in text
    # %config cannot be refused at once: the next command says why, and setting a good path recovers
    cell(ip, f"%config AgentMagics.db = {str(bad)!r}")
    error, text = cell(ip, "%agent sessions")
    assert error is None and "cannot create the database folder" in text and len(text.strip().splitlines()) == 1
    good = tmp_path / "good.duckdb"
    for path in (env, good):
        error, text = cell(ip, f"%config AgentMagics.db = {str(path)!r}")
        error, text = cell(ip, "%agent sessions")
        assert error is None and f"sessions in {path}" in text and "closed" not in text


# -- images and prompt size -----------------------------------------------------------------------------
def test_n1_images_are_checked_by_content_and_size(ip: InteractiveShell, tmp_path: Path) -> None:
    fake = tmp_path / "fake.png"
    fake.write_text("hello, I am text")
    usage_error(ip, f"%agent --image {fake} describe it", "not an image file", "PNG, JPEG, GIF or WebP")
    huge = tmp_path / "huge.png"
    with huge.open("wb") as fh:
        fh.write(PNG_1PX)
        fh.truncate(MAX_IMAGE_BYTES + 1)
    usage_error(ip, f"%agent --image {huge} describe it", "image too large", "20.0 MB")
    renamed = tmp_path / "pixel.txt"  # the content decides, not the name
    renamed.write_bytes(PNG_1PX)
    part, record = __import__("mxclaw_nb.agent", fromlist=["image_part"]).image_part(renamed)
    assert record["mime"] == "image/png" and part["image_url"]["url"].startswith("data:image/png;base64,")
    assert sniff_image(b"\xff\xd8\xff\xe0") == "image/jpeg" and sniff_image(b"GIF89a") == "image/gif"
    assert sniff_image(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp" and sniff_image(b"%PDF-1.7") is None
    assert sessions_stored(ip) == 0


def test_n1_prompts_over_the_limit_are_refused_with_their_size(ip: InteractiveShell, server: TestServer) -> None:
    big = "x" * (10 * 1_048_576)
    usage_error(ip, "%%agent\n" + big, "the prompt is 10.0 MB (10,485,760 bytes)", "1.0 MB (1,048,576 bytes)",
                "nothing was stored or sent")
    usage_error(ip, "%agent " + "y " * 600_000, "the prompt is 1.1 MB")  # the line form too, quickly
    assert server.requests == [] and sessions_stored(ip) == 0
    cell(ip, "%agent config max_prompt_bytes=20000000")
    server.enqueue_text("read it all")
    error, text = cell(ip, "%%agent\n" + "z" * 2_000_000)
    assert error is None and "read it all" in text and len(user_texts(server)[0]) == 2_000_000


def test_n1_other_settings_and_replay_options_are_one_line_errors(ip: InteractiveShell, tmp_path: Path) -> None:
    for assignment, needle in (("workspace=/no/such/folder", "workspace must be an existing folder"),
                               ("counter=foo", "counter must be one of auto, estimate, calibrated"),
                               ("live=maybe", "live must be true or false (got 'maybe')"),
                               ("approval=sometimes", "approval must be one of ask, allow, deny")):
        usage_error(ip, f"%agent config {assignment}", needle, "nothing was changed")
    error, _ = cell(ip, "%config AgentMagics.workspace = '/no/such/folder'")
    assert error is None and magics(ip).workspace is None
    usage_error(ip, "%agent help sesions", "did you mean `%agent help sessions`?")
    for option, needle in (("--window 0", "context_window_tokens must be an integer >= 1,000"),
                           ("--ratio 5", "threshold_ratio must be"), ("--tail -1", "keep_recent_tokens must be")):
        usage_error(ip, f"%agent replay {option}", needle)
