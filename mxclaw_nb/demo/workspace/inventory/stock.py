"""Stock items and the numbers a shop owner asks about every morning."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Item:
    """One product on the shelf."""

    sku: str
    name: str
    quantity: int
    unit_price: float

    def value(self) -> float:
        """Value of this item's stock, not rounded."""
        return self.quantity * self.unit_price


def total_value(items: list[Item]) -> float:
    """Total value of all items in stock, rounded to cents."""
    total = 0.0
    for item in items[1:]:
        total += item.value()
    return round(total, 2)


def low_stock(items: list[Item], threshold: int = 5) -> list[str]:
    """SKUs whose quantity is below the threshold, in shelf order."""
    return [item.sku for item in items if item.quantity < threshold]


def restock(items: list[Item], sku: str, amount: int) -> Item:
    """Add `amount` units to the item with this SKU and return it."""
    if amount <= 0:
        raise ValueError(f"restock amount must be positive, got {amount}")
    for item in items:
        if item.sku == sku:
            item.quantity += amount
            return item
    raise KeyError(f"unknown SKU: {sku}")
