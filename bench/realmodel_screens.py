"""Timeline and inspector screenshots (light and dark) of a stored session, in real Chromium (SPEC N2).

Renders the static HTML of `TokenTimeline` and `CompactionInspector` (what a saved notebook shows) for one session
of a DuckDB file, on a page styled like JupyterLab's light and dark themes, and saves PNGs. Used for the real-model
session of bench/realmodel_session.py:

    .venv/bin/python bench/realmodel_screens.py /tmp/mxclaw-realmodel.duckdb --out docs/screenshots --prefix realmodel
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHROMIUM = "/usr/bin/chromium"
THEMES = {  # the JupyterLab variables the widgets read, as each theme sets them
    "light": ('true', "#ffffff", "--jp-ui-font-color1:#212121;--jp-ui-font-color2:#616161;--jp-layout-color2:#eeeeee;"
              "--jp-border-color1:#bdbdbd;--jp-border-color2:#e0e0e0;color:#212121"),
    "dark": ('false', "#111111", "--jp-ui-font-color1:#e0e0e0;--jp-ui-font-color2:#a0a0a0;--jp-layout-color2:#2a2a2a;"
             "--jp-border-color1:#616161;--jp-border-color2:#424242;color:#e0e0e0"),
}


def page(html: str, theme: str) -> str:
    light, background, variables = THEMES[theme]
    return (f'<!doctype html><html><head><meta charset="utf-8"></head><body data-jp-theme-light="{light}" '
            f'style="margin:0;padding:16px;background:{background};{variables};font-family:sans-serif">'
            f'{html}</body></html>')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--session")
    ap.add_argument("--out", default="docs/screenshots")
    ap.add_argument("--prefix", default="realmodel")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from mxclaw_nb.store.writer import Store
    from mxclaw_nb.widgets.gauge import ContextGauge
    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.timeline import TokenTimeline

    store = Store(args.db)  # a copy: an older file is upgraded in place (schema migrations)
    sid = args.session or str(store.sessions()["id"].iloc[-1])
    requests = store.requests(sid)
    transcript = store.load_transcript(sid)
    timeline = TokenTimeline(requests).to_html()
    summaries = requests[requests["stage"] == "summary"]
    row = (summaries if len(summaries) else requests).iloc[0]
    inspector = CompactionInspector(row, transcript=transcript).to_html()
    gauge = ContextGauge.from_request(requests.iloc[0], transcript).to_html()  # the first call: tool definitions
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for theme in THEMES:
                for name, html in (("timeline", timeline), ("inspector", inspector), ("gauge", gauge)):
                    tab = browser.new_page(viewport={"width": 1200, "height": 800})
                    tab.route("**/*", lambda route: route.abort() if not route.request.url.startswith(
                        ("about:", "data:")) else route.continue_())  # nothing leaves the machine
                    tab.set_content(page(html, theme))
                    path = out / f"{args.prefix}-{theme}-{name}.png"
                    tab.screenshot(path=str(path), full_page=True)
                    print(path)
                    tab.close()
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
