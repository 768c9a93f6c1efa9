"""Static checks of the teaching notebooks (SPEC N1/N2 surfaces), complementing `pytest --nbval-lax notebooks/`.

nbval re-runs the notebooks and compares the cells tagged `nbval-check-output`; these fast tests make sure
that comparison means something: the stored notebooks are exactly what `scripts/make_notebooks.py`
generates (nobody hand-edited the JSON), every notebook was saved executed without errors, each has
several checked cells with stored outputs, no checked cell shows a volatile value (temporary path,
session id, widget) that would make the check flaky, and every notebook starts with a throw-away store.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_notebooks  # noqa: E402

CHECK = "nbval-check-output"
VOLATILE = re.compile(r"mxclaw-(nb|demo)-|/tmp/|\b[0-9a-f]{32}\b|\bimp-[0-9a-f]{24}\b|127\.0\.0\.1:\d+")
KEYS = sorted(make_notebooks.NAMES)


def _stored(key: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / f"{make_notebooks.NAMES[key]}.ipynb", as_version=4)


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    return "\n".join(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))


@pytest.mark.parametrize("key", KEYS)
def test_stored_notebook_is_what_the_generator_builds(key: str) -> None:
    """Sources, cell ids and tags match scripts/make_notebooks.py (regenerate instead of editing the JSON)."""
    stored, built = _stored(key), make_notebooks.build(key)
    assert [(c.id, c.cell_type, c.source, c.metadata.get("tags", [])) for c in stored.cells] == \
        [(c.id, c.cell_type, c.source, c.metadata.get("tags", [])) for c in built.cells]


@pytest.mark.parametrize("key", KEYS)
def test_saved_executed_without_errors(key: str) -> None:
    """Every code cell ran (so GitHub shows outputs) and none stored an error."""
    for cell in _stored(key).cells:
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"cell {cell.id} was not executed"
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"cell {cell.id} stored an error: {errors[0].get('ename')}"


@pytest.mark.parametrize("key", KEYS)
def test_checked_cells_have_stable_outputs(key: str) -> None:
    """At least one checked cell per notebook (several in 02); each has output, none volatile or a widget."""
    checked = [c for c in _stored(key).cells if CHECK in c.metadata.get("tags", [])]
    assert len(checked) >= (10 if key == "02" else 1)
    for cell in checked:
        assert cell.outputs, f"checked cell {cell.id} has no stored output"
        for output in cell.outputs:
            assert "application/vnd.jupyter.widget-view+json" not in output.get("data", {}), cell.id
            assert not VOLATILE.search(_text(output)), f"checked cell {cell.id} shows a volatile value"


@pytest.mark.parametrize("key", KEYS)
def test_first_code_cell_uses_a_temporary_store(key: str) -> None:
    """Runs never pile up in the user's data folder: MXCLAW_DB points into a fresh temp folder first."""
    first = next(c for c in _stored(key).cells if c.cell_type == "code")
    assert "tempfile.mkdtemp" in first.source and 'os.environ["MXCLAW_DB"]' in first.source
