"""``servesize workload fit FILE``: fit a log-normal session-length workload from request logs."""

from __future__ import annotations

import argparse

from servesize.units import parse_tokens

HELP = "fit a log-normal session-length workload from request logs"
EPILOG = """\
formats (detected from the content; .gz allowed):
  CSV with a header            --column NAME, else prompt_tokens / input_tokens / input_length / ...
  JSONL or a JSON array        OpenAI usage records (usage.prompt_tokens, cached_tokens),
                               Anthropic usage, Claude Code sessions (requests[].in),
                               Mooncake traces (input_length), or --column a.b.c
what is measured: the prompt tokens of each request (cached tokens included): in agentic
traffic a request resends its whole session, so its prompt is the session's resident length.

examples:
  servesize workload fit requests.csv --column prompt_tokens --out workload.json --plot fit.png
  servesize workload fit claude-code-sessions.jsonl.gz --out workload.toml
  servesize plan qwen3.6-27b --gpus 1xH200 --workload workload.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="request log: CSV, JSONL or JSON (gzip allowed)")
    parser.add_argument("--column", metavar="NAME", default=None,
                        help="the column (CSV) or dotted field (JSON, e.g. usage.prompt_tokens) holding prompt tokens")
    parser.add_argument("--min-tokens", metavar="N", type=parse_tokens, default=1000,
                        help="drop requests shorter than this before fitting (default 1000, as the seed did)")
    parser.add_argument("--prefix-tokens", metavar="N", type=parse_tokens, default=None,
                        help="shared system prefix of the user class (default: from the file when it says, else 15k)")
    parser.add_argument("--out", metavar="PATH", default=None,
                        help="write the workload file (JSON, or TOML for .toml) that `plan --workload` reads")
    parser.add_argument("--plot", metavar="PNG", default=None, help="write a histogram + fitted density plot")


def run(args):
    from servesize.render.plots import plot_fit
    from servesize.workload.files import write_workload
    from servesize.workload.fit import fit_observations
    from servesize.workload.readers import read_token_counts

    result = fit_observations(read_token_counts(args.file, args.column), min_tokens=args.min_tokens,
                              prefix_tokens=args.prefix_tokens)
    if args.out:
        write_workload(result, args.out)
    if args.plot:
        result.plot = plot_fit(result, args.plot)
    return result
