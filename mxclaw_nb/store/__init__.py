"""DuckDB storage (SPEC S1-S4): writes, reads, lease, schema, codec, Parquet, artifacts.

SQL lives only here; the loop and the UI read and write through `Store`. `Store` is resolved on first
use, so importing a light module of this package (errors, turn lock) does not load DuckDB (N1: a quick
`%load_ext`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mxclaw_nb.store.writer import Store

__all__ = ["Store"]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from mxclaw_nb.store.writer import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
