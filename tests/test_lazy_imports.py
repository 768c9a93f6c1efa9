"""`%load_ext mxclaw_nb` stays light: pandas and matplotlib load when something is shown, not before (N1).

Behaviour, not timing (the timing is in bench/import_bench.py): a fresh interpreter loads the extension
and pandas, matplotlib, ipywidgets and duckdb are still absent; they load with the first command that needs them.
"""

from __future__ import annotations

import subprocess
import sys

CODE = r"""
import sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "mxclaw_nb")
print(",".join(m for m in ("pandas", "matplotlib", "ipywidgets", "duckdb") if m in sys.modules) or "none")
import mxclaw_nb.widgets as w
assert w.STAGE_COLORS and callable(w.from_request)
"""


def test_load_ext_imports_neither_pandas_nor_matplotlib(tmp_path):
    env = {"MXCLAW_DB": str(tmp_path / "lazy.duckdb"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


def test_store_and_widgets_packages_import_lazily():
    code = ("import sys, mxclaw_nb.store.writer, mxclaw_nb.widgets, mxclaw_nb.notebook.shown, "
            "mxclaw_nb.notebook.commands; "
            "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
