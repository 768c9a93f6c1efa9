"""Print a long, deterministic build log (about 75 KB) and save it to logs/build.log.

The demo model runs this to show what happens to large tool outputs: over 50 KB they are stored
as an artifact and the model only sees a preview it can search with read_artifact.
"""

import pathlib
import random

STEPS = ["resolve", "compile", "link", "package", "test", "lint"]
MODULES = ["inventory.stock", "inventory.report", "tests.test_stock", "tests.test_report", "plugins.barcode"]


def lines(count: int = 1200):
    rng = random.Random(42)
    for n in range(count):
        step, module = STEPS[n % len(STEPS)], rng.choice(MODULES)
        ms = rng.randint(3, 900)
        if n == 777:  # one step is far slower than the rest: the answer to "what was the slowest step?"
            step, module, ms = "link", "inventory.report", 2431
        level = "INFO"
        if module == "plugins.barcode" and n % 97 == 0:
            level = "ERROR"
        elif ms > 850:
            level = "WARN"
        detail = "optional plugin 'barcode' not installed" if level == "ERROR" else f"{ms} ms"
        yield f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}Z {level:<5} [{step:<8}] {module:<18} {detail}"
    yield "build finished: 1200 steps, see ERROR lines above (barcode plugin is optional)"


def main() -> None:
    text = "\n".join(lines()) + "\n"
    out = pathlib.Path(__file__).resolve().parent.parent / "logs" / "build.log"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text, end="")


if __name__ == "__main__":
    main()
