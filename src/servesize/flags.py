"""Command-line flags, generated from the declarations in ``servesize.scenario``.

One declaration gives each flag its spelling (vLLM's name with dashes, plus any alias), its
parser and bounds (``Param.parse``: a bad value is one line and exit 2), its help text (with the
default generated from the data it comes from) and its group; the docs' flag table
(docs/flags.md, ``python -m servesize.flags``) is generated from the same declaration.

Every generated flag defaults to None, so "not given" reaches the Scenario as its declared default
and the rules in ``servesize.resolve`` can tell it from a value given explicitly.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from servesize.errors import BadInput
from servesize.scenario import FIT_PARAMS, GROUPS, PARAMS, FitQuery, Param, Scenario

POSITIONAL = ("model",)


def _metavar(p: Param) -> str | None:
    if p.kind == "choice":
        return "{" + ",".join(p.choices) + "}" if len(p.choices) <= 5 else p.metavar or "NAME"
    return p.metavar


def _help(p: Param, default: Any = None) -> str:
    text = p.full_help()
    if p.kind == "choice" and len(p.choices) > 5:
        text += "; one of " + ", ".join(p.choices)
    if default is not None and default is not MISSING and not isinstance(default, bool):
        text += f" (default {default})"
    return text.replace("%", "%%")


def add_param(parser: Any, p: Param, *, required: bool = False, default: Any = None) -> None:
    """One flag (or the MODEL positional) for ``p`` on ``parser`` (a parser or an argument group)."""
    if p.name in POSITIONAL:
        parser.add_argument(p.name, type=p.parse, nargs="?", default=None, metavar=p.metavar or p.name.upper(),
                            help=_help(p))
        return
    if p.kind == "bool":
        parser.add_argument(p.flag, *p.flags, dest=p.name, action=argparse.BooleanOptionalAction, default=None,
                            help=_help(p))
        return
    parser.add_argument(p.flag, *p.flags, dest=p.name, type=p.parse, default=None, required=required,
                        metavar=_metavar(p), help=_help(p, default))


def add_params(parser: argparse.ArgumentParser, params: Iterable[Param], *, required: Iterable[str] = (),
               declared_by: type = Scenario) -> None:
    """Flags for ``params``, one argument group per declared group, in declaration order; the help
    states each declared default (``declared_by``: the dataclass whose defaults apply)."""
    need = set(required)
    defaults = {f.name: f.default for f in fields(declared_by)}
    groups: dict[str, Any] = {}
    params = list(params)
    for p in params:
        if p.name in POSITIONAL:
            add_param(parser, p)
            continue
        if p.group not in groups:
            groups[p.group] = parser.add_argument_group(GROUPS[p.group])
        add_param(groups[p.group], p, required=p.name in need, default=defaults.get(p.name))


class _VllmFlag(argparse.Action):
    """A `vllm serve` flag given to servesize directly (``--trust-remote-code``, ``--port 8001``): kept, in
    order, as the words of a serve line, which ``resolve.served`` reads as vLLM's parser of --vllm-version
    does (listed as changing no figure, named as estimated, refused with why, or not a flag of the release)."""

    def __call__(self, parser, namespace, values, option_string=None):
        words = list(getattr(namespace, self.dest, None) or [])
        words.append(str(option_string) if self.nargs == 0 else f"{option_string}={values}")
        setattr(namespace, self.dest, words)


VLLM_FLAGS_DEST = "vllm_flags"


def add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    """Every long flag of any `vllm serve` release that ``parser`` does not already take (servesize's own
    spellings of the modelled ones win), hidden from --help: what each does is decided per release. Call it
    after every other argument of the parser is added (a command's own --seed is servesize's)."""
    from servesize.engine.vocabulary import flags_of_any_release

    taken = set(parser._option_string_actions)
    for flag, takes in flags_of_any_release().items():
        if flag in taken:
            continue
        parser.add_argument(flag, dest=VLLM_FLAGS_DEST, action=_VllmFlag, nargs=None if takes else 0,
                            default=None, help=argparse.SUPPRESS)


def given(args: argparse.Namespace, params: Iterable[Param]) -> dict[str, Any]:
    """The values the command line gave for ``params`` (flags left out are absent); `vllm serve` flags
    given directly join the --vllm-serve line (after its own words), so one reader classifies both."""
    params = list(params)
    out = {p.name: getattr(args, p.name) for p in params if getattr(args, p.name, None) is not None}
    direct = getattr(args, VLLM_FLAGS_DEST, None)
    if direct and any(p.name == "vllm_serve" for p in params):
        line = out.get("vllm_serve") or "vllm serve"
        out["vllm_serve"] = f"{line} {shlex.join(direct)}"
    return out


def scenario_from_args(args: argparse.Namespace, **overrides: Any) -> Scenario:
    return Scenario(**{**given(args, PARAMS.values()), **overrides})


def fit_query_from_args(args: argparse.Namespace) -> FitQuery:
    return FitQuery(**given(args, FIT_PARAMS.values()))


class _Refusing(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's hook: one line, never a usage dump or an exit
        raise BadInput(message)


def scenario_from_flags(text: str, **overrides: Any) -> Scenario:
    """``"qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8"`` (the arguments of ``servesize plan``) -> Scenario.

    For the measure commands' ``--predict``: the same flags, read by the same declaration."""
    parser = _Refusing(prog="--predict", add_help=False)
    add_params(parser, PARAMS.values(), required=("gpus",))
    add_vllm_flags(parser)
    try:
        args = parser.parse_args(shlex.split(text))
    except ValueError as exc:  # shlex: an unclosed quote
        raise BadInput(f"--predict {text!r}: {exc}") from None
    except BadInput as exc:
        raise BadInput(f"--predict {text!r}: {exc}") from None
    return scenario_from_args(args, **overrides)


def flag_value(p: Param, value: Any) -> str:
    """One typed value as its flag's text, read back to the same value by ``Param.parse``."""
    if p.kind == "float":
        return repr(float(value))
    return str(value)


def flags_of(scenario: Scenario, groups: Iterable[str] | None = None) -> list[str]:
    """The command-line words that give ``scenario`` back (``scenario_from_flags`` reads them):
    MODEL first when it is a name, then a flag per field that differs from its default.

    ``groups``: only the declared groups named (e.g. model and engine for ``--predict``). A field
    held as an object (a Workload, a Calibration, a config.json's content) has no words; the
    caller writes it to a file and passes the file."""
    explicit = scenario.explicit()
    words: list[str] = []
    for name, p in PARAMS.items():
        if name not in explicit or (groups is not None and p.group not in groups):
            continue
        value = explicit[name]
        if p.kind in ("workload", "calibration") and not isinstance(value, str):
            continue
        if p.kind == "model":
            if isinstance(value, str):
                words.insert(0, value)
            continue
        if p.kind == "bool":
            words.append(p.flag if value else f"--no-{name.replace('_', '-')}")
            continue
        words += [p.flag, flag_value(p, value)]
    return words


def flags_text(scenario: Scenario, groups: Iterable[str] | None = None) -> str:
    """``flags_of`` as one shell-quoted line."""
    return shlex.join(flags_of(scenario, groups))


# -- the docs' flag table -------------------------------------------------------------------

def _default_of(cls: type, name: str) -> str:
    f = next(f for f in fields(cls) if f.name == name)
    p = (PARAMS if cls is Scenario else FIT_PARAMS)[name]
    if f.default is MISSING:
        return "required"
    if f.default is None:
        return p.describe_default() or "see help"
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    return f"`{f.default}`"


def _type_of(p: Param) -> str:
    kind = {"tokens": "tokens (32k, 2.77m)", "bytes": "bytes (80GiB, 81559MiB)", "choice": " \\| ".join(p.choices),
            "bool": "on/off", "workload": "file", "calibration": "file", "vllm_int": "vLLM number (8192, 8k, 8K)",
            "vllm_len": "vLLM number (32768, 32k, 32K) or auto", "vllm_bytes": "vLLM number (16G, 16g) or bytes (6.51GiB)",
            "json": "JSON object"}.get(p.kind, p.kind)
    bounds = p.range_text() if p.kind in ("tokens", "bytes", "int", "float", "vllm_int", "vllm_len", "vllm_bytes") else ""
    return f"{kind} {bounds}".strip()


def markdown_table() -> str:
    """docs/flags.md: every flag of memory/plan and fit, from the declaration."""
    out = ["# Flags", "",
           "Generated from `servesize/scenario.py` by `python -m servesize.flags > docs/flags.md`; a test fails when",
           "this page and the declaration disagree. The library takes the same names as keyword arguments of",
           "`servesize.Scenario(...)` / `servesize.fit(...)`; `servesize memory` takes the model and engine groups,",
           "`servesize plan` all of them, `servesize measure sessions` the workload group.", ""]
    for cls, params, heading in ((Scenario, PARAMS, "Scenario (memory, plan)"), (FitQuery, FIT_PARAMS, "fit")):
        out += [f"## {heading}", ""]
        group = None
        for p in params.values():
            if cls is FitQuery and p.name in PARAMS and PARAMS[p.name] is p:
                note = " (as above)"
            else:
                note = ""
            if p.group != group:
                group = p.group
                out += ["", f"### {GROUPS[group]}", "", "| flag | type | default | meaning |", "|---|---|---|---|"]
            spelling = p.name.upper() if p.name in POSITIONAL else ", ".join(f"`{f}`" for f in (p.flag, *p.flags))
            if p.kind == "bool" and p.name not in POSITIONAL:
                spelling += f", `--no-{p.name.replace('_', '-')}`"
            why = f" (bounded: {p.bound_why})" if p.bound_why else ""
            out.append(f"| {spelling} | {_type_of(p)} | {_default_of(cls, p.name)} | {p.help.replace('|', '/')}{why}{note} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
