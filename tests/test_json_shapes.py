"""The JSON documents users read keep their shape: every key path and the types under it (servesize.jsonable.shape),
per command, as tests/data/json-shapes.json last recorded it. The numbers may move with the model; a renamed, moved or
dropped key, or a figure that became a string, fails here (#30: one serialisation path, no document changed).

After a deliberate change to a document, record the new shapes (and review the diff of the file):

    PYTHONPATH=src python tests/test_json_shapes.py --write
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHAPES = ROOT / "tests" / "data" / "json-shapes.json"
TRACE = str(ROOT / "tests" / "data" / "claude-code-tiny.jsonl")  # four made-up Claude Code sessions, a subagent each

COMMANDS: dict[str, list[str]] = {
    "models": ["models", "--json"],
    "gpus": ["gpus", "--json"],
    "fit": ["fit", "--gpus", "1xH100", "--json"],
    "memory": ["memory", "llama-3.1-8b", "--gpus", "1xH100", "--json"],
    "memory-hybrid": ["memory", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--json"],
    "plan": ["plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--json"],
    "plan-disaggregated": ["plan", "qwen3-30b-a3b", "--gpus", "2xH200", "--prefill-instances", "1",
                           "--decode-instances", "1", "--json"],
    "fleet": ["fleet", "--models", "qwen3.6-27b", "--users", "40", "--json"],
    "fleet-teams": ["fleet", "--models", "qwen3.6-27b", "--team", "a=20", "--team", "b=30:chat", "--json"],
    "bench": ["bench", "llama-3.1-8b", "--gpus", "1xH100", "--random-input-len", "1000", "--random-output-len", "100",
              "--num-prompts", "20", "--json"],
    "simulate": ["simulate", TRACE, "--pool-tokens", "20k", "--json"],
    "simulate-engine": ["simulate", TRACE, "llama-3.1-8b", "--gpus", "1xH100", "--engine", "--json"],
    "workload-fit": ["workload", "fit", TRACE, "--json"],
}


DATA_KEYED = (".skipped", ".inputs")  # maps keyed by data: a search's skip reasons, a derivation step's inputs


def shape_of(argv: list[str]) -> list[str]:
    """The shape of what ``servesize ARGV`` prints (run in process)."""
    from cli_runner import run_captured
    from servesize.jsonable import shape

    code, out, err = run_captured(*argv)
    assert code == 0, err
    return shape(json.loads(out), DATA_KEYED)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_json_keeps_its_shape(name):
    recorded = json.loads(SHAPES.read_text())
    assert name in recorded, f"no recorded shape for {name}: run `python tests/test_json_shapes.py --write`"
    now = shape_of(COMMANDS[name])
    gone = sorted(set(recorded[name]) - set(now))
    new = sorted(set(now) - set(recorded[name]))
    assert not gone and not new, f"{name}: {len(gone)} paths gone {gone[:8]}, {len(new)} new {new[:8]}"


def test_the_recorded_shapes_are_of_these_commands():
    assert sorted(json.loads(SHAPES.read_text())) == sorted(COMMANDS)


def test_a_shape_names_every_leaf_with_its_types():
    from servesize.jsonable import shape

    doc = {"a": [{"x": 1, "y": None}, {"x": 2.5, "y": "s"}], "b": {}, "c": [], "d": True}
    assert shape(doc) == [".a[].x: number", ".a[].y: null|string", ".b: {}", ".c[]: []", ".d: bool"]
    # an empty list where another holds items, and a map keyed by data
    doc = {"l": [[], ["s"]], "skipped": {"no price": 3, "too big": 1}}
    assert shape(doc, (".skipped",)) == [".l[][]: string", ".skipped.*: number"]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))  # cli_runner
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: PYTHONPATH=src python tests/test_json_shapes.py --write")
    SHAPES.write_text(json.dumps({name: shape_of(argv) for name, argv in sorted(COMMANDS.items())}, indent=1) + "\n")
    print(f"wrote {SHAPES.relative_to(ROOT)}")
