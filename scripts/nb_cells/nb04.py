"""Cells of notebooks/04-cross-session-analysis.ipynb: SQL over the DuckDB store, Parquet export."""

from __future__ import annotations

# ruff: noqa: E501 - cell code is dedented by 8 columns in the notebook, where it fits in 120
from nb_cells import CHECK, SETUP_NOTE, code, md, setup

FAILURE_SQL = "(is_error OR regexp_matches(content, '(?i)tool failed|invalid|permission denied|forbidden'))"

CELLS = [
    md(
        """
        # 04 · Cross-session analysis with SQL

        Everything the agent does is stored in one DuckDB file: `sessions`, `messages` (the transcript, append-only),
        `events` (e.g. `context.compacted`), `artifacts` and `requests` (one row per model call, with the est. tokens
        before and after compaction, the stage and the provider-reported usage). Column reference:
        the README, section *The store: tables and columns*.

        This notebook fills a store with several sessions — live runs of the offline demo agent under different
        windows, plus imported real transcripts — and answers questions across all of them with SQL:
        compactions per session, tokens saved, and which failures survived into the summaries. Then it exports the
        store to Parquet for analysis anywhere else.

        `store.sql(...)` runs one read-only query and returns a pandas DataFrame (in a notebook with the extension
        loaded, `%agent sql SELECT ...` does the same).
        """
    ),
    SETUP_NOTE,
    setup(),
    code(
        """
        import pandas as pd
        from IPython.display import Markdown, display

        from mxclaw_nb import Agent
        from mxclaw_nb.__main__ import DEMO_PROMPTS
        from mxclaw_nb.analysis import compare, import_openai_jsonl, summarize_comparison

        pd.set_option("display.max_colwidth", 60)
        """
    ),
    md(
        """
        ## 1 · Fill the store

        Three demo sessions at 16k, 12k and 10k windows (three turns each), and one where shell commands are
        denied, so its transcript holds permission denials.
        """
    ),
    code(
        """
        first = Agent(model="mxclaw-demo", approval="allow", home=WORK)
        store = first.store
        agents = [first] + [Agent(model="mxclaw-demo", approval="allow", home=WORK, db=store, context_window_tokens=w)
                            for w in (12_000, 10_000)]
        for agent in agents:
            for prompt in DEMO_PROMPTS:
                agent.run(prompt)
        denied = Agent(model="mxclaw-demo", approval="deny", home=WORK, db=store)
        print(denied.run(DEMO_PROMPTS[0]))
        """
    ),
    md(
        """
        Then imported transcripts: the article's worked example (always available) and the real public agent runs
        **shipped with mxclaw_nb** (`mxclaw_nb.datasets`: all 23 SWE-agent runs and 50 tau-bench conversations,
        MIT-licensed, gzipped JSONL read by the same importer). Set `FULL = True` to import the full shared files
        instead (`../shared/transcripts` beside the repository, or the folder in `MXCLAW_TRANSCRIPTS`: all 200
        tau-bench conversations); the cell says which it used. Importing is idempotent: session ids derive from
        the content, so importing a file twice adds nothing (a `.jsonl.gz` and its `.jsonl` are the same source).
        """
    ),
    code(
        """
        import json

        from mxclaw_nb import datasets
        from mxclaw_nb.demo.examples import worked_example

        FULL = False  # True: the full shared files, when present (about 3x the sessions)


        def write_jsonl(path, conversations):
            with open(path, "w", encoding="utf-8") as handle:
                for conv_id, messages in conversations:
                    handle.write(json.dumps({"id": conv_id, "messages": messages}, ensure_ascii=False) + "\\n")
            return path


        files = [write_jsonl(WORK / "worked-example.jsonl", [("worked-example", worked_example())])]
        full = {name: datasets.full_path(name) for name in datasets.available()}  # None where not present
        for name, path in full.items():
            files.append(path if FULL and path else datasets.path(name))
        if FULL and all(full.values()):
            display(Markdown(f"Importing the **full shared set** from `{datasets.shared_folder()}`."))
        else:
            present = "present: set `FULL = True` to import it" if all(full.values()) else "not beside this checkout"
            display(Markdown(f"Importing the real transcripts **shipped with mxclaw_nb**; the full shared set is "
                             f"{present}."))
        for file in files:
            print(import_openai_jsonl(store, file, progress=False))
        print("again:", import_openai_jsonl(store, files[0], progress=False))
        """
    ),
    md("## 2 · What is in the store"),
    code(
        """
        store.sql(\"\"\"
            SELECT s.source, count(DISTINCT s.id) AS sessions, count(m.seq) AS messages,
                   count(*) FILTER (WHERE m.role = 'tool') AS tool_results
            FROM sessions s LEFT JOIN messages m ON m.session_id = s.id
            GROUP BY ALL ORDER BY sessions DESC, s.source
        \"\"\")
        """
    ),
    md(
        """
        Imported sessions have no model calls (nobody ran them here); notebook 03 shows how to replay them under
        any policy. The worked example, imported, is a 35-message session:
        """
    ),
    code(
        """
        worked_id = store.sql("SELECT id FROM sessions WHERE source = 'import:worked-example.jsonl'")["id"].iloc[0]
        store.sql(\"\"\"
            SELECT role, count(*) AS messages, sum(length(content)) AS chars,
                   count(*) FILTER (WHERE is_error) AS flagged_errors
            FROM messages WHERE session_id = ? GROUP BY role ORDER BY role
        \"\"\", [worked_id])
        """,
        CHECK,
    ),
    md(
        """
        ## 3 · Compactions per session

        Every compaction is a `context.compacted` event whose JSON payload holds the stage and the before/after
        token figures. `tokens_are` says what they are: `estimates` (C1) or `calibrated` (anchored on
        provider-reported usage, SPEC T3). DuckDB reads JSON with `->>`.
        """
    ),
    code(
        """
        store.sql(\"\"\"
            SELECT left(session_id, 8) AS session, w.window_tokens, count(*) AS compactions,
                   count(*) FILTER (WHERE e.payload->>'stage' = 'micro') AS micro,
                   count(*) FILTER (WHERE e.payload->>'stage' = 'summary') AS summary,
                   count(*) FILTER (WHERE e.payload->>'stage' IN ('fallback', 'prompt_too_long_retry')) AS fallback,
                   sum((e.payload->>'before_tokens')::BIGINT - (e.payload->>'after_tokens')::BIGINT) AS tokens_saved,
                   string_agg(DISTINCT e.payload->>'tokens_are', ', ') AS tokens_are
            FROM events e JOIN (SELECT session_id, max(window_tokens) AS window_tokens FROM requests GROUP BY 1) w
                 USING (session_id)
            WHERE e.type = 'context.compacted'
            GROUP BY session_id, w.window_tokens ORDER BY w.window_tokens DESC, session
        \"\"\")
        """
    ),
    md(
        """
        ## 4 · Tokens saved, per model call

        The `requests` table has one row per model call: the estimate of the transcript view before compaction, of
        what was sent after it, and the prompt tokens the provider reported. Summed over a session, the difference is
        what compaction saved; the ratio reported / est. shows how far the C1 estimate was from the provider's count.
        """
    ),
    code(
        """
        store.sql(\"\"\"
            SELECT left(session_id, 8) AS session, max(window_tokens) AS window_tokens, count(*) AS calls,
                   count(*) FILTER (WHERE stage <> 'unchanged') AS compacted_calls,
                   sum(before_tokens) AS before_tokens, sum(after_tokens) AS after_tokens,
                   round(1 - sum(after_tokens) / sum(before_tokens), 3) AS saved_share,
                   max(after_tokens) AS peak_sent, max(threshold) AS threshold,
                   round(median(prompt_tokens_reported / estimate_tokens), 2) AS reported_over_est
            FROM requests GROUP BY session_id ORDER BY window_tokens DESC, calls DESC
        \"\"\")
        """
    ),
    md(
        """
        ## 5 · Failures, and whether they survived into summaries

        A failure is a tool result flagged as an error, or one whose text says `Tool failed`, `Invalid`,
        `Permission denied` or `Forbidden` (SPEC C5). Microcompaction never replaces them, and the structured summary
        keeps the four most recent under *Failures to avoid*. Which failures made it into a summary built after them?
        """
    ),
    code(
        """
        store.sql(\"\"\"
            SELECT s.source, count(*) AS failures, count(DISTINCT m.session_id) AS sessions_with_failures,
                   count(*) FILTER (WHERE m.is_error) AS flagged
            FROM messages m JOIN sessions s ON s.id = m.session_id
            WHERE m.role = 'tool'
              AND (m.is_error OR regexp_matches(m.content, '(?i)tool failed|invalid|permission denied|forbidden'))
            GROUP BY ALL ORDER BY failures DESC
        \"\"\")
        """
    ),
    code(
        f"""
        survived = store.sql(\"\"\"
            WITH failures AS (
                SELECT session_id, seq, created_at, left(split_part(content, chr(10), 1), 60) AS first_line
                FROM messages WHERE role = 'tool' AND {FAILURE_SQL}
            ), summaries AS (
                SELECT session_id, turn, created_at, summary FROM requests WHERE stage = 'summary'
            )
            SELECT left(f.session_id, 8) AS session, f.seq, f.first_line,
                   count(*) AS later_summaries,
                   count(*) FILTER (WHERE contains(s.summary, f.first_line)) AS naming_it,
                   count(DISTINCT s.turn) AS turns_with_summary,
                   count(DISTINCT s.turn) FILTER (WHERE contains(s.summary, f.first_line)) AS turns_naming_it
            FROM failures f JOIN summaries s ON s.session_id = f.session_id AND s.created_at > f.created_at
            GROUP BY ALL ORDER BY session, f.seq
        \"\"\")
        survived
        """
    ),
    md(
        """
        Not every later summary names the failure, and that is expected: inside one turn, a second summary covers
        only the messages that became old since the first one, while the first stays pinned in the view (SPEC C7).
        The per-turn columns show that each turn whose view was summarized still named the failure.

        For the imported sessions there are no stored summaries, but the same question has an exact answer by
        replay (notebook 03): at a 4k window, how many error lines from compacted messages are still visible in
        the view (`survival_error`)?
        """
    ),
    code(
        """
        imported = store.sql("SELECT id, source FROM sessions WHERE source LIKE 'import:%'")
        replayed = compare(imported, [{"window": 4_000, "ratio": 0.8, "tail": 1_000}], store=store, progress=False)
        per_session = summarize_comparison(replayed)
        error_survival = replayed.groupby("session_id")["survival_error"].mean().rename("survival_error")
        per_session = per_session.join(error_survival, on="session_id").merge(
            imported.rename(columns={"id": "session_id"}), on="session_id")
        per_session.groupby("source")[["compactions", "saved_share", "fact_survival", "survival_error"]].mean().round(3)
        """
    ),
    md(
        """
        ## 6 · Export to Parquet

        `store.export_parquet(folder)` writes one Parquet file per table, readable by pandas, Polars, Spark or DuckDB
        anywhere. Here the folder is inside this notebook's temporary directory.
        """
    ),
    code(
        """
        export = WORK / "parquet"
        written = store.export_parquet(export)
        print(sorted(p.name for p in written))
        """,
        CHECK,
    ),
    code(
        """
        messages = pd.read_parquet(export / "messages.parquet")
        print(f"{len(messages):,} messages in messages.parquet; columns: {list(messages.columns)}")
        """
    ),
    md(
        """
        A plain DuckDB connection (no mxclaw_nb involved) can join the exported files with any DataFrame, here the
        replay results from above:
        """
    ),
    code(
        """
        import duckdb

        con = duckdb.connect()
        con.register("replayed", per_session)
        con.sql(f\"\"\"
            SELECT s.source, count(*) AS sessions, round(avg(r.saved_share), 3) AS saved_share,
                   round(avg(r.fact_survival), 3) AS fact_survival,
                   sum(m.n) AS messages
            FROM read_parquet('{export / "sessions.parquet"}') s
            JOIN replayed r ON r.session_id = s.id
            JOIN (SELECT session_id, count(*) AS n FROM read_parquet('{export / "messages.parquet"}') GROUP BY 1) m
              ON m.session_id = s.id
            GROUP BY ALL ORDER BY sessions DESC
        \"\"\").df()
        """
    ),
    code(
        """
        worked = con.sql(f\"\"\"
            SELECT seq, role, left(split_part(content, chr(10), 1), 70) AS first_line
            FROM read_parquet('{export / "messages.parquet"}')
            WHERE session_id = '{worked_id}' AND role = 'tool' AND {FAILURE}
            ORDER BY seq
        \"\"\").df()
        worked
        """.replace("{FAILURE}", FAILURE_SQL),
        CHECK,
    ),
    md(
        """
        The two failures of the worked example, straight from Parquet: exactly the two lines its structured summary
        lists under *Failures to avoid* (notebook 02).

        `store.import_parquet(folder)` merges such a folder back into a store (rows whose keys exist are skipped),
        so sessions can move between machines.
        """
    ),
    md(
        """
        ## 7 · The same from the magic

        With the extension loaded, `%agent sql` runs a query on the store the magics use (here the same file, through
        `MXCLAW_DB`) and returns the DataFrame; `x = %agent sql ...` keeps it.
        """
    ),
    code(
        """
        %load_ext mxclaw_nb
        %config AgentMagics.model = "mxclaw-demo"
        %agent sql SELECT type, count(*) AS events, count(DISTINCT session_id) AS sessions FROM events GROUP BY type ORDER BY events DESC
        """
    ),
]
