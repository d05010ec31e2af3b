#!/usr/bin/env python3
"""Write src/servesize/data/vllm_vocabulary.toml: which `vllm serve` flags, --quantization methods,
--kv-cache-dtype values and --speculative-config methods each vLLM release accepts.

Read from the Python sources of the released wheels (PyPI), statically (nothing of vLLM is imported):

    # once per release: the wheel's .py files under SRC/<version>/vllm/
    pip download vllm==0.32.0 --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d whl && unzip -q whl/vllm-0.32.0-*.whl 'vllm/*.py' -d SRC/0.32.0
    python scripts/vllm_vocabulary.py SRC > src/servesize/data/vllm_vocabulary.toml

Flags: every option string in an ``add_argument(...)`` call of the engine, frontend and ``serve``
argument modules, plus ``--<field>`` for the fields of the frontend's argument dataclasses (which
vLLM turns into flags), plus ``--no-<flag>`` for flags whose value is a bool. For 0.32.0 this set was
checked against the running parser of the CPU build (430 option strings, the same set;
tests/test_vllm_vocabulary.py keeps the figure).
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

ARG_FILES = ("engine/arg_utils.py", "entrypoints/openai/cli_args.py", "entrypoints/launchers/cli_args.py",
             "entrypoints/common/cli_args.py", "entrypoints/cli/serve.py", "entrypoints/openai/api_server.py")
FRONTEND_CLASSES = ("FrontendArgs", "BaseFrontendArgs", "AsyncEngineArgs")
CACHE_FILES = ("config/cache.py", "config/__init__.py", "config.py")
QUANT_FILE = "model_executor/layers/quantization/__init__.py"
SPEC_FILES = ("config/speculative.py", "config/__init__.py", "config.py")


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _tree(root: pathlib.Path, rel: str) -> ast.Module | None:
    path = root / "vllm" / rel
    if not path.is_file():
        return None
    return ast.parse(path.read_text(encoding="utf-8"))


def _literals(node: ast.AST, names: dict[str, ast.AST]) -> list[str]:
    """The strings of a Literal[...] (following names of other Literals) or a list/tuple of strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Subscript):
        return _literals(node.slice, names)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _literals(elt, names)]
    if isinstance(node, ast.Name) and node.id in names:
        return _literals(names[node.id], names)
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def _assignments(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _bool_annotation(ann: ast.AST | None) -> bool:
    return ann is not None and re.fullmatch(r"(bool|bool \| None|Optional\[bool\])", ast.unparse(ann)) is not None


def flags_of(root: pathlib.Path) -> set[str]:
    return _flags_and_switches(root)[0]


def switches_of(root: pathlib.Path) -> set[str]:
    """The flags that take no value (store_true/store_false, BooleanOptionalAction, a bool field's flag)."""
    return _flags_and_switches(root)[1]


class _Collected:
    def __init__(self) -> None:
        self.flags: set[str] = {"--help", "-h"}
        self.switches: set[str] = {"--help", "-h"}
        self.bool_fields: set[str] = set()
        self.plain_actions: set[str] = set()  # flags with an explicit action (store_true, ...): no --no- form
        self.aliases: dict[str, list[str]] = {}  # a long flag -> every option string of its add_argument call

    def add_argument(self, node: ast.Call) -> None:
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                   and a.value.startswith("-")]
        names = [o for o in options if o.startswith("--")]
        self.flags.update(options)
        for n in names:
            self.aliases.setdefault(n, []).extend(options)
        action = next((ast.unparse(k.value) for k in node.keywords if k.arg == "action"), None)
        if action is None:
            return
        if "BooleanOptionalAction" in action:
            self.flags.update("--no-" + n[2:] for n in names)
            self.switches.update(options + ["--no-" + n[2:] for n in names])
            return
        self.plain_actions.update(names)
        if any(word in action for word in ("store_true", "store_false", "store_const", "count", "help")):
            self.switches.update(options)

    def add_class(self, node: ast.ClassDef) -> None:
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                name = item.target.id
                if _bool_annotation(item.annotation):
                    self.bool_fields.add(name)
                if node.name in FRONTEND_CLASSES and not name.startswith("_"):
                    self.flags.add("--" + name.replace("_", "-"))

    def finish(self) -> tuple[set[str], set[str]]:
        # vLLM's get_kwargs gives a bool-typed config field a BooleanOptionalAction (0.10+): --no-<flag>
        booleans = {"--" + f.replace("_", "-") for f in self.bool_fields}
        generated = {f for f in booleans if f in self.flags and f not in self.plain_actions}
        self.flags.update("--no-" + f[2:] for f in generated)
        self.switches.update(generated | {"--no-" + f[2:] for f in generated})
        self.switches.update(o for f in generated for o in self.aliases.get(f, ()))
        return self.flags, self.switches


def _flags_and_switches(root: pathlib.Path) -> tuple[set[str], set[str]]:
    found = _Collected()
    for rel in ARG_FILES:
        tree = _tree(root, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                found.add_argument(node)
            if isinstance(node, ast.ClassDef) and node.name in FRONTEND_CLASSES + ("EngineArgs",):
                found.add_class(node)
    return found.finish()


def cache_dtypes_of(root: pathlib.Path) -> set[str]:
    for rel in CACHE_FILES:
        tree = _tree(root, rel)
        if tree is not None:
            names = _assignments(tree)
            if "CacheDType" in names:
                return set(_literals(names["CacheDType"], names))
    tree = _tree(root, "engine/arg_utils.py")  # before 0.8: a choices= list on --kv-cache-dtype
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "--kv-cache-dtype" for a in node.args):
            for k in node.keywords:
                if k.arg == "choices":
                    return set(_literals(k.value, {}))
    return set()


def quantization_of(root: pathlib.Path) -> set[str]:
    tree = _tree(root, QUANT_FILE)
    if tree is None:
        return set()
    names = _assignments(tree)
    for key in ("QuantizationMethods", "QUANTIZATION_METHODS"):
        if key in names:
            found = set(_literals(names[key], names))
            if found:
                return found
    for node in ast.walk(tree):  # older: a dict literal of method -> class
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("QUANTIZATION_METHODS", "_QUANTIZATION_CONFIG_REGISTRY")
                                                for t in node.targets):
            return set(_literals(node.value, names))
    return set()


def speculative_methods_of(root: pathlib.Path) -> set[str]:
    for rel in SPEC_FILES:
        tree = _tree(root, rel)
        if tree is None:
            continue
        names = _assignments(tree)
        if "SpeculativeMethod" in names:
            return set(_literals(names["SpeculativeMethod"], names))
    return set()


def ranges(present: list[bool], releases: list[str]) -> str:
    """'0.10.0-' (from 0.10.0 on), '0.8.5-0.19.1' (last seen in 0.19.1), comma-separated when it came back."""
    out, start = [], None
    for i, here in enumerate(present):
        if here and start is None:
            start = i
        if not here and start is not None:
            out.append(f"{releases[start]}-{releases[i - 1]}")
            start = None
    if start is not None:
        out.append(f"{releases[start]}-")
    return ",".join(out)


def table(name: str, per_release: dict[str, set[str]], releases: list[str]) -> list[str]:
    every = sorted(set().union(*per_release.values()))
    lines = [f"[{name}]"]
    for item in every:
        spans = ranges([item in per_release[r] for r in releases], releases)
        lines.append(f'"{item}" = "{spans}"')
    return lines + [""]


def main(argv: list[str]) -> int:
    src = pathlib.Path(argv[1])
    releases = sorted((p.name for p in src.iterdir() if (p / "vllm").is_dir()), key=version_key)
    out = ["# vLLM's own vocabulary per release: `vllm serve` flags, --quantization methods, --kv-cache-dtype",
           "# values and --speculative-config methods. GENERATED by scripts/vllm_vocabulary.py from the Python sources",
           "# of the release wheels on PyPI (https://pypi.org/project/vllm/#history); do not edit by hand.",
           '# A value is the releases it was found in: "0.10.0-" from 0.10.0 to the newest read, "a-b" from a to b.',
           "# Releases between two read ones take the nearer earlier one's vocabulary.",
           'source = "vllm release wheels on PyPI, read statically: engine/arg_utils.py, the frontend cli_args, '
           'config/cache.py CacheDType, model_executor/layers/quantization QuantizationMethods, config/speculative.py"',
           "releases = [" + ", ".join(f'"{r}"' for r in releases) + "]", ""]
    found = {r: _flags_and_switches(src / r) for r in releases}
    out += table("flags", {r: found[r][0] for r in releases}, releases)
    out += ["# flags that take no value (a switch), in the releases where they are one"]
    out += table("switches", {r: found[r][1] for r in releases}, releases)
    out += table("quantization", {r: quantization_of(src / r) for r in releases}, releases)
    out += table("kv_cache_dtype", {r: cache_dtypes_of(src / r) for r in releases}, releases)
    out += table("speculative_method", {r: speculative_methods_of(src / r) for r in releases}, releases)
    sys.stdout.write("\n".join(out).rstrip() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
