"""servesize calibrate --vllm-log FILE [...]: read real vLLM start-up logs, write a calibration."""

from __future__ import annotations

import argparse
import pathlib
from typing import TYPE_CHECKING

from servesize.commands._types import draft_tokens as _draft_tokens
from servesize.commands._types import positive_int as _positive_int
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import MAX_LOG_BYTES, input_lines, read_input

if TYPE_CHECKING:
    from servesize.vllm_logs.calibration import Calibration
    from servesize.vllm_logs.parse import LogFacts

EPILOG = """\
examples:
  servesize calibrate --vllm-log server.log
  servesize calibrate --vllm-log run1.log --vllm-log run2.log --out calibration.json
  servesize calibrate --vllm-log qwen35.log --block-size 784 --kv-cache-groups 4 --json
  servesize calibrate --vllm-log quoted-lines.log --model Qwen/Qwen3-30B-A3B --out calibration.json
  servesize calibrate --vllm-log gdn-mtp.log --kv-cache-groups 4 --mamba-cache-mode align --num-speculative-tokens 2

The log must cover a start-up from launch until vLLM prints its KV-cache lines ('GPU KV cache
size', '# GPU blocks' or 'Available KV cache memory'). With several start-ups in one file, the
last one that did not fail is used. Hybrid models (sliding window, Mamba/GDN) need --block-size
and --kv-cache-groups (servesize memory prints both) before the block count can be pinned down; a
server with speculative decoding, --num-speculative-tokens; where a kernel holds more state blocks,
--blocks-per-request (servesize memory --explain prints it). A log that does not name its model
(lines quoted without vLLM's config line) needs --model before plan applies it to one.
"""


BENCH_DEPLOYMENT = ("gpus", "tensor_parallel_size", "quantization", "kv_cache_dtype", "max_model_len",
                    "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "moe_backend", "vllm_version")


def add_arguments(parser) -> None:
    from servesize.flags import add_params
    from servesize.scenario import PARAMS

    parser.add_argument("--vllm-log", action="append", metavar="FILE", dest="vllm_log",
                        help="a vLLM server log (repeat for several)")
    b = parser.add_argument_group("a benchmark result (--vllm-bench): the step model's efficiencies for one deployment")
    b.add_argument("--vllm-bench", metavar="FILE", dest="vllm_bench",
                   help="a `vllm bench serve` result: the text block it prints, or the JSON --save-result writes; with "
                        "--model and --gpus (and the server's flags), it gives the bandwidth efficiency and prefill MFU "
                        "at which `servesize bench` reproduces its mean TPOT and TTFT; plan, bench and simulate apply it "
                        "to that model, GPU and TP only")
    add_params(parser, [PARAMS[name] for name in BENCH_DEPLOYMENT])
    parser.add_argument("--out", metavar="FILE", help="write the calibration JSON here (default: print a summary only)")
    parser.add_argument("--model", metavar="NAME", type=_model_name,
                        help="the model the log is of, where it does not name one (a quoted log without vLLM's config "
                             "line); plan checks the calibration against the model it is applied to")
    from servesize.vllm_logs.calibration import LOG_HINTS

    for hint in LOG_HINTS:  # what a hybrid model's log does not say (declared once: the explorer shows them too)
        if hint.choices:
            parser.add_argument(hint.flag, choices=list(hint.choices), help=hint.help)
        else:
            kind = _draft_tokens if hint.low == 0 else _positive_int
            parser.add_argument(hint.flag, type=kind, metavar=hint.metavar, help=hint.help,
                                **({"default": 0} if hint.low == 0 else {}))


@frozen
class CalibrateResult:
    items: tuple[tuple[LogFacts, Calibration], ...]
    out: str | None = None

    def to_dict(self) -> dict:
        return {
            "calibrations": [c.to_dict() for _, c in self.items],
            "facts": [f.to_dict() for f, _ in self.items],
            "written_to": self.out,
        }

    def render(self, explain: bool = False) -> str:
        lines: list[str] = []
        for facts, cal in self.items:
            if lines:
                lines.append("")
            lines.append(_heading(facts, cal))
            lines += _fact_rows(facts, explain)
            lines += _calibration_rows(cal)
        if self.out:
            lines += ["", f"calibration written to {self.out}"]
        return "\n".join(lines)


def _heading(facts: LogFacts, cal: Calibration) -> str:
    """Which log, which formula era and release, which start-up, which lines."""
    head = f"{facts.source}: era {cal.era}"
    if cal.vllm_version:
        head += f", vLLM {cal.vllm_version}"
    if facts.startups > 1:
        head += f", start-up {facts.chosen} of {facts.startups}"
    return head + f" (lines {facts.first_line}-{facts.last_line})"


def _fact_value(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value}"


def _fact_rows(facts: LogFacts, explain: bool) -> list[str]:
    """Every fact read, with its line number and worker; under --explain the line itself."""
    rows = [f"  {'line':>6}  {'fact':<28} {'rank':<10} value"]
    for f in facts.facts:
        rows.append(f"  {f.line_no:>6}  {f.name:<28} {f.rank or '-':<10} {_fact_value(f.value)}")
        if explain:
            rows.append(f"  {'':>6}    {f.line[:200]}")
    return rows


def _calibration_rows(cal: Calibration) -> list[str]:
    """The calibration: the KV figures with how each was derived, the memory figures, the notes."""
    rows = ["  calibration:"]
    if cal.available_kv_bytes_per_gpu:
        lo, hi = cal.available_kv_bytes_per_gpu
        rows.append(f"    available KV per GPU   [{lo:,}, {hi:,}) B"
                    + (f" ({cal.available_kv_gib_logged} GiB as logged)" if cal.available_kv_gib_logged is not None else ""))
    rows.append(f"    num_blocks             {cal.num_blocks if cal.num_blocks is None else f'{cal.num_blocks:,}'}"
                f"  ({cal.num_blocks_how})")
    if cal.kv_cache_groups is not None:
        rows.append(f"    KV-cache groups        {cal.kv_cache_groups:,} (as given: plan refuses it for a model grouped otherwise)")
    if cal.kv_cache_tokens_logged is not None:
        rows.append(f"    KV tokens as logged    {cal.kv_cache_tokens_logged:,}")
    if cal.max_concurrency is not None:
        per_request = cal.max_concurrency_tokens or cal.max_model_len
        rows.append(f"    max concurrency        {cal.max_concurrency:.2f}x"
                    + (f" at {per_request:,} tokens" if per_request else " (tokens per request not logged)"))
    pool = "unknown" if cal.pool_tokens is None else f"{cal.pool_tokens:,} tokens"
    rows.append(f"    pool                   {pool}  ({cal.pool_tokens_how})")
    rows += _memory_rows(cal)
    return rows + [f"  note: {n}" for n in cal.notes]


def _memory_rows(cal: Calibration) -> list[str]:
    return [f"    {label:<22} {v} GiB" for label, v in (
        ("weights", cal.weights_gib), ("activation peak", cal.activation_gib), ("non-torch", cal.non_torch_gib),
        ("CUDA graphs", cal.cudagraph_gib), ("GPU total (CUDA)", cal.total_gpu_memory_gib)) if v is not None]


MAX_MODEL_NAME_CHARS = 300  # a Hugging Face id is at most 96 characters per part; a local path a few hundred


def _model_name(text: str) -> str:
    name = text.strip()
    if not name or len(name) > MAX_MODEL_NAME_CHARS:
        raise argparse.ArgumentTypeError(f"give the model's name or Hugging Face id (1 to {MAX_MODEL_NAME_CHARS} characters)")
    return name


def _bench_calibration(args):
    """calibrate --vllm-bench: the step model's efficiencies for the deployment the flags name."""
    from servesize.api import calibrate_bench
    from servesize.flags import scenario_from_args

    if args.vllm_log:
        raise BadInput("give --vllm-log or --vllm-bench, not both (a start-up log and a benchmark calibrate apart)")
    if not args.model or args.gpus is None:
        raise BadInput("--vllm-bench needs the deployment it measured: --model NAME --gpus NxGPU (and -tp, -q, "
                       "--kv-cache-dtype as the server ran)")
    args.vllm_serve = getattr(args, "vllm_serve", None)
    scenario = scenario_from_args(args)
    text = read_input(args.vllm_bench, "benchmark result", MAX_LOG_BYTES).decode("utf-8", errors="replace")
    return calibrate_bench(scenario, text, source=pathlib.Path(args.vllm_bench).name)


def run(args):
    from servesize.vllm_logs.calibration import calibrate
    from servesize.vllm_logs.parse import parse_vllm_log

    if args.vllm_bench:
        cal = _bench_calibration(args)
        _save([cal], args.out)
        return BenchCalibrateResult(cal, args.out)
    if not args.vllm_log:
        raise BadInput("give --vllm-log FILE (a start-up log) or --vllm-bench FILE (a benchmark result)")
    items = []
    for path in args.vllm_log:
        lines = input_lines(path, "--vllm-log", MAX_LOG_BYTES, gunzip=True)  # read as parsed: never held whole
        facts = parse_vllm_log(lines, source=pathlib.Path(path).name)
        cal = calibrate(facts, block_size=args.block_size, kv_cache_groups=args.kv_cache_groups,
                        mamba_cache_mode=args.mamba_cache_mode, blocks_per_request=args.blocks_per_request,
                        num_speculative_tokens=args.num_speculative_tokens, model=args.model)
        items.append((facts, cal))
    _save([c for _, c in items], args.out)
    return CalibrateResult(tuple(items), args.out)


def _save(calibrations: list, out: str | None) -> None:
    from servesize.vllm_logs.files import save_calibrations

    if out:
        try:
            save_calibrations(calibrations, out)
        except OSError as exc:
            raise BadInput(f"--out {out}: cannot write it ({exc.strerror or exc})") from None


@frozen
class BenchCalibrateResult:
    calibration: Calibration
    out: str | None = None

    def to_dict(self) -> dict:
        return {"calibrations": [self.calibration.to_dict()], "written_to": self.out}

    def render(self, explain: bool = False) -> str:
        c = self.calibration
        lines = [f"{c.source}: {c.era}, {c.model} on {c.gpu} (TP {c.tensor_parallel_size})",
                 f"  bandwidth efficiency   {c.bandwidth_efficiency:g}   (plan, bench and simulate: --bandwidth-efficiency)",
                 f"  prefill MFU            {c.mfu:g}   (--mfu)"]
        lines += [f"  note: {n}" for n in c.notes]
        if self.out:
            lines += ["", f"calibration written to {self.out}; pass it as --calibration {self.out}"]
        return "\n".join(lines)
