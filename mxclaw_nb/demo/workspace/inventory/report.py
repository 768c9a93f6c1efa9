"""A plain-text stock report, one line per item, with the total at the bottom."""

from __future__ import annotations

from inventory.stock import Item, low_stock, total_value


def format_line(item: Item) -> str:
    """One report line: SKU, name, quantity and value."""
    return f"{item.sku:<8} {item.name:<12} {item.quantity:>5}  {item.value():>9.2f} EUR"


def render(items: list[Item], threshold: int = 5) -> str:
    """The whole report as text."""
    lines = [format_line(item) for item in items]
    lines.append("-" * 42)
    lines.append(f"{'total':<27} {total_value(items):>9.2f} EUR")
    low = low_stock(items, threshold)
    if low:
        lines.append("low stock: " + ", ".join(low))
    return "\n".join(lines)


if __name__ == "__main__":
    shelf = [
        Item("TEA-001", "绿茶 green", 12, 4.5),
        Item("TEA-002", "乌龙茶 oolong", 3, 7.25),
        Item("CUP-010", "cup", 40, 2.0),
    ]
    print(render(shelf))
