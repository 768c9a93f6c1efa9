"""One settings table (mxclaw_nb.settings.SETTINGS): the traits, `Agent(...)`, `%agent help`, `%agent config` and
the README agree with it, so a new setting is one row (a `Settings` field), its README line and the code that
uses it (SPEC N1, DESIGN: one owner)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from mxclaw_nb import Agent
from mxclaw_nb.notebook.commands import HELP
from mxclaw_nb.notebook.magics import AgentMagics
from mxclaw_nb.settings import CONFIG_KEYS, LIMITS, SETTING, SETTINGS, Settings, describe_setting

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
# Agent(...) arguments that are not settings: objects and per-call wiring, or a setting's other form
NOT_SETTINGS = {"settings", "session_id", "provider", "approver", "home", "env", "summarize", "api_key", "namespace",
                "clock"}  # E4: the clock that says whether a cached prefix is still warm (tests pass their own)


def _section(title: str) -> list[str]:
    """The table rows of the README section headed `title`."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip("# ") == title and line.startswith("#"))
    rows, body = [], False
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        body = body or line.startswith("|---")
        if body and line.startswith("| `"):
            rows.append(line)
    return rows


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_n1_traits_are_the_table() -> None:
    traits = AgentMagics.class_traits(config=True)
    assert set(traits) == set(CONFIG_KEYS) == {s.name for s in SETTINGS if s.trait}
    for name in CONFIG_KEYS:
        setting, trait = SETTING[name], traits[name]
        assert trait.default() == setting.default, name
        assert trait.help == setting.help, name
        assert trait.allow_none == setting.allow_none, name
        if setting.choices:
            assert tuple(trait.values) == setting.choices, name


def test_n1_agent_arguments_agree_with_the_table() -> None:
    """Agent(...)'s signature (help(), Shift-Tab) is made from the table: every Agent setting, its default."""
    params = {n: p for n, p in inspect.signature(Agent).parameters.items() if n != "self"}
    for setting in SETTINGS:
        if setting.agent:
            assert setting.name in params, f"Agent(...) lacks the setting {setting.name}"
            assert params[setting.name].default == setting.default, setting.name
        else:
            assert setting.name not in params, setting.name
    assert set(params) - {s.name for s in SETTINGS if s.agent} == NOT_SETTINGS


def _no_model(monkeypatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_CONTEXT_WINDOW", "MXCLAW_SHELL_ENV"):
        monkeypatch.delenv(name, raising=False)


def test_n1_agent_takes_one_settings_object_and_keyword_overrides(tmp_path, monkeypatch) -> None:
    _no_model(monkeypatch)
    base = Settings(approval="allow", max_iterations=3, strategy="masking:keep_last=5", shell_env="FOO_HOME")
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.max_iterations = 4  # type: ignore[misc]
    agent = Agent(tmp_path, db=tmp_path / "a.duckdb", settings=base, max_iterations=5, context_window_tokens=12_000)
    try:
        s = agent.settings
        assert (s.approval, s.max_iterations, s.workspace, s.db) == ("allow", 5, str(tmp_path),
                                                                  str(tmp_path / "a.duckdb"))
        assert base.max_iterations == 3  # the object passed in is never changed
        # ... and every part of the agent runs on it: the policy, the loop bound, the shell's variables
        assert agent.policy.context_window_tokens == 12_000 and agent.policy.strategy.name == "masking"
        assert agent.max_iterations == 5 and agent.approval == "allow" and agent.shell_env == ("FOO_HOME",)
        assert agent.workspace == tmp_path.resolve()
        # the tools get the same object (a new tool setting is read there: ctx.settings.<name>)
        assert agent._tool_context().settings is agent.settings
        result = agent.run("hello")  # the demo model answers; the loop reads its bound from the same object
        assert result.status == "ok" and result.iterations <= s.max_iterations
    finally:
        agent.close()
    # the Python forms of today's keywords: a list of names for shell_env, a Path for workspace and db
    agent = Agent(workspace=tmp_path, db=str(tmp_path / "a.duckdb"), shell_env=["BAR_HOME"])
    try:
        assert agent.shell_env == ("BAR_HOME",) and agent.settings.shell_env == "BAR_HOME"
        assert agent.settings == Settings(workspace=str(tmp_path), db=str(tmp_path / "a.duckdb"),
                                          shell_env="BAR_HOME")
    finally:
        agent.close()


def test_n1_unknown_keywords_are_refused_with_the_near_names(tmp_path, monkeypatch) -> None:
    _no_model(monkeypatch)
    db = tmp_path / "never.duckdb"
    for keyword, needle in (("max_iteration", "did you mean max_iterations"),
                            ("window", "did you mean context_window_tokens"),
                            ("aproval", "approval"),
                            ("zzz", "the settings are model, base_url,"),
                            ("live", "it is a notebook setting (%agent config live=...")):
        with pytest.raises(TypeError, match="Agent\\(\\)") as err:
            Agent(db=str(db), **{keyword: 1})
        assert needle in str(err.value), str(err.value)
    # the Settings dataclass itself names the near fields too (N1), keeping its signature (help(), Shift-Tab)
    for keyword, needle in (("windw", "did you mean context_window_tokens?"), ("max_iteration", "max_iterations"),
                            ("strem", "did you mean stream or max_stream_line_bytes?"),
                            ("zzz", "the settings are model, base_url, api_key_env,")):
        with pytest.raises(TypeError, match=f"^Settings\\(\\) got an unexpected keyword argument '{keyword}'; "):
            Settings(**{keyword: 1})
        with pytest.raises(TypeError, match=needle.replace("?", "\\?")):
            Settings(**{keyword: 1})
        with pytest.raises(TypeError, match=needle.replace("?", "\\?")):
            dataclasses.replace(Settings(), **{keyword: 1})
    with pytest.raises(TypeError, match="did you mean context_window_tokens"):
        Settings(windw=1)  # type: ignore[call-arg]
    assert list(inspect.signature(Settings).parameters) == [f.name for f in dataclasses.fields(Settings)]
    assert not db.exists(), "a refused keyword opens nothing"


def test_n1_settings_refuse_what_the_magics_refuse() -> None:
    """One check for Settings(...), Agent(...), %config and %agent config: the same sentence (N1)."""
    for name, limit in LIMITS.items():
        bad = (limit.low - 1) if limit.low is not None else -1
        with pytest.raises(ValueError) as err:
            Settings(**{name: bad})
        assert str(err.value) == f"{name} must be {describe_setting(name)} (got {bad!r})"
    for setting in SETTINGS:
        if setting.choices:
            with pytest.raises(ValueError, match=f"{setting.name} must be one of {', '.join(setting.choices)} "
                                                 "\\(got 'nope'\\)"):
                Settings(**{setting.name: "nope"})
    with pytest.raises(ValueError, match="strategy: "):
        Settings(strategy="no-such-strategy")


def test_n1_help_lists_every_setting_with_its_default_and_range() -> None:
    for setting in SETTINGS:
        lines = [line for line in HELP.splitlines() if line.startswith(f"  {setting.name} ")]
        if not setting.trait:
            assert not lines, setting.name
            continue
        assert len(lines) == 1, setting.name
        assert setting.help in lines[0]
        if setting.limit is not None:
            assert describe_setting(setting.name) in lines[0]
        if setting.env:
            assert f"${setting.env}" in lines[0]


def test_n1_readme_settings_table_is_the_table() -> None:
    rows = {_cells(r)[0].strip("`"): _cells(r) for r in _section("Settings")}
    assert list(rows) == list(CONFIG_KEYS), "README's settings table: one row per setting, in table order"
    for name, (_, default, meaning) in rows.items():
        setting = SETTING[name]
        if setting.env:
            assert f"${setting.env}" in default, (name, default)
        elif setting.default is not None:
            shown = re.sub(r"[`,]", "", default)
            plain = f"{setting.default:g}" if isinstance(setting.default, float) else str(setting.default)
            assert shown == plain or (setting.default == "" and "empty" in default), (name, default)
        if name in LIMITS:
            assert describe_setting(name).replace(" (or unset)", "") in meaning, name


def test_n1_readme_configuration_table_names_agent_arguments_and_environment() -> None:
    """The Configuration table lists the settings with a second source or form (an environment variable, an
    Agent-only setting) and the key; its prose names the notebook-only settings. Any other setting is one row
    of the Settings table, so a new one is one README line."""
    params = inspect.signature(Agent).parameters
    seen = set()
    for row in _section("Configuration"):
        argument, trait, env, _ = _cells(row)
        argument = argument.strip("`")
        assert argument in params, argument
        if argument == "api_key":  # the key itself; the setting is the *name* of its variable
            assert trait.startswith("`api_key_env`")
            continue
        setting = SETTING[argument]
        seen.add(argument)
        assert trait.split()[0].strip("`") == (argument if setting.trait else "—"), (argument, trait)
        assert env.strip("`") == (setting.env or "—"), (argument, env)
    assert seen == {s.name for s in SETTINGS if s.agent and (s.env or not s.trait)}
    prose = README.split("## Configuration", 1)[1].split("| `Agent` argument", 1)[0]
    notebook_only = {s.name for s in SETTINGS if not s.agent} - {"api_key_env"}
    named = set(re.findall(r"notebook-only ([^;]*);", prose)[0].replace(" and ", ", ").replace("`", "").split(", "))
    assert named == notebook_only, named


@pytest.fixture
def ip():
    shell = InteractiveShell.instance()  # the process's one shell (a singleton), as in test_magics
    shell.config.pop("AgentMagics", None)
    shell.run_line_magic("load_ext", "mxclaw_nb")
    yield shell
    shell.run_line_magic("unload_ext", "mxclaw_nb")
    shell.config.pop("AgentMagics", None)


def test_n1_config_shows_every_setting_with_the_tables_help(ip, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "s.duckdb"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL"):
        monkeypatch.delenv(name, raising=False)
    df = ip.run_line_magic("agent", "config")
    assert list(df["setting"]) == list(CONFIG_KEYS)
    assert list(df["help"]) == [SETTING[k].help for k in CONFIG_KEYS]
