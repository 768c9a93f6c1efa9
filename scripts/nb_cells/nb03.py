"""Cells of notebooks/03-compaction-experiments.ipynb: policy sweeps over stored and real transcripts."""

# ruff: noqa: E501 - cell code is dedented by 8 columns in the notebook, where it fits in 120

from __future__ import annotations

from nb_cells import CHECK, SETUP_NOTE, code, md, setup

CELLS = [
    md(
        """
        # 03 · Compaction experiments

        A compaction policy is three numbers: the **context window**, the **threshold ratio** (compact above
        `window × ratio`) and the **safe-tail budget** (`keep_recent_tokens`, kept verbatim). Which values work
        for *your* traffic? The context engine is a pure function of the transcript, so any stored or imported
        session can be **replayed** under any policy without calling a model: for every assistant message we
        rebuild the request view the loop would have sent just before it (SPEC C7 included).

        This notebook sweeps each of the three numbers over
        1. sessions stored by the agent (two offline demo sessions, created here), and
        2. real public agent transcripts shipped with the package (`mxclaw_nb.datasets`: 23 SWE-agent runs and
           50 tau-bench conversations, MIT-licensed, see its README), or, when you ask for it and it is present,
           the full shared set they were taken from (223 conversations in `../shared/transcripts`).

        Every figure is in **est.** tokens (the C1 estimate) unless marked otherwise.
        """
    ),
    SETUP_NOTE,
    setup(),
    code(
        """
        import matplotlib.pyplot as plt
        import pandas as pd
        from IPython.display import Markdown, display

        from mxclaw_nb.analysis import as_policy, compare, conversations, summarize_comparison, summarize_policies
        from mxclaw_nb.analysis.plots import plot_fact_survival, stage_colors
        from mxclaw_nb.demo.examples import worked_example

        pd.set_option("display.precision", 3)
        COLUMNS = ["policy", "sessions", "sessions_compacted", "compactions", "stage_micro", "stage_summary",
                   "stage_fallback", "saved_share", "saved_share_compacted", "fact_survival", "over_threshold"]
        """
    ),
    md(
        """
        Two helpers used for both data sets: `sweep` changes one number of a base policy at a time and replays
        every conversation under each policy (`compare`, once per distinct policy, with a progress bar from 20
        conversations up), `plot_sweeps` draws tokens saved and stages reached.
        """
    ),
    code(
        """
        def sweep(source, base, windows, ratios, tails):
            \"\"\"Replay `source` under one-number changes of `base`: (compare frames by sweep, one summary table).\"\"\"
            sweeps = {  # the window sweep keeps the tail at the same share of the window
                "window": ("window", [{**base, "window": w, "tail": w * base["tail"] // base["window"]} for w in windows]),
                "threshold ratio": ("ratio", [{**base, "ratio": r} for r in ratios]),
                "tail budget": ("tail", [{**base, "tail": t} for t in tails]),
            }
            labels = {name: [as_policy(p)[0] for p in policies] for name, (_, policies) in sweeps.items()}
            distinct = {as_policy(p)[0]: p for _, policies in sweeps.values() for p in policies}  # base once
            everything = compare(source, list(distinct.values()))
            runs, tables = {}, []
            for name, (key, policies) in sweeps.items():
                order = pd.CategoricalDtype(labels[name], ordered=True)
                runs[name] = (everything[everything["policy"].isin(labels[name])]
                              .astype({"policy": order}).sort_values("policy", kind="stable"))
                table = summarize_policies(runs[name])[COLUMNS]
                table.insert(0, "value", [f"{p[key]:g}" for p in policies])
                table.insert(0, "sweep", name)
                tables.append(table)
            summary = pd.concat(tables, ignore_index=True)
            summary.attrs["timing"] = everything.attrs["timing"]
            return runs, summary


        def plot_sweeps(summary, title):
            \"\"\"Top: share of est. tokens saved; bottom: compacted calls by stage; one column per sweep.\"\"\"
            colors = stage_colors()
            reached = [s for s in ("micro", "summary", "fallback") if summary[f"stage_{s}"].any()]
            never = [s for s in ("micro", "summary", "fallback") if s not in reached]  # named, not drawn empty
            fig, axes = plt.subplots(2, 3, figsize=(13, 6.4), layout="constrained", sharey="row")
            for col, (name, table) in enumerate(summary.groupby("sweep", sort=False)):
                x = list(table["value"])
                top, bottom = axes[0, col], axes[1, col]
                top.plot(x, table["saved_share"] * 100, marker="o", label="all calls", color="#1e88e5")
                top.plot(x, table["saved_share_compacted"] * 100, marker="s", label="compacted calls", color="#90caf9")
                top.set_title(f"sweep: {name}")
                base = [0] * len(table)
                for stage in reached:
                    values = list(table[f"stage_{stage}"])
                    bottom.bar(x, values, bottom=base, color=colors[stage], label=stage)
                    base = [b + v for b, v in zip(base, values)]
                bottom.set_xlabel(name)
            axes[0, 0].set_ylabel("est. tokens saved (%)")
            axes[1, 0].set_ylabel("compacted model calls")
            axes[0, 0].legend(frameon=False)
            axes[1, 0].legend(frameon=False, title=f"never reached: {', '.join(never)}" if never else None)
            fig.suptitle(title)
            plt.show()
        """
    ),
    md(
        """
        ## 1 · Warm-up: one transcript, four windows

        The article's worked example (a ~72k est. token session) replayed with an 8k tail at four window sizes.
        `compare` returns one row per simulated model call (one before each assistant message); `summarize_policies`
        aggregates them per policy. `saved_share` is the share of est. tokens saved against sending the whole
        transcript every time.
        """
    ),
    code(
        """
        windows = [{"window": w, "ratio": 0.8, "tail": 8_000} for w in (48_000, 64_000, 80_000, 96_000)]
        one = compare([("worked-example", worked_example())], windows, progress=False)
        summarize_policies(one)[["policy", "calls", "compactions", "stage_micro", "stage_summary", "saved_share"]].round(3)
        """,
        CHECK,
    ),
    md(
        """
        Call by call at 64k: the transcript grows (`full_tokens`) and the first call over 51,200 is compacted
        (`micro`). Inside one turn the next call starts from the previous *view* (SPEC C7): the placeholders (or a
        pinned summary) carry over, so the following calls are `unchanged` while still sending ~20k est. tokens less
        than the full transcript. The next user message (turn 5) rebuilds the view from the full transcript.
        """
    ),
    code(
        """
        one[one["policy"] == "64k/0.8/8k"][["call", "turn", "full_tokens", "before_tokens", "after_tokens", "stage",
                                           "kept", "placeholder", "summarized"]].tail(8).reset_index(drop=True)
        """,
        CHECK,
    ),
    md(
        """
        ## 2 · Stored sessions

        Two sessions of the offline demo agent (three turns each), stored in this notebook's temporary DuckDB file.
        The demo model's window is 16,000 tokens; the second session runs at 12,000 to compact earlier.
        """
    ),
    code(
        """
        from mxclaw_nb import Agent
        from mxclaw_nb.__main__ import DEMO_PROMPTS

        agent = Agent(model="mxclaw-demo", approval="allow", home=WORK)
        small = Agent(model="mxclaw-demo", approval="allow", home=WORK, db=agent.store, context_window_tokens=12_000)
        for label, runner in (("16k window", agent), ("12k window", small)):
            for prompt in DEMO_PROMPTS:
                r = runner.run(prompt)
                print(f"{label} · turn {r.turn}: {r.status}, {r.iterations} model calls, {len(r.compactions)} compactions")
        store = agent.store
        store.sessions()[["id", "model", "turns", "messages", "model_calls", "compactions", "tokens_saved_est"]]
        """
    ),
    md(
        """
        What the sessions did live, per stage. (Live runs switch to the *calibrated* counter once the provider
        reports usage, SPEC T3; replays below use the C1 estimate, so the numbers differ a little.)
        """
    ),
    code(
        """
        store.sql(\"\"\"
            SELECT left(session_id, 8) AS session, stage, count(*) AS calls,
                   sum(before_tokens - after_tokens) AS tokens_saved
            FROM requests GROUP BY ALL ORDER BY session, stage
        \"\"\")
        """
    ),
    md(
        """
        The sweep around the demo model's own setting scaled down a little: base **12k window / 0.8 / 3k tail**.
        """
    ),
    code(
        """
        stored_runs, stored_summary = sweep(store, {"window": 12_000, "ratio": 0.8, "tail": 3_000},
                                            windows=(8_000, 12_000, 16_000, 24_000), ratios=(0.6, 0.7, 0.8, 0.9),
                                            tails=(1_000, 2_000, 3_000, 6_000))
        stored_summary.round(3)
        """
    ),
    code('plot_sweeps(stored_summary, "two demo sessions (stored)")'),
    md(
        """
        ## 3 · Real transcripts

        Public agent runs converted to OpenAI chat messages, kept with their real-world quirks (dangling calls,
        reused tool-call ids); the engine repairs the *view* as it would for a live session. By default this
        notebook uses the subset **shipped with mxclaw_nb** (`mxclaw_nb.datasets`, about 220 KB gzipped), so it
        shows the same real data on any machine. Set `FULL = True` below to replay the **full shared set** instead
        (every `*.jsonl` in `../shared/transcripts` beside the repository, or in the folder named by
        `MXCLAW_TRANSCRIPTS`); the cell says which set it used and whether the full one is present.
        """
    ),
    code(
        """
        from mxclaw_nb import datasets

        FULL = False  # True: every *.jsonl of the full shared set (when present), about 3x the conversations

        folder = datasets.shared_folder()  # $MXCLAW_TRANSCRIPTS or ../shared/transcripts, None when absent
        files = sorted(folder.glob("*.jsonl")) if FULL and folder else []
        real, origin = [], {}
        if files:
            for file in files:
                for sid, messages in conversations(file):
                    real.append((sid, messages))
                    origin[sid] = file.stem
            note = (f"Using the **full shared set: {len(real)} real conversations** from `{folder}`: "
                    + ", ".join(f"`{f.name}`" for f in files) + ".")
        else:
            for name in datasets.available():
                for conv in datasets.load(name):
                    real.append((conv.id, conv.messages))
                    origin[conv.id] = name
            counts = ", ".join(f"{d['conversations']} of {d['of']} {d['name']}" for d in datasets.info())
            note = (f"Using the **{len(real)} real conversations shipped with mxclaw_nb** ({counts}; MIT, see "
                    "`mxclaw_nb/datasets/README.md`). ")
            if FULL:
                note += "**`FULL = True`, but the full shared set was not found**, so this is the shipped subset."
            elif folder:
                note += f"The full shared set is present at `{folder}`: set `FULL = True` to replay all of it."
            else:
                note += ("The full shared set is not beside this checkout (`../shared/transcripts`); set "
                         "`MXCLAW_TRANSCRIPTS` to its folder and `FULL = True` to replay it.")
        display(Markdown(note))
        """
    ),
    code(
        """
        from mxclaw_nb.context import estimate_messages

        sizes = pd.DataFrame([{"origin": origin[sid], "messages": len(m), "est. tokens": estimate_messages(m)}
                              for sid, m in real])
        sizes.groupby("origin").describe(percentiles=[0.5, 0.9]).T
        """,
        CHECK,  # the shipped subset is the same everywhere (with FULL = True this cell differs, as it should)
    ),
    md(
        """
        Most conversations are a few thousand est. tokens, so the sweeps use small windows around 4,000 tokens to
        make compaction happen. The base policy is **4k window / 0.8 ratio / 1k tail**; each sweep changes one
        number (the window sweep scales the tail with the window, `tail = window / 4`).
        """
    ),
    code(
        """
        BASE = {"window": 4_000, "ratio": 0.8, "tail": 1_000}
        runs, summary = sweep(real, BASE, windows=(2_000, 3_000, 4_000, 6_000, 8_000, 16_000),
                              ratios=(0.5, 0.6, 0.7, 0.8, 0.9), tails=(250, 500, 1_000, 2_000, 3_000))
        timing = summary.attrs["timing"]
        print(f"{timing['calls']:,} simulated model calls ({timing['policies']} distinct policies) replayed "
              f"in {timing['seconds']:.1f} s")
        summary.round(3)
        """
    ),
    md(
        """
        Columns: `sessions_compacted` — conversations with at least one compaction; `stage_*` — simulated calls
        reaching each stage; `saved_share` — est. tokens saved over all calls (and over compacted calls only);
        `fact_survival` — share of facts from compacted messages (paths, error lines, numbers, commands) still
        visible in the view; `over_threshold` — calls still over the threshold after every allowed step (at a 2k
        window the system prompt plus the safe tail alone often exceed 1,600 est. tokens: the engine keeps them
        anyway, because it never drops the system messages or splits the tail). `stage_fallback` stays 0 and the
        plots name it "never reached": the fallback window (SPEC C8) serves only when the structured compactor
        raises, and the deterministic summary used in replays does not.
        """
    ),
    code(
        """
        plot_sweeps(summary, f"{len(real)} real transcripts ({'full shared set' if files else 'shipped subset'})")
        """
    ),
    md(
        """
        Reading the plots (on the real transcripts): a smaller window compacts more often and saves more; a lower
        ratio compacts earlier (more calls compacted, each saving less); a bigger tail keeps more verbatim, so
        placeholders alone rarely suffice, more calls go on to the summary stage, and less is saved. What a bigger
        tail buys is visible in fact survival: more of the paths, errors, numbers and commands from compacted
        messages are still in front of the model. In that chart a kind of fact never found in a compacted message
        gets no bars and is named in the title; a `0` over a slot means facts were found but none stayed visible,
        `n/a` that none was found under that policy.
        """
    ),
    code(
        """
        fig = plot_fact_survival(runs["tail budget"])
        fig
        """
    ),
    md(
        """
        Per conversation, for the base policy: which ones compact, and how much of their est. tokens is saved.
        """
    ),
    code(
        """
        base_run = runs["threshold ratio"]
        per_session = summarize_comparison(base_run[base_run["threshold_ratio"] == 0.8])
        per_session["origin"] = per_session["session_id"].map(origin)
        print(per_session.groupby("origin")[["compactions", "saved_share"]].mean())
        per_session.sort_values("saved_tokens", ascending=False).head(8)[
            ["origin", "session_id", "calls", "compactions", "micro", "summary", "max_full_tokens",
             "max_after_tokens", "saved_share", "fact_survival"]]
        """
    ),
    md(
        """
        ## 4 · Are the estimates honest?

        A threshold in est. tokens is only as good as the estimate. With the offline `o200k_base` encoding,
        `exact=True` also counts every replayed view exactly: `est_over_exact_median` below 1 means the estimate
        runs low, and `exact_over_window` counts calls that would really overflow the window.
        """
    ),
    code(
        """
        from mxclaw_nb.tokenizers import exact_counter

        if exact_counter("o200k_base") is None:
            print("o200k_base is not available offline here: skipping the exact comparison")
        else:
            checked = compare(real, [BASE, {**BASE, "counter": "o200k_base"}], exact=True)
            display(summarize_policies(checked)[["policy", "compactions", "saved_share", "est_over_exact_median",
                                                 "est_over_exact_p5", "exact_over_threshold", "exact_over_window"]])
        """
    ),
    md(
        """
        ## 5 · What compaction costs: prompt caching (SPEC E2-E4)

        Providers cache the prompt by prefix: a cached input token costs about a tenth of a fresh one, and every
        compaction rewrites the prefix from its first changed message on. Each replayed call records the prefix it
        shares with the previous call (`shared_tokens`) and what it invalidated (`broken_tokens`); a prefix-cache
        model turns that into est. cached / uncached tokens and a price-table row into est. dollars. Every named
        strategy has a registered **cache-aware** variant (E4, C12: `article-cache`, `masking-cache`,
        `clearing-cache`, `model-summary-cache`, with the strategy's numbers plus `clear_at_least`): it keeps a
        warm prefix (sends the previous call's messages plus what came since) while that stays under the
        threshold, and when a break is forced frees at least `clear_at_least` tokens so the next break comes later;
        each call records its decision (`cache_decision`). Replays have no timestamps, so the cache is taken as
        warm between calls. Prices are examples (see
        `mxclaw_nb.analysis.cost.PRICES`: source and date per row); check your provider's.
        """
    ),
    code(
        """
        from mxclaw_nb import datasets
        from mxclaw_nb.analysis.cost import PRICES, DEFAULT_PRICE

        COST_BASE = {"window": 8_000, "tail": 2_000}
        COST_POLICIES = [p for name in ("article", "masking", "clearing", "model-summary")
                         for p in ({**COST_BASE, "strategy": name, "name": name},
                                   {**COST_BASE, "strategy": f"{name}-cache", "clear_at_least": 2_000,
                                    "name": f"{name}-cache"})]
        tables = []
        for data, source in (("swe-agent (shipped)", datasets.load("swe-agent")),
                             ("tau-bench (shipped)", datasets.load("tau-bench")), ("stored demo sessions", store)):
            table = summarize_policies(compare(source, COST_POLICIES, progress=False, facts=False))
            table.insert(0, "data", data)
            tables.append(table)
        costs = pd.concat(tables, ignore_index=True)[["data", "policy", "calls", "compactions", "over_threshold",
                                                      "broken_tokens", "cache_read_share", "cost"]]
        print(f"est. cost in USD under {PRICES[DEFAULT_PRICE].label}")
        plain_cost = costs.groupby("data")["cost"].transform(lambda c: c.shift(1))  # the row above a -cache row
        costs["vs_plain"] = (costs["cost"] / plain_cost - 1).where(costs["policy"].str.endswith("-cache"))
        costs.round({"cache_read_share": 3, "cost": 3, "vs_plain": 3})
        """,
        CHECK,
    ),
    md(
        """
        ## 6 · Strategies side by side (SPEC C12)

        The three numbers are one axis; the *strategy* is another. `compare` takes a strategy by name with its
        numbers beside the policy's: `article` (this notebook so far: placeholders when enough, else the
        structured summary), `masking` (observation masking: the last `keep_last` tool results verbatim, older
        ones as placeholders on **every** call, whatever the threshold) and `clearing` (age-based clearing over a
        trigger: every old tool result but the last `keep_last`, at least `clear_at_least` tokens a step, never
        the `exclude_tools`), and `model-summary` (SPEC C11: the article's ladder with the summary written by a
        model call). All keep the C4 repair, the C3 safe tail and the C8 fallback. One table, same base
        policy, same conversations: *calls compacted* are the simulated calls whose view was compacted; of the facts
        of the compacted messages (paths, errors, numbers, commands), *visible* are still in the view, *recallable*
        are not but sit in a message a placeholder (`recall #41`) or a summary's range names (SPEC C13, R2: the
        `recall` tool fetches it), *lost* are neither (a fallback window dropped them). *summary calls* are the model
        summary calls the strategy made and *summary call tokens* their tokens; *summary source* says where the
        summaries came from. A replay makes no model call of its own, so `model-summary` is given a **summary
        writer** (`compare(..., summary_provider=...)`, SPEC C11): the shipped test server, started here in this
        process on 127.0.0.1 (no network, no key), whose demo model answers each summary request the engine plans,
        through the real `openai` client and the same code path as the live loop (`summary_call.ask_summary`: the
        engine's prompt with the C6 scaffold and the previous summary to merge into, the deadline, the must-shrink and
        keep-C6's-facts gates; a rejected summary leaves the C6 text and is counted as rejected). *summary call
        tokens* are the usage the server reported (prompt + completion). Each outcome is kept per (session, coverage,
        prompt) by the writer: the same request again (another policy, a second `compare` with the same writer) asks
        nothing and is counted as reused. Without a writer, C6 stands in
        (*summary source* "C6 stand-in", the calls it *would* make counted at their C1-estimated size); a session whose
        summaries were recorded live replays them ("recorded").
        """
    ),
    code(
        """
        from mxclaw_nb.demo.server import TestServer
        from mxclaw_nb.provider import OpenAIProvider
        from mxclaw_nb.summary_call import ModelSummarizer

        STRATEGIES = [{**BASE, "strategy": "article"}, {**BASE, "strategy": "masking", "keep_last": 3},
                      {**BASE, "strategy": "clearing", "keep_last": 3}, {**BASE, "strategy": "model-summary"}]
        with TestServer(demo=True, keep_requests=100_000) as summary_server:  # 127.0.0.1, in this process
            summary_server.stream_delay = 0.0  # no typing pace: nobody watches these answers stream
            writer = ModelSummarizer(OpenAIProvider(base_url=summary_server.base_url, api_key="demo",
                                                    model=summary_server.model))
            side = compare(real, STRATEGIES, progress=False, summary_provider=writer)
            heard = len(summary_server.requests)
        written = pd.DataFrame(writer.log)
        print(f"summary calls: {side.attrs['summary_calls']['made']} made ({heard} requests the server saw), "
              f"{side.attrs['summary_calls']['reused']} reused; {int(written['merged'].sum())} merged into an "
              f"earlier summary; tokens {', '.join(sorted(set(written['tokens_are'].dropna())))}")
        table = side.groupby("policy", sort=False).agg(
            calls=("call", "size"), calls_compacted=("compacted", "sum"), saved_tokens=("saved_tokens", "sum"),
            full_tokens=("full_tokens", "sum"), facts_total=("facts_total", "sum"),
            facts_visible=("facts_visible", "sum"), facts_recallable=("facts_recallable", "sum"),
            facts_lost=("facts_lost", "sum"), summary_calls=("summary_calls", "sum"),
            summary_call_tokens=("summary_call_tokens", "sum"),
            summary_source=("summary_source", lambda s: ", ".join(sorted(set(s.dropna()))) or "-"))
        table["tokens_saved_share"] = table["saved_tokens"] / table["full_tokens"]
        for kind in ("visible", "recallable", "lost"):
            table[f"facts_{kind}_share"] = table[f"facts_{kind}"] / table["facts_total"]
        table[["calls", "calls_compacted", "saved_tokens", "tokens_saved_share", "facts_visible_share",
               "facts_recallable_share", "facts_lost_share", "summary_calls", "summary_call_tokens",
               "summary_source"]]
        """,
        CHECK,
    ),
    md(
        """
        Masking compacts more calls (it does not wait for the threshold) and saves more tokens on these short
        conversations; what any of them hides is still in the store, where the `recall` tool reads it back
        (SPEC R1), so facts move from *visible* to *recallable*, not to *lost*. The demo model's summaries are
        shorter than the C6 text they replace (it merges into its earlier summary and clips long items, keeping the
        paths and the start of every failure and of the latest goal, which the gates check), so `model-summary`
        leaves more room after each summary and reaches one less often than `article`.
        """
    ),
    md(
        """
        The second row uses exact counts for the policy itself (`counter="o200k_base"`), which is what the agent's
        calibrated counter approximates live (SPEC T2/T3).

        **Next:** 04 queries the store across many sessions with SQL and exports it to Parquet.
        """
    ),
]
