import unittest

from inventory.report import render
from inventory.stock import Item


class ReportTest(unittest.TestCase):
    def test_report_has_one_line_per_item_and_a_total(self):
        text = render([Item("TEA-001", "绿茶 green", 2, 4.5)])
        self.assertIn("TEA-001", text)
        self.assertIn("绿茶", text)
        self.assertTrue(text.splitlines()[-1].startswith("total") or "low stock" in text)
