"""Generate, execute and save the teaching notebooks in `notebooks/` (SPEC N1, N2).

Why: a notebook's JSON is hard to review and easy to let drift. The cells live here as Python data
(one module per notebook in `scripts/nb_cells/`), so a change is a readable diff; this script builds the
`.ipynb` files with nbformat (stable cell ids, one kernelspec), runs each one top to bottom in a fresh
kernel with nbclient, and saves it WITH its outputs, so GitHub shows them and `pytest --nbval-lax`
can compare the cells tagged `nbval-check-output` against a fresh run. Run it after changing a
notebook or anything its checked cells print:

    .venv/bin/python scripts/make_notebooks.py            # all notebooks, executed
    .venv/bin/python scripts/make_notebooks.py 02 --no-execute
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = {
    "01": "01-quickstart",
    "02": "02-context-management-tour",
    "03": "03-compaction-experiments",
    "04": "04-cross-session-analysis",
    "05": "05-agent-notebook",
}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TQDM_BAR = re.compile(r"\d+%\|.*\| \d+/\d+ \[")  # tqdm's meter: "desc:  40%|####      | 29/73 [00:05<...]"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def build(key: str) -> nbformat.NotebookNode:
    """The notebook for `key` ("01".."05") without outputs, from `scripts/nb_cells/nbKEY.py`."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        module = importlib.import_module(f"nb_cells.nb{key}")
    finally:
        sys.path.pop(0)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(getattr(module, "KERNELSPEC", KERNELSPEC))  # 05 runs on the agent kernel (N4)
    nb.metadata["language_info"] = dict(getattr(module, "LANGUAGE_INFO", {"name": "python"}))
    for k, (kind, source, tags) in enumerate(module.CELLS):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        cell["id"] = f"nb{key}-{k:03d}"  # stable ids: regenerating gives a clean diff
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def execute(nb: nbformat.NotebookNode, timeout: int = 600) -> float:
    """Run the notebook in a fresh kernel of its kernelspec with notebooks/ as the working folder; seconds taken.

    The agent kernel (05) is installed into a temporary prefix for the run, so nothing is left installed.
    """
    name = nb.metadata["kernelspec"]["name"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as prefix:
        saved = os.environ.get("JUPYTER_PATH")
        if name != "python3":
            from mxclaw_nb.kernel.spec import install

            install(prefix=prefix, name=name)
            os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (f"{prefix}/share/jupyter", saved) if p)
        try:
            client = NotebookClient(nb, timeout=timeout, kernel_name=name, store_widget_state=False,
                                    resources={"metadata": {"path": str(NOTEBOOKS)}})
            client.execute()
        finally:
            if saved is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = saved
    return time.perf_counter() - started


def static_widgets(nb: nbformat.NotebookNode) -> int:
    """Keep only the static HTML/text of widget outputs; returns how many were changed.

    A saved widget view needs the saved widget state, megabytes of JSON that only a live kernel can use;
    every mxclaw_nb widget also carries `text/html` and `text/plain` renderings of the same numbers, which
    GitHub, nbconvert and JupyterLab show as they are. Re-running a cell brings the live widget back.
    Progress bars (tqdm) are dropped: their text is the bar's first state, and the cell prints what it did.
    """
    changed = 0
    for cell in nb.cells:
        # A tqdm bar's text is its state when first shown ("0%| 0/73"): a progress bar is live-only, drop it.
        kept = [o for o in cell.get("outputs", []) if not (WIDGET_VIEW in o.get("data", {}) and TQDM_BAR.search(
            "".join(o["data"].get("text/plain", ""))))]
        changed += len(cell.get("outputs", [])) - len(kept)
        if "outputs" in cell:
            cell["outputs"] = kept
        for output in kept:
            data = output.get("data", {})
            if WIDGET_VIEW in data and ("text/html" in data or "text/plain" in data):
                del data[WIDGET_VIEW]
                changed += 1
    nb.metadata.pop("widgets", None)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Build (and by default execute) the selected notebooks and write them to notebooks/."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", default=list(NAMES), help="which notebooks: 01 02 03 04 05 (default all)")
    parser.add_argument("--no-execute", action="store_true", help="write the notebooks without outputs")
    args = parser.parse_args(argv)
    unknown = [k for k in args.keys if k not in NAMES]
    if unknown:
        parser.error(f"unknown notebook(s) {unknown}; choose from {list(NAMES)}")
    for key in args.keys:
        nb = build(key)
        note = "not executed"
        if not args.no_execute:
            note = f"executed in {execute(nb):.1f} s, {static_widgets(nb)} widget outputs kept as static HTML"
        path = NOTEBOOKS / f"{NAMES[key]}.ipynb"
        nbformat.write(nb, path)
        print(f"{path.relative_to(ROOT)}: {len(nb.cells)} cells, {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
