"""Docs and docstrings cite only what a clone or the public holds (issue 20).

The project's workspace keeps reference material in a folder beside the repository (``../shared``); a clone
does not have it, so nothing the clone ships may cite it. The only files that may name it are the ones that
READ the large session traces from there at test or benchmark time (optional data outside the clone), and
they are listed here one by one.
"""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parent.parent

# "../shared" written out, or built as a path: REPO.parent / "shared" / ...
CITES_SHARED = re.compile(r'\.\./shared\b|"shared"\s*/')

# The files that read the traces from the workspace folder by default, and why each may name it.
TRACE_READERS = {
    "tests/conftest.py": "TRACES, the traces_dir fixture's folder",
    "tests/simulate/test_published.py": "replays the traces (via traces_dir) and says so",
    "scripts/engine_validation.py": "--traces default",
    "benchmarks/bench_simulate.py": "--traces default",
    "benchmarks/bench_workload_fit.py": "--trace default",
}
THIS_TEST = "tests/test_citations.py"  # spells the pattern and its examples out

TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".txt", ".html", ".js", ".css", ".cfg", ".ini", ".yml", ".yaml", ".sh"}


def _files(*roots: str) -> list[pathlib.Path]:
    out = []
    for root in roots:
        p = REPO / root
        if p.is_file():
            out.append(p)
        else:
            out += [f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts]
    return sorted(out)


def _citing(files: list[pathlib.Path]) -> dict[str, list[int]]:
    found = {}
    for f in files:
        lines = [n for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if CITES_SHARED.search(line)]
        if lines:
            found[f.relative_to(REPO).as_posix()] = lines
    return found


def test_the_pattern_catches_both_spellings_and_not_the_word_shared():
    assert CITES_SHARED.search("(../shared/vllm-kv-sizing.md §3)")
    assert CITES_SHARED.search('TRACES = REPO.parent / "shared" / "traces"')
    assert not CITES_SHARED.search("a shared prefix of 512 tokens, _shared('name')")


def test_nothing_under_src_docs_or_the_readme_cites_the_workspace_folder():
    files = _files("src", "docs", "README.md")
    names = {f.relative_to(REPO).as_posix() for f in files}
    # the scan reaches the files that used to cite it, so an empty result means something
    assert {"docs/ENGINEERING.md", "src/servesize/engine/pool.py", "src/servesize/data/models.toml"} <= names
    assert _citing(files) == {}


def test_in_scripts_benchmarks_and_tests_only_the_listed_trace_readers_name_it():
    files = _files("scripts", "benchmarks", "tests")
    assert (REPO / "tests/fixtures/seeds.json") in files
    citing = _citing(files)
    assert set(citing) - set(TRACE_READERS) - {THIS_TEST} == set(), citing
    # each exception is still a real file that reads the traces, not a stale entry
    for path in TRACE_READERS:
        assert path in citing and "traces" in (REPO / path).read_text(encoding="utf-8")


def test_the_design_and_style_documents_engineering_points_to_are_in_the_repository():
    engineering = (REPO / "docs/ENGINEERING.md").read_text(encoding="utf-8")
    for doc in ("docs/DESIGN.md", "docs/STYLE.md"):
        assert f"`{doc}`" in engineering and (REPO / doc).is_file()
