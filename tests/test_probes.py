"""SPEC S4 probe recall: probes derived from a transcript, asked over real HTTP through each policy's view.

The model is the shipped test server (`mxclaw_nb.demo.server`) with answers scripted by question text:
some right, some wrong, one that varies per run and one that answers only what its view still shows,
so the scores, the presence beside them and the variance over runs are known exactly.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from mxclaw_nb.analysis import derive_probes, evaluate_probes, score_answer, summarize_probes
from mxclaw_nb.analysis.probes import FULL, PROBE_PROMPT, last_call, policy_view, view_text
from mxclaw_nb.analysis.replay import replay
from mxclaw_nb.demo.server import TestServer


def _call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _asst(cid: str, name: str, args: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [_call(cid, name, args)]}


def _tool(cid: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


FILL = "\n".join(f"    # filler line to make this output long, item {'x' * (i % 7)}" for i in range(120))
TRANSCRIPT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "The build is broken: fix src/app/calc.py and keep the benchmark fast."},
    _asst("c1", "read_file", {"path": "tests/test_calc.py"}),
    _tool("c1", "benchmark: 48213 ops per second\n" + FILL),
    _asst("c2", "bash", {"command": "python -m pytest -q"}),
    _tool("c2", 'Traceback (most recent call last):\n  File "calc.py", line 3, in div\n'
          "ZeroDivisionError: division by zero\n" + FILL),
    _asst("c3", "edit_file", {"path": "src/app/calc.py", "old": "a / b", "new": "a / b if b else 0"}),
    _tool("c3", "edited"),
    {"role": "assistant", "content": "Fixed the division."},
    {"role": "user", "content": "Now add a changelog entry to docs/CHANGES.md."},
    _asst("c4", "write_file", {"path": "docs/CHANGES.md", "content": "- fix division by zero"}),
    _tool("c4", "written"),
    _asst("c5", "bash", {"command": "git diff --stat"}),
]
# Compacts the two long tool outputs into placeholders by the last call (micro stage): the measured number
# and the error are gone from its view, the paths are not.
SMALL = {"window": 3000, "tail": 300, "name": "3k"}


def test_s4_probes_are_derived_deterministically_with_their_sources() -> None:
    probes = derive_probes(TRANSCRIPT)
    assert probes == derive_probes([dict(m) for m in TRANSCRIPT])
    got = {p.id: (p.expected, p.source) for p in probes}
    assert got == {
        "recall/path_read": ("tests/test_calc.py", 2),
        "recall/path_edited": ("src/app/calc.py", 6),
        "artifact/number": ("48213", 3),
        "artifact/file_created": ("docs/CHANGES.md", 10),
        "continuation/last_request": ("docs/CHANGES.md", 9),
        "continuation/next_step": ("git diff --stat", 12),
        "decision/last_error": ("ZeroDivisionError", 5),
        "decision/error_action": ("src/app/calc.py", 6),
    }
    assert {p.at for p in probes} == {12} and last_call(TRANSCRIPT) == 12
    number = next(p for p in probes if p.kind == "number")
    assert '"benchmark: ___ ops per second"' in number.question and "48213" not in number.question
    assert "first call to the `read_file` tool" in probes[0].question
    # asked earlier (at the edit): only what was there by then, and the next step is the edit itself
    early = {p.id: p.expected for p in derive_probes(TRANSCRIPT, at=6)}
    assert early["continuation/next_step"] == "src/app/calc.py" and "artifact/file_created" not in early
    assert early["continuation/last_request"] == "src/app/calc.py"
    with pytest.raises(ValueError, match="assistant message"):
        derive_probes(TRANSCRIPT, at=3)


def test_s4_probes_of_ids_and_of_parallel_calls() -> None:
    two = {"role": "assistant", "content": None, "tool_calls": [
        _call("a", "bash", {"command": "ls"}), _call("b", "bash", {"command": "wc -l notes"})]}
    msgs = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Please cancel reservation MDCLVA for user emma_kim_9957."},
        _asst("c1", "get_reservation_details", {"reservation_id": "MDCLVA"}),
        _tool("c1", '{"status": "ok"}'),
        two, _tool("a", "notes"), _tool("b", "lines counted: 3141 in notes"),
        _asst("c2", "cancel_reservation", {"reservation_id": "MDCLVA"}),
    ]
    got = {p.id: p for p in derive_probes(msgs)}
    assert got["recall/tool_value"].expected == "MDCLVA"
    assert "`reservation_id`" in got["recall/tool_value"].question
    assert got["continuation/last_request"].expected == "MDCLVA"
    assert got["continuation/next_step"].expected == "MDCLVA"
    number = got["artifact/number"]
    assert (number.expected, number.source) == ("3141", 6) and "2nd call to the `bash` tool" in number.question


def test_s4_score_is_a_normalised_whole_word_match() -> None:
    assert score_answer("It was  `docs/changes.md`.", "docs/CHANGES.md")
    assert score_answer("bash: git diff\n  --stat", "git diff --stat")
    assert not score_answer("148213", "48213") and not score_answer("48,213", "48213")
    assert score_answer("The number was 48213.", "48213")
    assert not score_answer(None, "x") and not score_answer("I don't know", "ZeroDivisionError")


def test_s4_policy_view_is_the_view_replay_measures(shared_transcripts: list[dict]) -> None:
    policy = {"window": 4000, "tail": 1000}
    checked = 0
    for conv in shared_transcripts[::40]:
        msgs = conv["messages"]
        rows = replay(msgs, policy, facts=False)
        calls = [i for i, m in enumerate(msgs) if i > 0 and m.get("role") == "assistant"]
        for i, after in zip(calls, rows["after_tokens"], strict=True):
            assert policy_view(msgs, policy, i).after_tokens == after
            checked += 1
    assert checked > 50


def _reader(messages: list[dict]) -> str:
    """A model that answers the last-error probe only when its view still shows the error."""
    seen = view_text(messages)  # the probe's own question does not name the error
    return "ZeroDivisionError" if "ZeroDivisionError" in seen else "I don't know"


ANSWERS = {
    "Which path did the first call to the `read_file` tool": "tests/test_calc.py",  # right
    "Which file did the first call to the `edit_file` tool": "src/app/main.py",  # wrong
    # asked in order run 1: full, 3k; run 2: full, 3k; run 3: full, 3k
    "What number stood where ___ is": ["48213", "48213", "48213", "148213", "48,213", "I don't know"],
    "call to the `write_file` tool": "docs/changes.md",  # right (case-insensitive)
    "most recent message": "Add a changelog entry to  docs/CHANGES.md",  # right (whitespace-insensitive)
    "What is the next step": "bash: git diff   --stat",  # right, though no view shows it
    "What was the last error": _reader,  # right only where the error is still present
    "right after the last error": "I re-ran the tests",  # wrong
}


def test_s4_probe_recall_end_to_end_over_http_with_scripted_answers() -> None:
    with TestServer(answers=ANSWERS) as srv:
        answers = evaluate_probes([("fixture", TRANSCRIPT)], [SMALL], base_url=srv.base_url, model="test-model",
                                  api_key="k", runs=3)
        requests = list(srv.requests)
    assert len(requests) == 8 * 2 * 3 == len(answers)
    assert answers["error"].isna().all()
    # every request is a policy's view of messages[:12] plus the probe as the last user message
    small_view = policy_view(TRANSCRIPT, SMALL, 12)
    sizes = {len(r["messages"]) for r in requests}
    assert sizes == {12 + 1, len(small_view.messages) + 1}
    last = requests[0]["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith(PROBE_PROMPT.split("{")[0])
    assert "tools" not in requests[0]

    by = answers.set_index(["policy", "run", "kind"])["correct"]
    assert [by[(FULL, r, "number")] for r in (1, 2, 3)] == [1.0, 1.0, 0.0]
    assert [by[("3k", r, "number")] for r in (1, 2, 3)] == [1.0, 0.0, 0.0]
    assert by[(FULL, 1, "last_error")] == 1.0 and by[("3k", 1, "last_error")] == 0.0
    first = answers[answers["run"] == 1].groupby("policy", observed=True)
    assert first["compacted"].max().to_dict() == {FULL: 0, "3k": 2}  # the two long outputs became placeholders
    present = answers[answers["run"] == 1].set_index(["policy", "kind"])["present"]
    assert not present[(FULL, "next_step")] and by[(FULL, 1, "next_step")] == 1.0  # recall without presence

    table = summarize_probes(answers)
    got = {(str(r.policy), r.type): (r.probes, r.runs, r.fact_survival, r.presence, r.recall, r.recall_std)
           for r in table.itertuples()}
    third = math.sqrt(1 / 12)  # sample std of [1, 1, .5] (and of [1, .5, .5])
    eighth = math.sqrt(((1 / 24) ** 2 * 2 + (1 / 12) ** 2) / 2)  # of [6/8, 6/8, 5/8] (and of [5/8, 4/8, 4/8])
    want = {
        (FULL, "recall"): (2, 3, 1.0, 1.0, 0.5, 0.0),
        (FULL, "artifact"): (2, 3, 1.0, 1.0, 5 / 6, third),
        (FULL, "continuation"): (2, 3, 1.0, 0.5, 1.0, 0.0),
        (FULL, "decision"): (2, 3, 1.0, 1.0, 0.5, 0.0),
        (FULL, "all"): (8, 3, 1.0, 7 / 8, 17 / 24, eighth),
        ("3k", "recall"): (2, 3, 0.25, 1.0, 0.5, 0.0),
        ("3k", "artifact"): (2, 3, 0.25, 0.5, 2 / 3, third),
        ("3k", "continuation"): (2, 3, 0.25, 0.5, 1.0, 0.0),
        ("3k", "decision"): (2, 3, 0.25, 0.5, 0.0, 0.0),
        ("3k", "all"): (8, 3, 0.25, 5 / 8, 13 / 24, eighth),
    }
    assert got.keys() == want.keys()
    for key, values in want.items():
        assert got[key] == pytest.approx(values), key
    assert list(table["policy"].cat.categories) == [FULL, "3k"]
    assert (table["errors"] == 0).all() and "judge_recall" not in table


def test_s4_judge_is_optional_and_labelled_and_failed_calls_are_not_wrong() -> None:
    short = TRANSCRIPT[:4] + [_asst("c9", "bash", {"command": "ls"})]
    # keys are tried in order: the judge's prompt quotes the probe's question, so its key comes first
    script = {"Reply with exactly YES or NO": ["YES", "NO"], "Question:": "tests/test_calc.py"}
    with TestServer(answers=script) as srv:
        answers = evaluate_probes([("fixture", short)], [SMALL], base_url=srv.base_url, model="test-model",
                                  judge=True)
        judged = [r for r in srv.requests if "Expected answer:" in r["messages"][-1]["content"]]
        srv.enqueue_error(400, "bad request")
        failed = evaluate_probes([short], [SMALL], full=False, base_url=srv.base_url, model="test-model")
    assert len(judged) == len(answers) == 2 * len(derive_probes(short)) == 8
    assert len(judged[0]["messages"]) == 1  # the judge sees the question, expected and given answer only
    assert answers.attrs["judge"] and {"judge_reply", "judge_correct"} <= set(answers.columns)
    assert answers["judge_correct"].tolist()[:2] == [1.0, 0.0]
    table = summarize_probes(answers)
    assert {"judge_recall", "judge_recall_std", "recall"} <= set(table.columns)
    assert table.set_index(["policy", "type"]).loc[(FULL, "recall"), "recall"] == 1.0
    assert failed["error"].notna().sum() == 1 and failed["correct"].isna().sum() == 1
    assert summarize_probes(failed).set_index("type").loc["all", "errors"] == 1


def test_s4_parallel_asks_score_the_same_and_a_missing_model_is_an_error() -> None:
    script = {k: v for k, v in ANSWERS.items() if isinstance(v, str) or callable(v)}
    script["What number stood where ___ is"] = "48213"
    with TestServer(answers=script) as srv:
        one = evaluate_probes([TRANSCRIPT], [SMALL], base_url=srv.base_url, model="test-model")
        four = evaluate_probes([TRANSCRIPT], [SMALL], base_url=srv.base_url, model="test-model", workers=4)
        url = srv.base_url
    cols = ["policy", "probe_id", "present", "reply", "correct"]
    pd.testing.assert_frame_equal(one[cols], four[cols])
    with TestServer(answers=script) as srv:  # the same views sent as plain text: same answers, one message each
        text = evaluate_probes([TRANSCRIPT], [SMALL], base_url=srv.base_url, model="test-model", as_text=True)
        sent = [r["messages"] for r in srv.requests]
    pd.testing.assert_frame_equal(one[cols], text[cols])
    assert {len(m) for m in sent} == {1} and "-> edit_file(" in sent[0][0]["content"]
    assert one.attrs["model"] == f"test-model @ {url}"
    with pytest.raises(ValueError, match="no model is configured"):
        evaluate_probes([TRANSCRIPT], [SMALL])


def test_s4_server_scripts_answers_by_question_text(test_server: TestServer) -> None:
    from mxclaw_nb.provider.client import OpenAIProvider

    test_server.answers = {"colour": ["red", "blue"], "size": lambda msgs: f"{len(msgs)} messages"}
    test_server.enqueue_text("queued first")
    p = OpenAIProvider(base_url=test_server.base_url, api_key="k", model="test-model")

    def ask(text: str) -> str:
        return p.complete([{"role": "system", "content": "colour"}, {"role": "user", "content": text}],
                          None).message["content"]

    assert [ask("what colour?"), ask("what colour?"), ask("colour again"), ask("colour more")] == [
        "queued first", "red", "blue", "blue"]
    assert ask("what size?") == "2 messages" and ask("anything else") == "ok"
    assert test_server.asked == {"colour": 3, "size": 1}


def test_s4_probe_tables_are_dataframes() -> None:
    from mxclaw_nb.analysis.probes import probe_table

    t = probe_table(derive_probes(TRANSCRIPT))
    assert isinstance(t, pd.DataFrame) and list(t["type"]).count("recall") == 2


def test_r2_c13_probe_evaluation_can_count_what_the_recall_tool_reaches() -> None:
    """R2: with recall=True a probe whose answer is gone from the view but whose source message a placeholder names
    (`recall #seq`, C13) is answerable; without the option the columns and figures are those of before."""
    with TestServer(answers=ANSWERS) as srv:
        plain = evaluate_probes([("fixture", TRANSCRIPT)], [SMALL], base_url=srv.base_url, model="test-model",
                                api_key="k")
        with_recall = evaluate_probes([("fixture", TRANSCRIPT)], [SMALL], base_url=srv.base_url, model="test-model",
                                      api_key="k", recall=True)
    assert "recallable" not in plain and "answerable" not in summarize_probes(plain)
    pd.testing.assert_frame_equal(with_recall.drop(columns=["recallable", "answerable", "reply", "correct"]),
                                  plain.drop(columns=["reply", "correct"]))
    got = with_recall.set_index(["policy", "kind"])
    # the 3k view replaced the benchmark output (message 3) and the traceback (message 5) by placeholders that
    # name them: the number and the error are not present but recallable
    for kind, source in (("number", 3), ("last_error", 5)):
        assert got.loc[("3k", kind), "source"] == source
        assert not got.loc[("3k", kind), "present"] and got.loc[("3k", kind), "recallable"], kind
        assert got.loc[("3k", kind), "answerable"]
        assert not got.loc[(FULL, kind), "recallable"] and got.loc[(FULL, kind), "answerable"]  # present there
    # a probe present nowhere and named by nothing stays unanswerable (the next step is after the view)
    assert not got.loc[("3k", "next_step"), "answerable"]
    view = policy_view(TRANSCRIPT, SMALL, 12)
    assert sum("recall #" in str(m.get("content")) for m in view.messages) == 2
    table = summarize_probes(with_recall).set_index(["policy", "type"])
    assert table.loc[("3k", "artifact"), "presence"] == 0.5 and table.loc[("3k", "artifact"), "answerable"] == 1.0
    assert table.loc[("3k", "decision"), "answerable"] == 1.0
    assert table.loc[(FULL, "all"), "answerable"] == table.loc[(FULL, "all"), "presence"] == 7 / 8
