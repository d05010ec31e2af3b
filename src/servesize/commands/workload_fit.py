"""``servesize workload fit FILE``: a workload from request logs, every field fitted from the file or left to a preset."""

from __future__ import annotations

import argparse

from servesize.units import parse_tokens

EPILOG = """\
formats (detected from the content; .gz allowed):
  CSV with a header            --column NAME, else prompt_tokens / input_tokens / ContextTokens / ...;
                               output_tokens / completion_tokens / GeneratedTokens, cached_tokens,
                               think_time, session_id + timestamp, class (subagent) where present
  JSONL or a JSON array        OpenAI usage records (prompt, completion and cached tokens),
                               Anthropic usage, Claude Code sessions (requests[].in/out/t, hash_ids,
                               subagents), Mooncake traces (input/output_length, hash_ids), or --column a.b.c
what is measured: the prompt tokens of each request (cached tokens included): in agentic
traffic a request resends its whole session, so its prompt is the session's resident length.

Nothing is dropped unless --min-tokens or --max-model-len asks (the count dropped is always
printed); rows that cannot be read are skipped and counted. A field the file cannot say is left to --preset and
marked so in the file written; `plan --workload FILE` fills it from that preset.

examples:
  servesize workload fit requests.csv --column prompt_tokens --preset chat --out workload.json --plot fit.png
  servesize workload fit claude-code-sessions.jsonl.gz --out workload.toml
  servesize plan qwen3.6-27b --gpus 1xH200 --workload workload.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from servesize.workload.catalogue import DEFAULT_PRESET, preset_names
    from servesize.workload.fit import DISTRIBUTIONS, POOR_FIT_D, TAIL_EXCESS_MAX

    parser.add_argument("file", metavar="FILE", help="request log: CSV, JSONL or JSON (gzip allowed)")
    parser.add_argument("--column", metavar="NAME", default=None,
                        help="the column (CSV) or dotted field (JSON, e.g. usage.prompt_tokens) holding prompt tokens")
    parser.add_argument("--preset", choices=preset_names(), default=None, metavar="NAME",
                        help=f"the preset for what the file does not say ({', '.join(preset_names())}; "
                             f"default {DEFAULT_PRESET})")
    parser.add_argument("--min-tokens", metavar="N", type=parse_tokens, default=0,
                        help="drop requests shorter than this before fitting (default 0: nothing dropped; the "
                             "seed dropped < 1000, which biases short workloads up)")
    parser.add_argument("--prefix-tokens", metavar="N", type=parse_tokens, default=None,
                        help="shared system prefix of the user class (default: from the file when it says, "
                             "else the preset's)")
    parser.add_argument("--max-model-len", metavar="N", type=parse_tokens, default=None,
                        help="a deployment's max_model_len: prompts longer are left out (and counted), as vLLM "
                             "refuses them, so the workload is the requests that deployment accepts (what "
                             "`simulate --engine` replays and plans beside it; default: every prompt)")
    parser.add_argument("--distribution", choices=DISTRIBUTIONS, default="auto",
                        help=f"session lengths: log-normal, the observed distribution itself (empirical), or "
                             f"auto: empirical when the log-normal's KS D >= {POOR_FIT_D:g}, or when it expects more than "
                             f"{TAIL_EXCESS_MAX:g} prompts past the longest read (a trace capped at a context, or "
                             "cut at --max-model-len) (default auto)")
    parser.add_argument("--out", metavar="PATH", default=None,
                        help="write the workload file (JSON, or TOML for .toml) that `plan --workload` reads")
    parser.add_argument("--plot", metavar="PNG", default=None,
                        help="write the fit's histogram and its CDF beside the observed one")


def run(args):
    from servesize.api import fit_workload
    from servesize.errors import BadInput
    from servesize.render.plots import plot_fit
    from servesize.workload.files import write_workload

    if args.max_model_len is not None and args.max_model_len < 1:
        raise BadInput(f"--max-model-len must be at least 1 token, got {args.max_model_len}", field="max_model_len")
    result = fit_workload(args.file, column=args.column, min_tokens=args.min_tokens, prefix_tokens=args.prefix_tokens,
                          preset=args.preset, distribution=args.distribution, max_model_len=args.max_model_len)
    if args.out:
        write_workload(result, args.out)
    if args.plot:
        result.plot = plot_fit(result, args.plot)
    return result
