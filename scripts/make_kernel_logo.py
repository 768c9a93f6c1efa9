"""Draw the "mx-claw agent" kernel logos (mxclaw_nb/kernel/resources/logo-{32x32,64x64}.png) with Pillow.

Three claw marks on a dark rounded square. Run once after changing the design; the PNGs are package data:

    .venv/bin/python scripts/make_kernel_logo.py
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parents[1] / "mxclaw_nb" / "kernel" / "resources"


def logo(size: int) -> Image.Image:
    """One logo, drawn at 8x and downsampled for smooth edges."""
    s = size * 8
    img = Image.new("RGBA", (s, s), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.rounded_rectangle((0, 0, s - 1, s - 1), radius=s // 5, fill=(31, 41, 55, 255))
    width = s // 9
    for k, color in enumerate(((251, 146, 60), (249, 115, 22), (234, 88, 12))):
        x = s * (0.30 + 0.20 * k)
        draw.line((x + s * 0.10, s * 0.18, x - s * 0.10, s * 0.82), fill=(*color, 255), width=width)
    return img.resize((size, size), Image.LANCZOS)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for size in (32, 64):
        logo(size).save(OUT / f"logo-{size}x{size}.png", optimize=True)


if __name__ == "__main__":
    main()
