"""docs/ENGINEERING.md's layout is the tree (issue 30): every module under src/servesize is named in its folder's
entry, and every module the map names exists there. commands/ is described as one module per command (the CLI's
own listing), so its files are not named one by one."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "servesize"
NOT_LISTED = {"commands"}  # 'one module per command': `servesize --help` is its list
MODULE = re.compile(r"(?<![/\w.])([a-z_0-9]+)\.py\b")


def map_entries() -> dict[str, set[str]]:
    """Folder ('' for src/servesize itself) -> the modules its entry in the layout names."""
    text = (ROOT / "docs" / "ENGINEERING.md").read_text()
    block = text[text.index("```\nsrc/servesize/") + 4:]
    block = block[:block.index("\n```")]
    entries: dict[str, set[str]] = {"": set()}
    folder = ""
    for line in block.splitlines()[1:]:
        if line and not line.startswith(" "):
            break  # tests/, benchmarks/: outside src/servesize
        first = line[2:].split(" ", 1)[0] if line.startswith("  ") and not line.startswith("   ") else ""
        if first.endswith("/"):
            folder = first.rstrip("/")
            entries.setdefault(folder, set())
        elif first.endswith(".py"):
            folder = ""
        names = MODULE.findall(line)
        if folder == "measure" and not names:  # measure/'s entry names its modules without the suffix
            names = [w for w in line.split() if w.isidentifier() and (SRC / "measure" / f"{w}.py").exists()]
        entries[folder].update(names)
    return entries


def test_every_module_is_on_the_map_and_every_module_on_it_exists():
    entries = map_entries()
    missing, stale = [], []
    for folder, names in entries.items():
        where = SRC / folder if folder else SRC
        if folder in NOT_LISTED or not where.is_dir():
            continue
        actual = {p.stem for p in where.glob("*.py") if p.name != "__init__.py" or folder == ""}
        actual.discard("__main__")
        missing += [f"{folder}/{m}.py" for m in sorted(actual - names)]
        stale += [f"{folder}/{m}.py" for m in sorted(names - actual)]
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing += [f"{p}/" for p in sorted(packages - set(entries))]
    assert not missing and not stale, f"not on the map: {missing}; on the map but not in the tree: {stale}"
