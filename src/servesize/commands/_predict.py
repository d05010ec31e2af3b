"""`--predict "MODEL --gpus ... [flags]"` for the measure commands: servesize's own prediction, from
the same parser and code path as `servesize memory` / `servesize plan`, to put beside the measurement."""

from __future__ import annotations

import shlex

from servesize.errors import BadInput


def _parse(command: str, text: str):
    from servesize.cli import UsageError, build_parser

    argv = [command, *shlex.split(text)]
    parser = build_parser(load=command)
    try:
        return parser.parse_args(argv)
    except (UsageError, SystemExit) as exc:
        raise BadInput(f"--predict {text!r}: {exc}") from None


def predict_pool(text: str):
    """The KvPool `servesize memory <text>` computes (its usable_kv_tokens is the prediction)."""
    from servesize.commands import memory

    return memory.run(_parse("memory", text)).pool


def predict_plan(text: str):
    """The Plan `servesize plan <text>` computes (warm users, decode ceiling)."""
    from servesize.commands import plan

    args = _parse("plan", text)
    args.no_sensitivity = True
    return plan.run(args)
