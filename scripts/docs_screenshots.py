"""Copy the browser tests' screenshots (out/screenshots/, written by `pytest tests/web -m browser`) into
docs/explorer/, as the docs have them: the 1400 px captures scaled to 1120 px, every image quantized to
256 colours (a tenth of the bytes; the text stays legible). Only the names given are copied.

    python scripts/docs_screenshots.py plan.png plan-phone.png ...
"""

from __future__ import annotations

import pathlib
import sys

from PIL import Image

REPO = pathlib.Path(__file__).resolve().parent.parent
SHOTS, DOCS = REPO / "out" / "screenshots", REPO / "docs" / "explorer"


def copy(name: str) -> None:
    image = Image.open(SHOTS / name).convert("RGB")
    if image.width == 1400:  # the browser fixture's viewport: scaled as the earlier copies were
        image = image.resize((1120, round(image.height * 0.8)), Image.LANCZOS)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(DOCS / name, optimize=True)
    print(f"{name}: {image.width} x {image.height}, {(DOCS / name).stat().st_size:,} bytes")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        copy(arg)
