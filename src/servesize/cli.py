"""The command line: a thin edge over the public API.

Each command lives in ``servesize.commands.<module>`` and exposes ``add_arguments(parser)`` and
``run(args) -> result`` (its one-line help is its row in ``COMMANDS``). The result owns ``to_dict()`` (the
``--json`` document) and ``render(explain)`` (the text, with derivations under
``--explain``). This module only parses, dispatches, prints and maps errors to exit codes:
0 ok, 2 refused or bad input. Modules are imported lazily so ``servesize --help`` stays fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable

from servesize import __version__

# name -> (module, one-line help). Two-word names are subcommands of a group.
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("servesize.commands.models", "the model catalogue: parameters, layers, KV bytes per token"),
    "gpus": ("servesize.commands.gpus", "the GPU catalogue: memory as nvidia-smi reports it, bandwidth, FLOP/s"),
    "fit": ("servesize.commands.fit", "what can these GPUs serve: one row per model (--all: every precision and placement)"),
    "memory": ("servesize.commands.memory", "vLLM's memory budget and KV pool for one deployment, down to the lines it logs"),
    "plan": ("servesize.commands.plan", "warm users, decode speed, latency: which ceiling binds, and the vLLM recipe"),
    "fleet": ("servesize.commands.fleet", "the cheapest fleet for N users (or several teams): GPUs x precision x TP/DP, priced"),
    "calibrate": ("servesize.commands.calibrate", "read real vLLM startup logs and write a calibration file"),
    "workload fit": ("servesize.commands.workload_fit", "fit a workload from request logs: each field from the file or a preset"),
    "measure pool": ("servesize.commands.measure_pool", "measure a live server's real KV pool (unique-id prompts, bisection)"),
    "measure sessions": ("servesize.commands.measure_sessions", "load a live server with simulated agentic users on a ladder"),
    "measure bench": ("servesize.commands.measure_bench", "vllm bench serve's load on a live server: its figures, measured"),
    "measure server": ("servesize.commands.measure_server", "both, one after the other, each beside servesize's prediction"),
    "simulate": ("servesize.commands.simulate", "replay a trace through vLLM's prefix cache: hit rate vs pool, users at a target"),
    "bench": ("servesize.commands.bench", "what `vllm bench serve` will print for a deployment and a load (the engine simulator)"),
    "serve": ("servesize.commands.serve", "the explorer: a local web page over the same engine (127.0.0.1)"),
}

EPILOG = """\
examples:
  servesize fit --gpus 4xH100                      what fits on four H100s at 8k context
  servesize memory llama-3.1-8b --gpus 1xH100 --explain
  servesize memory qwen3.5-27b --gpus 1xH20 --max-model-len 32768 --vllm-version 0.19.0
  servesize plan qwen3.6-27b --gpus 1xH200 --kv-cache-dtype fp8 --median 31k
  servesize measure pool --url http://localhost:8000 --prompt-tokens 1024

Every command takes --json (one JSON document on stdout, nothing else) and --explain
(the derivation of each number). Exit codes: 0 ok, 2 refused or bad input.
"""


BUG_EXIT = 1  # an exception servesize did not expect: a bug, printed as one (one line)


class UsageError(Exception):
    """A command line argparse refused: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError: one line (what is wrong, where the help is)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _available(named: str | None = None) -> dict[str, tuple[str, str]]:
    """The commands whose modules are installed: every one, or the one a command line names (whose parser is then
    the only one built: 17 subparsers cost a start-up 5 ms, each one asking gettext for its translations)."""
    out = {}
    for name, (module, help_) in COMMANDS.items():
        if named is not None and name != named:
            continue
        spec = importlib.util.find_spec(module)
        if spec is not None:
            out[name] = (module, help_)
    return out


def _needs_vllm_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> bool:
    """Whether the command line may name a `vllm serve` flag given directly: some ``--word`` (before any ``=``)
    is not one of the command's own options (an abbreviation included, so argparse resolves it among every
    flag as it always has). When each is one of its own, argparse matches them exactly and never reads the
    ~500 vLLM flags, so the parser goes without them (and without reading data/vllm_vocabulary.toml)."""
    if argv is None:
        return True
    own = parser._option_string_actions
    return any(word == "--" or (word.startswith("--") and word.split("=", 1)[0] not in own) for word in argv)


def build_parser(commands: dict[str, tuple[str, str]] | None = None, load: str | None = None,
                 argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Build the parser; only the command named by ``load`` gets its arguments imported. ``argv``: the words
    it will parse, when known (the `vllm serve` flags are added only when they may be among them)."""
    commands = commands if commands is not None else _available()
    parser = _Parser(
        prog="servesize",
        description="How many users can these GPUs serve, comfortably, and which knob buys more?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"servesize {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, (module, help_) in commands.items():
        if " " in name:
            group, leaf = name.split(" ", 1)
            if group not in groups:
                leaves = ", ".join(n.split(" ", 1)[1] for n in commands if n.startswith(group + " "))
                gp = sub.add_parser(group, help=f"{group} commands ({leaves})")
                groups[group] = gp.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
            p = groups[group].add_parser(leaf, help=help_, description=help_, formatter_class=argparse.RawDescriptionHelpFormatter)
        else:
            p = sub.add_parser(name, help=help_, description=help_, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(_module=module)
        if name == load:
            mod = importlib.import_module(module)
            if getattr(mod, "EPILOG", None):
                p.epilog = mod.EPILOG
            mod.add_arguments(p)
            p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
            p.add_argument("--explain", action="store_true", help="print the derivation of every number")
            if any(action.dest == "vllm_serve" for action in p._actions):
                from servesize.flags import VLLM_FLAGS_DEST, add_vllm_flags

                if _needs_vllm_flags(p, argv):
                    add_vllm_flags(p)  # `vllm serve` flags given directly: read as the --vllm-serve line's
                else:
                    p.set_defaults(**{VLLM_FLAGS_DEST: None})  # the namespace the full parser gives
    return parser


def _command_named(argv: list[str], commands) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    if len(words) >= 2 and f"{words[0]} {words[1]}" in commands:
        return f"{words[0]} {words[1]}"
    if words and words[0] in commands:
        return words[0]
    return None


class _SigTerm(BaseException):
    """SIGTERM outside a measurement (a long plan, fleet or simulate): ended as Ctrl-C ends it."""


def _on_sigterm(signum, frame):
    raise _SigTerm


def main(argv: list[str] | None = None, *, loaded: Callable[[], None] | None = None) -> int:
    """Run one command: its exit code (0 ok, 2 refused, bad input or out of memory, 3 vLLM would not start, 130 Ctrl-C,
    143 SIGTERM, 1 a bug, printed as one). SIGTERM anywhere ends the command with one line, as Ctrl-C does;
    a measurement installs its own handler for the run (the record is closed first). ``loaded``: called once the
    command's module is imported, before it runs (the console script's collector, ``entry``)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return _main(argv, loaded)
    except _SigTerm:
        print("servesize: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("servesize: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        # Inputs are bounded before allocation (limits.MAX_REPLAY_BLOCKS and the rest), but a bounded run can still
        # need more than this machine (or its ulimit) grants: one line, the frames that held the memory already gone.
        print("servesize: out of memory: this input needs more memory than the process was given; use fewer users, "
              "a larger --block-size or a part of the input", file=sys.stderr)
        return 2
    except Exception as exc:  # the last resort: a bug, said to be one (tests/test_fuzz_inputs.py fails if a case reaches it)
        if os.environ.get("SERVESIZE_DEBUG"):
            raise
        text = str(exc).splitlines()[0][:200] if str(exc).strip() else ""
        print(f"servesize: bug: {type(exc).__name__}: {text} -- servesize's fault, not your input's; "
              "rerun with SERVESIZE_DEBUG=1 for the traceback and please report it", file=sys.stderr)
        return BUG_EXIT
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _main(argv: list[str] | None, loaded: Callable[[], None] | None = None) -> int:
    from servesize.errors import ServesizeError

    argv = list(sys.argv[1:] if argv is None else argv)
    named = _command_named(argv, COMMANDS)
    commands = _available(named)
    parser = build_parser(commands, load=named, argv=argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ServesizeError as exc:  # a flag's own parser (31k, 80GiB, ...) refused its value
        print(f"servesize: {exc}", file=sys.stderr)
        return 2
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return 2 if not argv else 0
    try:
        from servesize.commands._outputs import check_outputs

        check_outputs(args)  # before any work: a plot or record that cannot be written is refused now
        run = importlib.import_module(module).run
        if loaded is not None:
            loaded()
        return _emit(run(args), args)
    except ServesizeError as exc:
        print(f"servesize: {exc}", file=sys.stderr)
        code = getattr(exc, "exit_code", 2)
        if code == 3 and getattr(args, "json", False) and hasattr(exc, "to_dict"):
            # vLLM would not start: --json still prints its one document (the refusal and the largest length)
            asked = {k: str(getattr(args, k)) for k in ("model", "gpus") if getattr(args, k, None) is not None}
            from servesize.jsonable import finite

            sys.stdout.write(json.dumps(finite({**asked, **exc.to_dict()}), indent=2, allow_nan=False) + "\n")
        return code
    except BrokenPipeError:
        return 0


def _emit(result, args) -> int:
    """Print a command's result: one JSON document under --json, else its text report."""
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    if getattr(args, "json", False):
        from servesize.jsonable import finite

        document = json.dumps(finite(result.to_dict()), indent=2, default=_json_default, allow_nan=False)
        sys.stdout.write(document + "\n")
    else:
        from servesize.render.engine_text import render_text, renders

        if not renders(result):  # the planner's reports register when render/text.py is imported (the engine's
            import servesize.render.text  # noqa: F401  never need it: memory, fit and models stay light)
        sys.stdout.write(render_text(result, explain=getattr(args, "explain", False)).rstrip("\n") + "\n")
    code = getattr(result, "exit_code", 0)
    if code:  # the report is out, but the command did not do what was asked: say why, on stderr
        sys.stdout.flush()
        reason = getattr(result, "failure", None) or f"the command did not complete (exit {code})"
        print(f"servesize: {reason}", file=sys.stderr)
    return code


def _json_default(obj):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _collect_from_here() -> None:
    """Start-up is over: the modules, classes and tables loaded so far live as long as the process, so they move to
    the collector's permanent generation (``gc.freeze``) and collection resumes for what the command allocates.
    Only the console script's process: a caller of ``main`` (the tests, a library user) keeps its collector as it
    was, its garbage never frozen."""
    gc.freeze()
    gc.enable()


def entry() -> None:
    """The console script (and ``python -m servesize``). Start-up allocates some hundred thousand long-lived objects
    (modules, classes, the catalogues) and no cyclic garbage, so the collector is off until the command's modules are
    loaded (``_collect_from_here``); at the end, what is left is frozen, so the interpreter's last collection does not
    walk it (refcounting frees it; records and files are closed by then). Measured: ``servesize memory`` 76 -> 67 ms of
    CPU (docs/benchmarks.md)."""
    gc.disable()
    try:
        code = main(loaded=_collect_from_here)
    finally:
        gc.enable()
    gc.freeze()
    sys.exit(code)
