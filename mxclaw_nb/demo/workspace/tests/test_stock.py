import unittest

from inventory.stock import Item, low_stock, restock, total_value


def shelf() -> list[Item]:
    return [
        Item("TEA-001", "绿茶 green", 12, 4.5),
        Item("TEA-002", "乌龙茶 oolong", 3, 7.25),
        Item("CUP-010", "cup", 40, 2.0),
    ]


class TotalValueTest(unittest.TestCase):
    def test_total_counts_every_item(self):
        self.assertEqual(total_value(shelf()), 12 * 4.5 + 3 * 7.25 + 40 * 2.0)

    def test_empty_shelf_is_zero(self):
        self.assertEqual(total_value([]), 0.0)


class LowStockTest(unittest.TestCase):
    def test_low_stock_lists_skus_below_threshold(self):
        self.assertEqual(low_stock(shelf()), ["TEA-002"])

    def test_restock_adds_units(self):
        items = shelf()
        self.assertEqual(restock(items, "TEA-002", 10).quantity, 13)
        self.assertEqual(low_stock(items), [])

    def test_restock_rejects_unknown_sku(self):
        with self.assertRaises(KeyError):
            restock(shelf(), "NOPE", 1)
