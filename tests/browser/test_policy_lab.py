"""Real-browser test of the policy lab (SPEC S4, C12, N2): a 500-call session redrawn live, light, dark, saved.

In JupyterLab and Debian's chromium a notebook builds a 500-call session (`tests/test_lab.long_session`) and shows
`PolicyLab(...).show()`. The call slider's handle gets ArrowRight key presses dispatched in the page; the time from
the key press to the lab's status line showing the new redraw (gauge, inspector, cursor and status all updated, one
animation frame later) is measured in the page with `performance.now()`; its median must be under 100 ms. The
policy sliders of each strategy (article, masking, clearing, model-summary) are moved the same way, and the time
from the key press to the redraw and to the new policy's timeline drawn (the whole replay of 500 calls) is recorded
and printed per strategy: the lab waits for a quick whole replay and draws all at once, else the call first (its
turn replayed alone, C2) and the timeline from a background replay. Their bound here is generous (a timed
assertion is flaky on a loaded 2-core CI): the 100 ms target is asserted by `bench/lab_bench.py --assert-ms 100`.
The call on screen at the end is call 2 of its turn, after its call 1 masked: gauge, comparison gauge and inspector
say what it carries (N3, C7). Light and dark screenshots; then the notebook is saved, its kernel shut down and
reopened: the snapshot shows the last state (no widget error).
Screenshots go to $MXCLAW_SHOTS or a new temporary folder (printed).
"""

from __future__ import annotations

import inspect
import re
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from ..test_lab import long_session
from .harness import PANEL, chromium, close_and_shut_down, light_then_dark, shots_dir, write_notebook
from .harness import kernel_idle as _idle
from .harness import open_notebook as _open

pytestmark = [pytest.mark.browser, pytest.mark.timeout(480)]

CELLS = ["import json\nfrom typing import Any\nfrom mxclaw_nb.widgets.lab import PolicyLab\n\n"
         + inspect.getsource(long_session),
         "lab = PolicyLab({'long session (500 calls)': long_session(500)}, datasets=False, window=32_000,\n"
         "                keep_recent=4_000)\nlab.show()"]
NOT_FOUND = "Error displaying widget"

# In the page: press ArrowRight on the call slider's handle and resolve with the ms until the status line shows
# the next redraw number, one animation frame later (the browser has laid the new outputs out).
MOVE_JS = """async ([slider, key]) => {
  const lab = document.querySelector('.mx-policy-lab');
  const state = () => Number(lab.querySelector('.mx-lab-state').dataset.redraw);
  const before = state();
  const handle = [...lab.querySelectorAll('.widget-slider')].find(
    s => s.querySelector('.widget-label').textContent.trim() === slider).querySelector('.noUi-handle');
  const done = new Promise(resolve => {
    const obs = new MutationObserver(() => {
      if (state() > before) { obs.disconnect(); requestAnimationFrame(() => resolve(performance.now())); }
    });
    obs.observe(lab, {subtree: true, childList: true, characterData: true, attributes: true});
  });
  const t0 = performance.now();
  const code = key === 'ArrowRight' ? 39 : 37;
  handle.dispatchEvent(new KeyboardEvent('keydown', {key, code: key, keyCode: code, bubbles: true}));
  return (await done) - t0;
}"""
# The same press on a policy slider, resolving with [ms until the redraw, ms until the timeline is the new policy's
# too] (the status line's data-timeline is 1 once it is drawn), each one animation frame later.
POLICY_MOVE_JS = """async ([slider, key]) => {
  const lab = document.querySelector('.mx-policy-lab');
  const status = () => lab.querySelector('.mx-lab-state');
  const before = Number(status().dataset.redraw);
  let redrawn = null;
  const handle = [...lab.querySelectorAll('.widget-slider')].find(
    s => s.querySelector('.widget-label').textContent.trim() === slider).querySelector('.noUi-handle');
  const done = new Promise(resolve => {
    const obs = new MutationObserver(() => {
      if (Number(status().dataset.redraw) <= before) return;
      if (redrawn === null) { redrawn = 0; requestAnimationFrame(() => { redrawn = performance.now(); }); }
      if (status().dataset.timeline === '1') {
        obs.disconnect(); requestAnimationFrame(() => resolve(performance.now()));
      }
    });
    obs.observe(lab, {subtree: true, childList: true, characterData: true, attributes: true});
  });
  const t0 = performance.now();
  const code = key === 'ArrowRight' ? 39 : 37;
  handle.dispatchEvent(new KeyboardEvent('keydown', {key, code: key, keyCode: code, bubbles: true}));
  const end = await done;
  return [(redrawn || end) - t0, end - t0];
}"""


def _shot(page: Any, path: Path) -> None:
    page.locator(f"{PANEL} .mx-policy-lab").first.evaluate("e => e.scrollIntoView({block: 'start'})")
    time.sleep(0.5)
    page.locator(PANEL).screenshot(path=str(path))


def test_s4_policy_lab_redraws_a_500_call_session_live_and_saves_its_last_state(agent_views_lab: Any) -> None:
    base, root = agent_views_lab
    write_notebook(root / "lab.ipynb", CELLS)
    shots = shots_dir("mxclaw-lab-")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            _open(page, base, "lab.ipynb")
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.locator(f"{PANEL} .mx-policy-lab .mx-lab-state").wait_for(timeout=300_000)
            _idle(page)
            status = page.locator(f"{PANEL} .mx-lab-state").first.inner_text()
            assert "500 model calls" in status, status
            start = int(page.locator(f"{PANEL} .mx-lab-cursor").first.get_attribute("data-call") or 0)

            times = []
            for _ in range(25):
                times.append(page.evaluate(MOVE_JS, ["call", "ArrowRight"]))
                _idle(page)
            cursor = int(page.locator(f"{PANEL} .mx-lab-cursor").first.get_attribute("data-call") or 0)
            assert cursor == start + 25  # every press moved one call, and the cursor followed
            median = statistics.median(times)
            print(f"call slider -> redraw, 500-call session: median {median:.1f} ms, max {max(times):.1f} ms "
                  f"over {len(times)} moves: {[round(t) for t in times]}")
            assert median < 100, times

            # policy sliders: the lab waits for a quick whole replay of the 500 calls and redraws all at once, else
            # gauge, inspector, cursor and status from the chosen call's turn replayed alone (C2) and the timeline
            # when the whole replay (a background thread) is done
            policy_times: dict[str, list[float]] = {}
            timeline = "document.querySelector('.mx-lab-state').dataset.timeline === '1'"

            timeline_times: dict[str, list[float]] = {}  # key press -> the timeline of the new policy drawn

            def moves(strategy: str, sliders: tuple[str, ...], key: str) -> None:
                for slider in sliders * 3:  # every move a policy not replayed yet (nothing cached)
                    ms, whole_ms = page.evaluate(POLICY_MOVE_JS, [slider, key])
                    policy_times.setdefault(f"{strategy}: {slider}", []).append(ms)
                    timeline_times.setdefault(strategy, []).append(whole_ms)
                    page.wait_for_function(timeline, timeout=60_000)
                    _idle(page)

            moves("article", ("threshold ratio", "tail budget"), "ArrowLeft")
            strategy = page.locator(f"{PANEL} .mx-policy-lab select").nth(1)
            strategy.select_option("masking")
            page.locator(f"{PANEL} .mx-lab-state", has_text="masking").first.wait_for(timeout=60_000)
            page.wait_for_function(timeline, timeout=60_000)
            _idle(page)
            moves("masking", ("keep last", "tail budget"), "ArrowRight")
            # the state between a redraw and its timeline, dimmed (only when the replay was not waited for)
            page.evaluate(MOVE_JS, ["keep last", "ArrowRight"])
            state = page.locator(f"{PANEL} .mx-lab-state").first
            if state.get_attribute("data-timeline") == "0":
                state.evaluate("e => e.scrollIntoView({block: 'start'})")
                time.sleep(0.1)
                page.locator(PANEL).screenshot(path=str(shots / "policy-lab-replaying-light.png"))
            page.wait_for_function(timeline, timeout=60_000)
            _idle(page)
            for other, sliders in (("clearing", ("keep last", "tail budget")),
                                   ("model-summary", ("threshold ratio", "tail budget"))):
                strategy.select_option(other)
                page.locator(f"{PANEL} .mx-lab-state", has_text=other).first.wait_for(timeout=60_000)
                page.wait_for_function(timeline, timeout=60_000)
                _idle(page)
                moves(other, sliders, "ArrowRight" if other == "clearing" else "ArrowLeft")
            strategy.select_option("article")
            page.locator(f"{PANEL} .mx-lab-state", has_text="article").first.wait_for(timeout=60_000)
            page.wait_for_function(timeline, timeout=60_000)
            _idle(page)
            t0 = time.perf_counter()
            window_ms = page.evaluate(MOVE_JS, ["window", "ArrowLeft"])  # one step: 31,000
            page.locator(f"{PANEL} .mx-lab-state", has_text="window 31,000").first.wait_for(timeout=60_000)
            page.wait_for_function(timeline, timeout=60_000)
            whole = (time.perf_counter() - t0) * 1000
            for slider, ts in policy_times.items():
                print(f"{slider} slider -> redraw, 500-call session: median {statistics.median(ts):.1f} ms, "
                      f"max {max(ts):.1f} ms: {[round(t) for t in ts]}")
            print(f"window slider -> redraw {window_ms:.0f} ms; timeline (whole replay of 500 calls) {whole:.0f} ms")
            for name, ts in timeline_times.items():
                print(f"{name}: policy slider -> redraw with its timeline, 500-call session: median "
                      f"{statistics.median(ts):.1f} ms, max {max(ts):.1f} ms: {[round(t) for t in ts]}")
            assert set(timeline_times) == {"article", "masking", "clearing", "model-summary"}
            # generous: the lab draws every move (the 100 ms target is the bench's, see the module doc)
            assert all(statistics.median(ts) < 2_000 for ts in timeline_times.values()), timeline_times
            assert all(statistics.median(ts) < 1_000 for ts in policy_times.values()), policy_times
            _idle(page)
            snapshot = page.locator(f"{PANEL} .mx-snapshot").first
            page.wait_for_function("document.querySelector('.mx-snapshot')?.textContent.includes('window 31,000')",
                                   timeout=30_000)  # the snapshot follows each redraw
            assert not snapshot.is_visible()  # hidden while the live lab shows the same

            # a second strategy side by side on the same call: a compact gauge and the one-line difference
            page.locator(f"{PANEL} .mx-policy-lab select").nth(2).select_option("clearing")
            versus = page.locator(f"{PANEL} .mx-policy-lab .mx-lab-versus").first
            versus.wait_for(timeout=60_000)
            line = versus.inner_text()
            assert "article" in line and "clearing" in line and "identical" in line, line
            _idle(page)
            # N3 + C7: the call on screen is call 2 of its turn, after its call 1 masked old tool outputs: gauge,
            # comparison gauge and inspector say it carries call 1's placeholders, and the inspector's Before rows are
            # the stored transcript (its actions relative to it), as the live inspector shows that call
            lab = page.locator(f"{PANEL} .mx-policy-lab").first
            gauge = lab.locator(".mx-gauge").first.inner_text()
            carried = re.search(r"unchanged · carries (\d+) placeholders · turn (\d+), call 2", " ".join(gauge.split()))
            assert carried, gauge
            carries = f"carries {carried.group(1)} placeholders"
            assert carries in " ".join(versus.locator(".mx-gauge").first.inner_text().split())
            head = " ".join(lab.locator(".mx-inspector-head").first.inner_text().split())
            assert carries in head and "Before: the stored transcript up to this call" in head, head
            assert "Before (transcript, " in lab.locator(".mx-inspector").first.inner_text()

            def lab_and_versus(theme: str) -> None:
                _shot(page, shots / f"policy-lab-{theme}.png")
                versus.evaluate("e => e.scrollIntoView({block: 'start'})")
                time.sleep(0.4)
                page.locator(PANEL).screenshot(path=str(shots / f"policy-lab-versus-{theme}.png"))

            light_then_dark(page, lab_and_versus)

            page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
            page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
            close_and_shut_down(page)
            _open(page, base, "lab.ipynb")
            _idle(page)
            time.sleep(2.0)  # the widget manager has restored: a missing model would now say so
            text = page.locator(PANEL).inner_text()
            assert NOT_FOUND not in text
            saved = page.locator(f"{PANEL} .mx-snapshot").first
            assert saved.is_visible()
            saved_text = saved.inner_text()
            assert "window 31,000" in saved_text and f"call {cursor}" in saved_text, saved_text
            assert "versus clearing on the same call" in saved_text, saved_text
            assert carries in " ".join(saved_text.split()), saved_text  # N3: the saved form says it too
            assert saved.locator("svg").first.is_visible() and saved.locator(".mx-gauge").first.is_visible()
            saved.evaluate("e => e.scrollIntoView({block: 'start'})")
            time.sleep(0.5)
            page.locator(PANEL).screenshot(path=str(shots / "policy-lab-saved.png"))
        except Exception:
            page.screenshot(path=str(shots / "failed.png"))
            raise
