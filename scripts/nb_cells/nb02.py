"""Cells of notebooks/02-context-management-tour.ipynb: each pipeline stage with a small live example."""

# ruff: noqa: E501 - cell code is dedented by 8 columns in the notebook, where it fits in 120

from __future__ import annotations

from nb_cells import CHECK, SETUP_NOTE, code, md, setup

CELLS = [
    md(
        """
        # 02 · Context management, stage by stage

        Before **every** model call, mxclaw_nb rebuilds the *request view* (what the model will see) from the
        stored transcript (which is never changed). The pipeline (SPEC C0) is:

        ```
        repair -> estimate -> (under threshold: send unchanged) -> safe tail -> align tool pairs
               -> microcompact old tool outputs -> (still over: structured summary)
               -> (compactor raised: fallback window)      + one prompt-too-long retry (C9)
        ```

        This notebook builds each stage from a tiny transcript you can read, shows the result as a DataFrame
        and in the widgets (context gauge and compaction inspector), and ends with the worked example from
        the design article (64k window, 0.8 ratio, 8k tail). Everything runs offline: the engine is pure
        Python, and the one section that needs a "provider" uses a local test server on 127.0.0.1.

        Unless marked otherwise, token figures are **estimates** ("est."), computed with the conservative C1 rule,
        not a tokenizer.
        """
    ),
    SETUP_NOTE,
    setup(),
    code(
        """
        import json

        import pandas as pd
        from IPython.display import display

        from mxclaw_nb.context import (ContextPolicy, build_request_view, estimate_text, estimate_tokens,
                                       is_prompt_too_long, layer_tokens, placeholder_for,
                                       repair_tool_call_transcript, safe_tail_start)
        from mxclaw_nb.context.tokens import count_cjk
        from mxclaw_nb.widgets import CompactionInspector, ContextGauge, after_frame, before_frame, from_view

        pd.set_option("display.max_colwidth", 70)


        def call(call_id, name, **args):
            \"\"\"An assistant tool call in the OpenAI Chat Completions shape.\"\"\"
            return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


        def table(view, which="before"):
            \"\"\"The inspector's table: `before` (transcript, what happened to each) or `after` (what was sent).\"\"\"
            data = from_view(view)
            return before_frame(data) if which == "before" else after_frame(data)


        def show(view):
            \"\"\"The context gauge and the compaction inspector of one request view.\"\"\"
            display(ContextGauge(view), CompactionInspector(view))
        """
    ),
    md(
        """
        ## 1 · Estimate (C1)

        Per message: `CJK characters + ceil(other characters / 4) + 2000 per image + ceil(len(tool-call JSON) / 4)`.
        Chinese, Japanese and Korean characters count one token each; Latin text about four characters per
        token. Only what is *sent* counts: display-only fields such as `reasoning` are free.
        """
    ),
    code(
        """
        samples = {
            "English": {"role": "user", "content": "Fix the failing test in tests/test_io.py, please."},
            "Chinese": {"role": "user", "content": "修复 CI 中的 SQLite FTS 测试"},
            "Japanese + Korean": {"role": "user", "content": "テストを直してください。테스트를 고쳐 주세요."},
            "full-width forms": {"role": "user", "content": "（注意）：ＡＢＣ！"},
            "text + one image": {"role": "user", "content": [
                {"type": "text", "text": "What is in this screenshot?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            "one tool call": {"role": "assistant", "content": None,
                              "tool_calls": [call("c1", "read_file", path="src/io.py")]},
            "reasoning (not sent)": {"role": "assistant", "content": "Done.", "reasoning": "x" * 4_000},
        }
        rows = []
        for label, message in samples.items():
            content = message["content"]
            text = content if isinstance(content, str) else " ".join(
                p.get("text", "") for p in content or [] if p.get("type") == "text")
            rows.append({"message": label, "chars": len(text), "CJK chars": count_cjk(text),
                         "est. tokens": estimate_tokens(message)})
        pd.DataFrame(rows).set_index("message")
        """,
        CHECK,
    ),
    md(
        """
        The estimate is deliberately simple, and it is *not* exact. Where the offline `o200k_base` encoding is
        available, compare: on code, JSON and logs the estimate is often low (SPEC T: about 72% of real agent
        messages), which is why mxclaw_nb can switch to a counter calibrated on the provider's reported usage (T2/T3).
        """
    ),
    code(
        """
        from mxclaw_nb.tokenizers import exact_counter

        exact = exact_counter("o200k_base")
        if exact is None:
            print("o200k_base is not available offline here: skipping the comparison")
        else:
            extra = {"JSON log line": {"role": "tool", "tool_call_id": "c1",
                                       "content": json.dumps({"ts": "2026-01-01T00:00:00Z", "level": "ERROR",
                                                              "msg": "disk full", "path": "/var/lib/x"})}}
            rows = [{"message": label, "est. tokens": estimate_tokens(m), "exact o200k_base": exact.count(m)}
                    for label, m in {**samples, **extra}.items()]
            display(pd.DataFrame(rows).set_index("message"))
        """
    ),
    md(
        """
        ## 2 · Threshold (C2)

        `threshold = floor(window × ratio)`. At or under it, the request view **is** the (repaired) transcript:
        no summary, no event.
        """
    ),
    code(
        """
        policy = ContextPolicy(context_window_tokens=2_000, threshold_ratio=0.8, keep_recent_tokens=300)
        small = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "List the files of the project."},
            {"role": "assistant", "content": None, "tool_calls": [call("ls-1", "list_dir", path=".")]},
            {"role": "tool", "tool_call_id": "ls-1", "content": "README.md\\nsrc/\\ntests/"},
            {"role": "assistant", "content": "Three entries: README.md, src/ and tests/."},
        ]
        view = build_request_view(small, policy)
        print(f"threshold = floor(2,000 x 0.8) = {policy.threshold:,} est. tokens")
        print(f"request: {view.before_tokens} est. tokens -> stage {view.stage!r}")
        print("sent exactly the transcript:", view.messages == small, "· compaction event:", view.event())
        """,
        CHECK,
    ),
    code("ContextGauge(view)  # far below the red threshold line: nothing to do"),
    md(
        """
        ## 3 · Safe tail (C3)

        Over the threshold, the engine first decides which recent messages stay verbatim: walking back from the
        end, a message joins the tail while the running total stays within `keep_recent_tokens`. Never "the last N
        messages". Two exceptions may exceed the budget: **(a)** the last message is always kept, and **(b)** a tail
        that would start on a tool result grows back to the assistant message that issued the call, because a split
        call/result pair is rejected by providers.
        """
    ),
    code(
        """
        conv = [
            {"role": "user", "content": "Find why the import fails. " + "u" * 300},
            {"role": "assistant", "content": "Reading the module.", "tool_calls": [call("r1", "read_file", path="src/io.py")]},
            {"role": "tool", "tool_call_id": "r1", "content": "x" * 2_000},
            {"role": "assistant", "content": "The module imports a missing name. " + "a" * 600},
            {"role": "user", "content": "Fix it and run the tests."},
            {"role": "assistant", "content": "Running the tests.", "tool_calls": [call("t1", "bash", command="pytest -q")]},
            {"role": "tool", "tool_call_id": "t1", "content": "." * 1_600},
        ]
        tokens = [estimate_tokens(m) for m in conv]
        tails = pd.DataFrame({"role": [m["role"] for m in conv], "est. tokens": tokens}).rename_axis("#")
        for budget in (100, 500, 1_000):
            start = safe_tail_start(conv, tokens, budget)
            tails[f"tail @ {budget:,}"] = ["tail" if i >= start else "" for i in range(len(conv))]
            print(f"keep_recent_tokens={budget:>5,}: tail starts at #{start}, {sum(tokens[start:]):,} est. tokens")
        tails
        """,
        CHECK,
    ),
    md(
        """
        With a 100-token budget the last message (400 est. tokens) is kept anyway (a), and since it is a tool
        result the tail grows back to the `bash` call that produced it (b). With 500 the tail adds the short user
        request #4 but not the 159-token assistant message #3; with 1,000 it takes #3 too and stops before the
        500-token tool result #2.
        """
    ),
    md(
        """
        In a real request view the tail is where compaction stops: the inspector's header says where it starts,
        and every message from there on is `kept`. Here with a 1,000-token window and a 500-token tail budget:
        """
    ),
    code(
        """
        view = build_request_view(conv, ContextPolicy(context_window_tokens=1_000, keep_recent_tokens=500))
        print(f"stage {view.stage!r} · tail starts at #{view.tail_start}")
        CompactionInspector(view)
        """
    ),
    md(
        """
        ## 4 · Repair (C4)

        Interrupted kernels and imported logs leave broken histories: a call without a result, a result whose call
        is gone, a duplicate result. Repair fixes the **view** before anything else (the stored transcript keeps
        its rows): a missing result gets a synthetic "interrupted" failure, orphans and duplicates are dropped.
        """
    ),
    code(
        """
        broken = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Read the config and run the tests."},
            {"role": "assistant", "content": None,
             "tool_calls": [call("a1", "read_file", path="config.toml"), call("a2", "bash", command="pytest -q")]},
            {"role": "tool", "tool_call_id": "a1", "content": "[tool]\\nname = 'demo'"},
            # the kernel died here: a2 never got a result
            {"role": "user", "content": "Go on, please."},
            {"role": "tool", "tool_call_id": "zz", "content": "a result whose call does not exist"},
            {"role": "assistant", "content": None, "tool_calls": [call("b1", "bash", command="pytest -q")]},
            {"role": "tool", "tool_call_id": "b1", "content": "3 passed"},
            {"role": "tool", "tool_call_id": "b1", "content": "3 passed (duplicate)"},
        ]
        repaired = repair_tool_call_transcript(broken)


        def ids(messages):
            return [m.get("tool_call_id") or ",".join(c["id"] for c in m.get("tool_calls") or []) or "" for m in messages]


        print(f"{len(broken)} messages in, {len(repaired)} out; the input list is untouched: {len(broken) == 9}")
        pd.DataFrame({"role": [m["role"] for m in repaired], "ids": ids(repaired),
                      "content": [str(m.get("content"))[:60] for m in repaired]})
        """,
        CHECK,
    ),
    md(
        """
        The pipeline records what repair did, per transcript message, in the view's provenance: `synthetic` for the
        made-up result, `dropped` (with the reason) for the orphan and the duplicate. This is the inspector's
        *Before* table.
        """
    ),
    code(
        """
        view = build_request_view(broken, ContextPolicy(context_window_tokens=2_000))
        print("stage:", view.stage, "· repaired:", view.repaired)
        for record in view.provenance.before:
            if record.reason:
                print(f"  #{record.position} dropped: {record.reason}")
        table(view)[["position", "role", "tool", "action", "failure", "preview"]]
        """,
        CHECK,
    ),
    code("CompactionInspector(view)  # filter the action column for synthetic / dropped"),
    md(
        """
        ## 5 · Microcompaction (C5)

        Over the threshold, the engine first tries the cheap step: every *successful* tool result **before** the
        safe tail becomes `[old tool output compacted: N characters]`. Same role, same `tool_call_id`, no message
        removed. Failures (flagged as errors, or containing `Tool failed`, `Invalid`, `Permission denied`,
        `Forbidden`) stay: they are the evidence that stops the model from repeating a mistake.
        """
    ),
    code(
        """
        session = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "The tests of the io package fail. Fix them."},
        ]
        for k, name in enumerate(["io.py", "rows.py", "header.py"]):
            session.append({"role": "assistant", "content": f"Reading src/{name}.",
                            "tool_calls": [call(f"read-{k}", "read_file", path=f"src/{name}")]})
            session.append({"role": "tool", "tool_call_id": f"read-{k}", "content": f"# src/{name}\\n" + "x" * 6_000})
        session += [
            {"role": "assistant", "content": "Running the tests.", "tool_calls": [call("t1", "bash", command="pytest -q")]},
            {"role": "tool", "tool_call_id": "t1", "is_error": True,
             "content": "Tool failed: exit code 1\\nE   AssertionError: header skipped twice\\n" + "-" * 2_000},
            {"role": "assistant", "content": "io.read_rows skips the header twice; fixing it.",
             "tool_calls": [call("e1", "edit_file", path="src/io.py", old_string="next(f)\\nnext(f)", new_string="next(f)")]},
            {"role": "tool", "tool_call_id": "e1", "content": "ok: 1 replacement"},
            {"role": "user", "content": "Also run the linter."},
            {"role": "assistant", "content": "The linter is clean and the tests pass."},
        ]
        small_policy = ContextPolicy(context_window_tokens=6_000, threshold_ratio=0.8, keep_recent_tokens=1_000)
        view = build_request_view(session, small_policy)
        print(f"{view.before_tokens:,} est. tokens > threshold {view.threshold:,} -> stage {view.stage!r}: "
              f"{view.after_tokens:,} est. tokens sent")
        print(view.summary)
        table(view)[["position", "role", "tool", "tokens_before", "tokens_after", "action", "failure", "preview"]]
        """,
        CHECK,
    ),
    md(
        """
        The same view in the widgets. The gauge stacks the sent view by layer against the threshold and window
        lines (with the transcript before compaction underneath); the inspector has the before/after tables
        (filter by role or action) and the summary.
        """
    ),
    code("show(view)"),
    md(
        """
        ## 6 · Structured summary (C6)

        If placeholders are not enough, everything before the safe tail becomes **one** system message, extracted
        deterministically (no model call): the last four user goals, files written, the last four failures, and the
        last useful assistant state. The original system messages stay; the tail stays verbatim.

        Here the session gains a long analysis from the assistant, which microcompaction cannot shrink.
        """
    ),
    code(
        """
        longer = session[:-2] + [
            {"role": "assistant", "content": "Analysis of the reader: " + "A" * 20_000},
            {"role": "user", "content": "Also run the linter."},
            {"role": "assistant", "content": "The linter is clean and the tests pass."},
        ]
        view = build_request_view(longer, small_policy)
        print(f"{view.before_tokens:,} est. tokens -> stage {view.stage!r} -> {view.after_tokens:,} est. tokens, "
              f"{len(view.messages)} messages sent")
        print("same input, byte-identical summary:", build_request_view(longer, small_policy).summary == view.summary)
        print()
        print(view.summary)
        """,
        CHECK,
    ),
    code(
        """
        table(view, "after")
        """,
        CHECK,
    ),
    code("show(view)"),
    md(
        """
        ## 7 · Fallback window (C8)

        If the structured compactor itself raises, the turn does not stop: the view becomes at most the first two
        system messages, one fixed fallback note and the last six conversation messages (moved earlier so it never
        starts on a tool result). Less information, but a valid request.
        """
    ),
    code(
        """
        def broken_summarizer(messages):
            raise RuntimeError("the summarizer crashed")


        view = build_request_view(longer, small_policy, broken_summarizer)
        print(f"stage {view.stage!r} because: {view.error}")
        print(f"{view.before_tokens:,} -> {view.after_tokens:,} est. tokens · still over the threshold: {view.over_threshold}")
        table(view, "after")
        """,
        CHECK,
    ),
    code("show(view)"),
    md(
        """
        Here the window starts one message early (#8, the `bash` call) so that it does not begin with that call's
        result, and it is still over the threshold: the fallback guarantees a valid request, not a small one.

        ## 8 · Prompt-too-long retry (C9)

        The estimate can be lower than the provider's tokenizer. When the provider answers with an error that
        matches `prompt too long | context length | too many tokens`, the loop resends **once** with the fallback
        window; a second such error fails the turn normally (recorded, visible).
        """
    ),
    code(
        """
        errors = [
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9135 tokens.",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "Request too large for gpt-4o: too many tokens in the request",
            "Rate limit reached for gpt-4o",
            "Incorrect API key provided",
        ]
        pd.DataFrame({"provider error": errors, "prompt too long?": [is_prompt_too_long(e) for e in errors]})
        """,
        CHECK,
    ),
    md(
        """
        Now live, through the real `openai` client and the real loop: a local OpenAI-compatible `TestServer`
        answers four turns, then refuses the fifth request with a 400 context-length error, then accepts the retry.
        """
    ),
    code(
        """
        from mxclaw_nb import Agent
        from mxclaw_nb.store.writer import Store
        from mxclaw_nb.demo.server import TestServer

        server = TestServer().start()
        store = Store(os.environ["MXCLAW_DB"])
        scratch = WORK / "scratch"
        scratch.mkdir()
        agent = Agent(workspace=scratch, db=store, base_url=server.base_url, api_key="test-key", model="test-model",
                      context_window_tokens=8_000, approval="deny", home=WORK)
        for k in range(1, 5):
            server.enqueue_text(f"Answer {k}.")
            agent.run(f"Question {k}: what does step {k} do?")
        server.enqueue_error(400, errors[0], code="context_length_exceeded")
        server.enqueue_text("Answer 5, sent after the retry.")
        result = agent.run("Question 5: and the last step?")
        print(result)
        print("retried:", result.retried, "· answer:", result.text)
        """
    ),
    code(
        """
        calls = store.requests(agent.session_id)
        calls["failed"] = calls["error"].notna()
        calls[["turn", "iteration", "stage", "retry", "failed"]].tail(3)
        """,
        CHECK,
    ),
    md(
        """
        What the retry sent (recorded by the test server): the system prompt, the fixed fallback note and the last
        six conversation messages; the stored transcript still has all of them.
        """
    ),
    code(
        """
        sent = server.requests[-1]["messages"]
        print(f"sent {len(sent)} messages on the retry; the transcript has {len(agent.transcript())}")
        pd.DataFrame({"role": [m["role"] for m in sent],
                      "first line": [str(m.get("content")).splitlines()[0][:60] for m in sent]})
        """,
        CHECK,
    ),
    code(
        """
        events = store.events(agent.session_id, type="context.compacted")
        display(events[["turn", "iteration", "type", "payload"]])
        retry_call = calls[calls["retry"]].iloc[-1]  # a stored request row is enough for both widgets
        display(ContextGauge.from_request(retry_call), CompactionInspector(retry_call))
        """
    ),
    code(
        """
        from mxclaw_nb.loop import TurnFailed

        server.enqueue_error(400, errors[0])
        server.enqueue_error(400, errors[0])
        try:
            agent.run("Question 6: one more?")
        except TurnFailed as exc:
            print("the turn failed after one retry, as it should:", type(exc).__name__)
        server.close()
        """
    ),
    md(
        """
        ## 9 · Large tool results become artifacts (A1)

        A tool result over 51,200 UTF-8 bytes is stored whole as a session-scoped artifact; the model gets the first
        6,000 and last 3,000 characters, a line saying how much was left out, and the artifact id, and can read the
        rest with the `read_artifact` tool (byte range, line range, search).
        """
    ),
    code(
        """
        from mxclaw_nb.tools.artifacts import artifact_preview, needs_artifact

        log = "".join(f"2026-01-01T00:00:{i % 60:02d}Z INFO step {i:04d}: compiled module_{i}.py\\n" for i in range(2_000))
        preview = artifact_preview(log, "artifact-0123456789ab")
        print(f"{len(log.encode()):,} bytes -> artifact? {needs_artifact(log)}")
        print(f"the model gets {len(preview):,} of {len(log):,} characters: "
              f"{estimate_text(preview):,} instead of {estimate_text(log):,} est. tokens")
        print("marker lines:", [line for line in preview.splitlines() if line.startswith("[")])
        """,
        CHECK,
    ),
    md(
        """
        The same thing live: the offline demo model's first task runs a build whose log is large. The tool message
        in the transcript holds the preview; the `artifacts` table holds the whole log.
        """
    ),
    code(
        """
        demo = Agent(db=store, model="mxclaw-demo", approval="allow", home=WORK)
        turn = demo.run("The unit tests of the inventory package fail. Find out why and fix them.")
        print(turn)
        display(store.sql("SELECT id, bytes, chars FROM artifacts WHERE session_id = ?", [demo.session_id]))
        tool_rows = store.transcript(demo.session_id).query("content.str.contains('bytes omitted', na=False)")
        print(tool_rows["content"].iloc[0][-160:])
        """
    ),
    code("ContextGauge(turn.views[-1])  # the orange tool-results layer holds the preview, not the 77 KB log"),
    md(
        """
        ## 10 · Again before every call (C7), and events (C10)

        Tool results grow the request *inside* a turn, so the check runs before every model call, and a turn can
        compact several times. Two more demo turns push this session past its 12,800-token threshold (16k window);
        each compaction is stored as a `context.compacted` event and marked on the session's timeline. Live figures
        here are *calibrated*: once the provider has reported usage, the agent counts with a counter anchored on those
        reports (SPEC T3), and `tokens_are` says so.
        """
    ),
    code(
        """
        from mxclaw_nb.widgets import TokenTimeline

        for prompt in ["Look at the build log and tell me what the slowest step was.",
                       "Summarize what you changed and what you checked, with file names."]:
            print(demo.run(prompt))
        TokenTimeline(store=store, session_id=demo.session_id)
        """
    ),
    code(
        """
        events = store.events(demo.session_id, type="context.compacted")
        payloads = pd.json_normalize(events["payload"].map(json.loads))
        pd.concat([events[["turn", "iteration"]], payloads[["stage", "before_tokens", "after_tokens", "tokens_are"]],
                   payloads["summary"].str.slice(0, 60)], axis=1)
        """
    ),
    md(
        """
        ## 11 · Frozen context (F1)

        On a session's first turn the agent reads `AGENTS.md`, `.mx-claw/AGENTS.md`, the verification policy in
        `.mx-claw/project.json`, the skill catalog and the user/project memory, and stores them as system messages.
        They are never summarized away. Files changed later only affect **new** sessions.
        """
    ),
    code(
        """
        from mxclaw_nb.context import message_layer
        from mxclaw_nb.frozen import session_preamble

        systems = [m for m in demo.transcript() if m["role"] == "system"]
        pd.DataFrame([{"layer": message_layer(m), "est. tokens": estimate_tokens(m),
                       "first line": m["content"].splitlines()[0][:70]} for m in systems])
        """
    ),
    code("ContextGauge(demo.dry_run('What next'))  # the frozen layers sit at the left of every bar, kept on every path"),
    code(
        """
        agents_md = demo.workspace / "AGENTS.md"
        agents_md.write_text(agents_md.read_text() + "\\nNew rule: always run the linter.\\n")
        stored = "\\n".join(m["content"] for m in demo.transcript() if m["role"] == "system")
        fresh = "\\n".join(m["content"] for m in session_preamble(demo.workspace, home=WORK))
        print("this session still sees the new rule:", "New rule" in stored)
        print("a new session would see it:         ", "New rule" in fresh)
        """,
        CHECK,
    ),
    md(
        """
        ## 12 · The article's worked example

        The design article walks through one request: a **64,000**-token window, ratio **0.8** (threshold
        **51,200**), an **8,000**-token safe tail, and a ~72,000-token transcript made of ~10k of system messages,
        ~20k of old successful tool output that placeholders can replace, ~35k of earlier process and a ~7k
        recent tail. `mxclaw_nb.demo.examples.worked_example()` builds that transcript from concrete messages.
        """
    ),
    code(
        """
        from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example

        messages = worked_example()
        policy = ContextPolicy(**WORKED_EXAMPLE_POLICY)
        view = build_request_view(messages, policy)
        print(f"{len(messages)} transcript messages · {view.before_tokens:,} est. tokens · threshold {view.threshold:,}")
        print(f"stage {view.stage!r} · {len(view.messages)} messages sent · {view.after_tokens:,} est. tokens · "
              f"safe tail starts at #{view.tail_start}")
        event = view.event()
        print("context.compacted:", {k: v for k, v in event.items() if k != "summary"})
        """,
        CHECK,
    ),
    md(
        """
        Why not stop at microcompaction? Replace every old successful tool output with its placeholder and the
        request is still over the threshold, so the engine goes on to the structured summary, as the article says.
        """
    ),
    code(
        """
        placeholders_only = sum(
            estimate_tokens({**m, "content": placeholder_for(m)}) if i < view.tail_start and placeholder_for(m)
            else estimate_tokens(m)
            for i, m in enumerate(messages))
        print(f"with placeholders only: {placeholders_only:,} est. tokens > {view.threshold:,} -> summary")
        """,
        CHECK,
    ),
    code(
        """
        by_layer = pd.DataFrame({"transcript (est.)": layer_tokens(messages, estimate_tokens),
                                 "sent (est.)": layer_tokens(view.messages, estimate_tokens)})
        by_layer.loc["total"] = by_layer.sum()
        by_layer
        """,
        CHECK,
    ),
    code(
        """
        before = table(view)
        before.groupby("action").agg(messages=("position", "size"), tokens_before=("tokens_before", "sum"),
                                     tokens_after=("tokens_after", "sum"))
        """,
        CHECK,
    ),
    code("print(view.summary)", CHECK),
    code("show(view)"),
    md(
        """
        ## Recap

        | stage | when | what the model sees | event summary starts with |
        |---|---|---|---|
        | `unchanged` | estimate ≤ threshold | the repaired transcript | (no event) |
        | `micro` | over, placeholders suffice | all messages, old successful tool outputs as placeholders | `[microcompaction]` |
        | `summary` | still over | system messages + one structured summary + safe tail | `[compressed conversation context]` |
        | `fallback` | the compactor raised | ≤ 2 system + fallback note + last 6 messages | `[fallback context window]` |
        | `prompt_too_long_retry` | the provider refused the size | the fallback window, once per turn | (stage on the event) |

        In every case the stored transcript is unchanged. Next: **03** sweeps window, threshold ratio and tail
        budget over many sessions; **04** queries the store across sessions with SQL.
        """
    ),
]
