"""A tiny stock-keeping library (sample project for the mxclaw_nb demo model)."""

from inventory.stock import Item, low_stock, restock, total_value

__all__ = ["Item", "low_stock", "restock", "total_value"]
