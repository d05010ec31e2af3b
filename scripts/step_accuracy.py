"""The step model against measured `vllm bench serve` runs: fit on one part, report on the other.

    PYTHONPATH=src python scripts/step_accuracy.py                 # the table (docs/accuracy.md), today's terms
    PYTHONPATH=src python scripts/step_accuracy.py --fit           # search the step terms on the fit part
    PYTHONPATH=src python scripts/step_accuracy.py --write         # also write tests/fixtures/measured/step-accuracy.json
    PYTHONPATH=src python scripts/step_accuracy.py --joint decode.expert_union,step.moe_expert_efficiency
                                                                   # two terms' grids together, then the table

Every run is a fixture in tests/fixtures/measured (its URL and quoted lines, or the aiconfigurator row) and is
predicted by `servesize bench` (servesize.api.bench: the engine simulator priced by the step model). The split
is by deployment (model x GPU x TP), made once by a hash of the deployment's name, so that a held-out run is of
a deployment the fit never saw. Runs servesize cannot express (a model the catalogue lacks, a GPU it does not
list, pipeline parallelism, speculative decoding without its acceptance) are listed with the reason.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import pathlib
import shlex
import statistics
import sys
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[1]
MEASURED = ROOT / "tests" / "fixtures" / "measured"
PUBLISHED = ("vllm-bench-published-other.json", "vllm-bench-published-vllm-repo.json")
AIC_CSV = MEASURED / "aiconfigurator-silicon-vllm.csv"
RESULT = MEASURED / "step-accuracy.json"

# published model ids -> the catalogue's name (servesize models), where the catalogue holds the same geometry
MODELS = {
    "deepseek-ai/DeepSeek-R1": ("deepseek-r1", ""),
    "deepseek-ai/DeepSeek-V3.1": ("deepseek-v3.1", ""),
    "deepseek-ai/DeepSeek-V3.2": ("deepseek-v3.2", ""),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("qwen3-next-80b-a3b-thinking", "the Thinking model's geometry (same config)"),
    "Qwen/Qwen2.5-32B": ("qwen2.5-32b", ""),
    "Qwen/Qwen2-7B-Instruct": ("qwen2.5-7b", "Qwen2.5-7B's geometry: 28 layers, 3,584 wide, 4 KV heads, as Qwen2-7B"),
    "Qwen/Qwen3-30B-A3B": ("qwen3-30b-a3b", ""),
    "Qwen/Qwen3-32B": ("qwen3-32b", ""),
    "amd/Llama-3.3-70B-Instruct-FP8-KV": ("llama-3.3-70b", "served as FP8 weights with an FP8 KV cache"),
}
GPUS = {"H100": "H100-SXM", "H100-SXM": "H100-SXM", "H100-NVL": "H100-NVL", "H200": "H200-SXM",
        "H200-SXM": "H200-SXM", "A100-80GB": "A100-SXM", "A100-SXM": "A100-SXM", "B200": "B200", "MI300X": "MI300X",
        "MI355X": "MI355X", "L40S": "L40S", "RTX-4090": "RTX-4090", "H20": "H20", "H20-3e": "H20-3E"}
QUANT = {"bf16": "bf16", "fp8": "fp8", "native": None}
SERVER_FLAGS = ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization",
                "--kv-cache-dtype", "--block-size")
QUANTITIES = ("tpot", "ttft", "output_throughput")
MEASURED_KEY = {"tpot": "mean_tpot_ms", "ttft": "mean_ttft_ms", "output_throughput": "output_throughput"}


@dataclass
class Case:
    id: str
    source: str
    url: str
    deployment: str
    family: str
    gpu: str
    argv: list[str] | None
    reason: str = ""
    measured: dict = field(default_factory=dict)
    predicted: dict = field(default_factory=dict)
    peer: dict = field(default_factory=dict)

    @property
    def split(self) -> str:
        """'fit' or 'held-out': by a hash of the deployment, never by row."""
        return "fit" if hashlib.sha256(self.deployment.encode()).digest()[0] % 2 == 0 else "held-out"


def _family(model: str) -> str:
    name = model.lower()
    for family in ("deepseek", "qwen3-next", "qwen3", "qwen2", "llama", "mistral", "gpt-oss", "glm", "kimi", "minimax"):
        if family in name:
            return family
    return name.split("/")[-1].split("-")[0]


def _server_flags(text: str | None) -> list[str]:
    words = (text or "").replace(";", " ").split()
    out = []
    for i, w in enumerate(words[:-1]):
        if w in SERVER_FLAGS:
            out += [w, words[i + 1]]
    return out


def _why_not(run: dict, load: dict, flags: str) -> list[str]:
    """What servesize bench cannot express of a published run (empty: it can)."""
    model, gpu_raw = run["model"], run["gpu"].split(" ")[0]
    why = []
    if model not in MODELS:
        why.append(f"{model} is not in the catalogue")
    if gpu_raw not in GPUS:
        why.append(f"GPU {run['gpu']!r} is not catalogued")
    if "pipeline-parallel" in flags or "PP2" in run.get("notes", ""):
        why.append("pipeline parallelism is not modelled")
    if run.get("speculative"):
        why.append("speculative decoding's acceptance is not stated")
    if (load.get("dataset") or "random") != "random" or not load.get("input_len") or not load.get("output_len"):
        why.append("not the random dataset with stated lengths")
    if math.isfinite(_rate(load)) and load.get("max_concurrency"):
        why.append("a request rate with a concurrency cap is not modelled")
    if run.get("data_parallel_size", 1) != 1 or run.get("expert_parallel"):
        why.append("data or expert parallelism")
    return why


def _published_case(run: dict, source: str) -> Case:
    load = run["load"]
    model = run["model"]
    gpu_raw = run["gpu"].split(" ")[0]
    deployment = f"{model} {run['gpus']}x{gpu_raw} TP{run['tensor_parallel_size']}"
    case = Case(run["id"], source, run["url"], deployment, _family(model), gpu_raw, None)
    m = run["measured"]
    case.measured = {"tpot": m.get("mean_tpot_ms"), "ttft": m.get("mean_ttft_ms"),
                     "output_throughput": m.get("output_throughput")}
    flags = load.get("other_flags") or ""
    why = _why_not(run, load, flags)
    if why:
        case.reason = "; ".join(why)
        return case
    name, _ = MODELS[model]
    argv = [name, "--gpus", f"{run['gpus']}x{GPUS[gpu_raw]}", "-tp", str(run["tensor_parallel_size"])]
    q = QUANT.get(run["quantization"].split(" ")[0].lower())
    if q:
        argv += ["-q", q]
    if run.get("kv_cache_dtype", "auto") not in (None, "auto"):
        argv += ["--kv-cache-dtype", run["kv_cache_dtype"]]
    server = _server_flags(flags)
    argv += server
    if "--max-model-len" not in server:  # the run does not say: the longest that starts (a run that started did)
        argv += ["--max-model-len", "auto"]
    argv += ["--random-input-len", str(load["input_len"]), "--random-output-len", str(load["output_len"]),
             "--num-prompts", str(load["num_prompts"])]
    if load.get("range_ratio"):
        argv += ["--random-range-ratio", str(load["range_ratio"])]
    if load.get("max_concurrency"):
        argv += ["--max-concurrency", str(load["max_concurrency"])]
    if math.isfinite(_rate(load)):
        argv += ["--request-rate", str(_rate(load))]
    if _sent_ready_check(run):
        argv += ["--ready-check-timeout-sec", "600"]
    case.argv = argv
    return case


def _sent_ready_check(run: dict) -> bool:
    """Whether the run's client sent its first prompt alone before the run (the ready check, simulate/bench.py):
    vLLM's benchmark_serving.py always did, and a `vllm bench serve` that printed "Initial test run completed" did
    (its default skips it since PR #30975, 2025-12-18)."""
    from servesize.vllm_logs.bench_result import READY_CHECK_LINE

    quote = "\n".join(run.get("quote", []))
    return "benchmark_serving.py" in quote or READY_CHECK_LINE in quote


def _rate(load: dict) -> float:
    r = load.get("request_rate")
    return math.inf if r in (None, "inf") else float(r)


def published_cases() -> list[Case]:
    cases = []
    for name in PUBLISHED:
        path = MEASURED / name
        if path.exists():
            cases += [_published_case(run, name) for run in json.loads(path.read_text())["runs"]]
    return cases


def aiconfigurator_cases() -> list[Case]:
    """The aiconfigurator rows (see tests/fixtures/measured/aiconfigurator-NOTICE.md): a hook filled once the
    extraction's columns are mapped (aic_case)."""
    if not AIC_CSV.exists():
        return []
    from aic_rows import aic_case  # scripts/aic_rows.py: the row -> Case mapping

    with AIC_CSV.open(newline="") as fh:
        return [aic_case(row, Case) for row in csv.DictReader(fh)]


def predict_argv(argv: list[str], terms: dict | None = None) -> dict | str:
    """`servesize bench ARGV` in this process, under ``terms`` (assumption defaults): the metrics, or the refusal."""
    from servesize.cli import build_parser
    from servesize.commands.bench import run as bench_run
    from servesize.errors import ServesizeError

    if terms:
        set_terms(terms)
    parser = build_parser(load="bench", argv=["bench", *argv])
    try:
        result = bench_run(parser.parse_args(["bench", *argv]))
    except (ServesizeError, SystemExit) as exc:
        return f"servesize refuses it: {exc}"
    m = result.metrics
    return {"tpot": m["mean_tpot_ms"], "ttft": m["mean_ttft_ms"], "output_throughput": m["output_throughput"]}


def _task(job: tuple[list[str], dict | None]) -> dict | str:
    return predict_argv(*job)


def predict_all(cases: list[Case], terms: dict | None = None, workers: int = 1) -> None:
    """Predict every expressed case (in ``workers`` processes); a refusal becomes the case's reason."""
    todo = [c for c in cases if c.argv is not None]
    jobs = [(c.argv, terms) for c in todo]
    if workers > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_task, jobs, chunksize=1)
    else:
        results = [_task(j) for j in jobs]
    for c, r in zip(todo, results):
        if isinstance(r, str):
            c.reason, c.argv, c.predicted = r, None, {}
        else:
            c.predicted = r


def error(case: Case, quantity: str, which: str = "predicted") -> float | None:
    """predicted / measured - 1 (``which``: 'predicted', or 'peer' for aiconfigurator's own estimate)."""
    measured, predicted = case.measured.get(quantity), getattr(case, which).get(quantity)
    if not measured or predicted is None:
        return None
    return predicted / measured - 1.0


def summary(cases: list[Case]) -> dict:
    out = {}
    for q in QUANTITIES:
        errs = [abs(e) for c in cases if (e := error(c, q)) is not None]
        out[q] = {"n": len(errs), "median_abs_error": statistics.median(errs) if errs else None,
                  "within_25": sum(e <= 0.25 for e in errs) / len(errs) if errs else None}
    return out


# the step model before it was fitted (servesize 0.x until #28): what "before" in docs/accuracy.md is
BEFORE = {"decode.bandwidth_efficiency": 0.7, "decode.step_overhead_s": 0.0019, "step.overhead_per_layer_s": 0.0,
          "step.overhead_per_tp_doubling_s": 0.0, "step.request_fixed_s": 0.0, "prefill.mfu": 0.45, "step.mixed": "sum",
          "prefill.weight_floor": False, "step.kernel_efficiency_fp8_tensor": 1.0,
          "step.kernel_efficiency_fp8_block": 1.0, "step.kernel_efficiency_fp4": 1.0, "step.kernel_efficiency_int4": 1.0,
          "step.kernel_efficiency_int8": 1.0, "step.vendor_efficiency_amd": 1.0, "step.moe_expert_efficiency": 1.0,
          "step.moe_prefill_efficiency": 1.0, "step.prefill_efficiency_fp8": 1.0,
          "decode.expert_union": "linear", "step.fp4_moe_kernel_rate": "memory", "step.bf16_moe_kernel_rate": "fitted",
          "prefill.tp_efficiency_per_doubling": 0.9,
          "step.moe_layer_fixed_s": 0.0, "step.overhead_per_layer_tp_doubling_s": 0.0, "step.moe_prefill_scope": "all",
          "decode.roofline": "max", "step.gpu_memory_kernels": "catalogue", "step.gpu_fp8_prefill_kernels": "fitted"}


def _median_abs(cases: list[Case], q: str, which: str = "predicted") -> tuple[float | None, int]:
    errs = [abs(e) for c in cases if (e := error(c, q, which)) is not None]
    return (statistics.median(errs) if errs else None), len(errs)


def table(rows: dict[str, list[Case]], before: dict[str, dict]) -> str:
    """Per group: the median |error| before the fit -> now, the share of TPOT within 25% now, and the peer's."""
    lines = ["| runs | n | TPOT before -> now | TPOT within 25% | TTFT before -> now | output tok/s before -> now | "
             "aiconfigurator TPOT / TTFT |", "|---|---:|---:|---:|---:|---:|---:|"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    for label, cases in rows.items():
        if not cases:
            continue
        s = summary(cases)
        olds = [Case(c.id, c.source, c.url, c.deployment, c.family, c.gpu, c.argv, measured=c.measured,
                     predicted=before.get(c.id, {})) for c in cases]
        cells = []
        for q in QUANTITIES:
            now, n = _median_abs(cases, q)
            was, _ = _median_abs(olds, q)
            cells.append("-" if n == 0 else f"{pct(was)} -> {pct(now)}")
        peer = [_median_abs(cases, q, "peer") for q in ("tpot", "ttft")]
        peer_text = "-" if peer[0][1] == 0 else f"{pct(peer[0][0])} / {pct(peer[1][0])} ({peer[0][1]})"
        lines.append(f"| {label} | {len(cases)} | {cells[0]} | {pct(s['tpot']['within_25'])} | {cells[1]} | {cells[2]} | "
                     f"{peer_text} |")
    return "\n".join(lines)


def groups(expressed: list[Case]) -> dict[str, list[Case]]:
    """The table's rows: each part whole, then by source, model family and GPU."""
    rows: dict[str, list[Case]] = {}
    for part in ("fit", "held-out"):
        mine = [c for c in expressed if c.split == part]
        rows[f"**{part}**"] = mine
        for label, key in (("source", lambda c: c.source.replace("vllm-bench-published-", "published ")),
                           ("family", lambda c: c.family), ("GPU", lambda c: c.gpu)):
            for value in sorted({key(c) for c in mine}):
                rows[f"{part}, {label} {value}"] = [c for c in mine if key(c) == value]
    return rows


# a MoE layer's kernel's fixed part, measured alone: the median over aiconfigurator's measured MoE kernel series of the
# 1-token latency less its k experts' bytes at the series' every-expert rate (data/assumptions.toml step.moe_layer_fixed_s)
MOE_LAYER_FIXED_MEASURED_S = 2.74e-05

# the terms the fit searches, each over a bounded grid (data/assumptions.toml holds what it found, with its source)
SEARCH: dict[str, list] = {
    "decode.step_overhead_s": [0.0, 0.0005, 0.001, 0.0015, 0.002, 0.003],
    "step.overhead_per_layer_s": [0.0, 0.00001, 0.00002, 0.00003, 0.00004],
    "step.overhead_per_tp_doubling_s": [0.0, 0.00025, 0.0005, 0.001],
    # two all-reduces a layer: per layer per doubling (the flat term above prices a 36-layer model's as an 80-layer one's)
    "step.overhead_per_layer_tp_doubling_s": [0.0, 3.5e-06, 7e-06, 1.4e-05],
    # none, or what vLLM's MoE kernels measure alone (tests/test_step_model.py recomputes it from their rows)
    "step.moe_layer_fixed_s": [0.0, MOE_LAYER_FIXED_MEASURED_S],
    "decode.bandwidth_efficiency": [0.6, 0.65, 0.7, 0.75, 0.8, 0.85],
    # bounded by what vLLM's prefill kernels reach alone (about 0.66 of the dense peak in aiconfigurator's measured
    # kernel tables, #28): a larger value would be the fit hiding a queueing error in a kernel speed
    "prefill.mfu": [0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.66, 0.7],
    "prefill.tp_efficiency_per_doubling": [0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
    "step.request_fixed_s": [0.0, 0.005, 0.01, 0.02, 0.03, 0.04],
    "step.mixed": ["sum", "one_weight_read"],
    "decode.expert_union": ["linear", "expected"],
    # a decode step's KV read overlapped with its GEMMs' compute (max), or after their roofline as in a mixed step
    "decode.roofline": ["max", "sequential"],
    "prefill.weight_floor": [False, True],
    "step.kernel_efficiency_fp8_tensor": [0.6, 0.8, 1.0],
    "step.kernel_efficiency_fp8_block": [0.4, 0.5, 0.6, 0.7, 0.8, 1.0],
    "step.kernel_efficiency_fp4": [0.6, 0.75, 0.9, 1.0],
    "step.vendor_efficiency_amd": [0.5, 0.75, 1.0],
    "step.moe_expert_efficiency": [0.5, 0.7, 0.85, 1.0],
    # floored at 0.3: searched down to 0.15 (2026-12-04 night), the fit part took 0.2 for MiniMax-M2.5's TTFT while the
    # held-out TTFT went 22% -> 37% (gpt-oss, a MoE, 11% -> 36%): the fit hiding a MiniMax queueing error in a kernel speed
    "step.moe_prefill_efficiency": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    # the efficiency on a MoE prefill's every FLOP, or on its routed experts' GEMMs alone (what the kernels measure)
    "step.moe_prefill_scope": ["all", "experts"],
    "step.prefill_efficiency_fp8": [0.4, 0.5, 0.6, 0.7, 0.8, 1.0],
}
CLIP = 1.5  # a log error past this (4.5x) counts as this: one run the model cannot express does not steer the fit


def set_terms(terms: dict) -> None:
    """Make ``terms`` the assumptions' defaults in this process (what a fitted data/assumptions.toml would say)."""
    from servesize.assumptions import modelled_assumptions

    table = modelled_assumptions()
    for name, value in terms.items():
        table[name]["default"] = value


def lockstep_replay(case: Case) -> bool:
    """Whether the replay sends exact-length prompts from several closed-loop clients: its slots then send in
    lock-step waves whose TTFT the measured run need not have had (what desynchronised the real slots is not
    recorded: docs/accuracy.md "Fixed-length sweeps")."""
    argv = case.argv or []

    def flag(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    return (int(flag("--max-concurrency", "1")) > 1 and flag("--request-rate", "inf") == "inf"
            and float(flag("--random-range-ratio", "0")) == 0)


def loss(cases: list[Case], terms: dict, workers: int) -> float:
    """Mean over the deployments of the mean over their runs and quantities of |log(predicted / measured)|, clipped
    at CLIP: each deployment counts once, so that one deployment swept 84 times (MiniMax-M2.5) does not set a term
    for every model. A quantity a case does not measure is not counted."""
    predict_all(cases, terms, workers)
    per = deployment_errors(cases)
    return sum(_deployment_mean(qs) for qs in per.values()) / max(len(per), 1)


def _deployment_mean(errors: dict[str, list[float]]) -> float:
    """One deployment's mean |log error| over its runs and quantities (each run's each quantity counts once)."""
    return sum(v for vs in errors.values() for v in vs) / sum(len(vs) for vs in errors.values())


def deployment_errors(cases: list[Case]) -> dict[str, dict[str, list[float]]]:
    """Per deployment, per quantity: each predicted run's |log(predicted / measured)|, clipped at CLIP (the loss's
    terms)."""
    per: dict[str, dict[str, list[float]]] = {}
    for c in cases:
        for q in QUANTITIES:
            e = error(c, q)
            if e is not None:
                per.setdefault(c.deployment, {}).setdefault(q, []).append(min(abs(math.log1p(e)), CLIP) if e > -1 else CLIP)
    return per


def deployment_table(cases: list[Case]) -> str:
    """Each deployment's share of the loss: its mean |log error| over runs and quantities, and per quantity."""
    lines = []
    for dep, qs in sorted(deployment_errors(cases).items()):
        parts = " ".join(f"{q} {sum(vs) / len(vs):.2f}" for q, vs in qs.items())
        lines.append(f"  {dep[:52]:52} {_deployment_mean(qs):.3f}  ({parts})")
    return "\n".join(lines)


def shortened(case: Case, per_slot: int) -> Case:
    """The case with at most ``per_slot`` prompts per concurrency slot (the fit's evaluations, for speed)."""
    argv = list(case.argv or [])
    if "--max-concurrency" in argv and "--num-prompts" in argv:
        c = int(argv[argv.index("--max-concurrency") + 1])
        i = argv.index("--num-prompts") + 1
        argv[i] = str(min(int(argv[i]), per_slot * c))
    return Case(case.id, case.source, case.url, case.deployment, case.family, case.gpu, argv, measured=case.measured)


def defaults(names) -> dict:
    """The assumptions' current defaults (data/assumptions.toml, or what set_terms made them) of ``names``."""
    from servesize.assumptions import modelled_assumptions

    return {name: modelled_assumptions()[name]["default"] for name in names}


def fit(cases: list[Case], rounds: int = 2, workers: int = 2, start: dict | None = None,
        only: list[str] | None = None) -> dict:
    """Coordinate search: each term in turn over its grid, the others held, ``rounds`` times; a term whose grid the
    fit part does not move (no run it touches) keeps its default."""
    terms = defaults(SEARCH)
    terms.update(start or {})
    best = loss(cases, terms, workers)
    print(f"start: loss {best:.4f}", file=sys.stderr)
    for r in range(rounds):
        for name, grid in SEARCH.items():
            if only and name not in only:
                continue
            scores = {}
            for value in grid:
                scores[value] = best if value == terms[name] else loss(cases, {**terms, name: value}, workers)
            value = min(scores, key=lambda v: (round(scores[v], 6), v != terms[name]))
            spread = max(scores.values()) - min(scores.values())
            if scores[value] < best - 1e-6:
                terms[name], best = value, scores[value]
            print(f"round {r + 1} {name}: {terms[name]!r} (loss {best:.4f}; spread over the grid {spread:.4f})",
                  file=sys.stderr)
    return terms


def joint(cases: list[Case], names: list[str], workers: int = 2) -> dict:
    """Every combination of the grids of ``names`` (two or three terms of SEARCH), the others at their defaults: the
    loss of each, and the best. A coordinate search moves one term at a time, so it misses an optimum two terms
    reach only together (``decode.expert_union`` 'expected' is worse than 'linear' alone, better beside a lower
    ``step.moe_expert_efficiency``)."""
    import itertools

    base = defaults(SEARCH)
    scores = {}
    for combo in itertools.product(*(SEARCH[n] for n in names)):
        scores[combo] = loss(cases, {**base, **dict(zip(names, combo))}, workers)
        print(f"{dict(zip(names, combo))}: loss {scores[combo]:.4f}", file=sys.stderr, flush=True)
    best = min(scores, key=lambda c: scores[c])
    return {**base, **dict(zip(names, best))}


def _searched(args: argparse.Namespace, cases: list[Case], joint_terms: list[str]) -> dict | None:
    """The terms ``--joint`` or ``--fit`` finds on the fit part, made the defaults in this process (None: neither)."""
    if not (joint_terms or args.fit):
        return None
    part = [shortened(c, args.fit_prompts_per_slot) for c in cases if c.argv is not None and c.split == "fit"]
    if args.skip_lockstep_ttft:  # a what-if loss (docs/accuracy.md: tried 2026-12-05, not kept)
        for c in part:
            if lockstep_replay(c):
                c.measured = {q: v for q, v in c.measured.items() if q != "ttft"}
    if joint_terms:
        found = joint(part, joint_terms, args.workers)
        print("best of the joint grid: " + json.dumps({n: found[n] for n in joint_terms}))
    else:
        found = fit(part, args.rounds, args.workers, json.loads(args.start) if args.start else None,
                    args.terms.split(",") if args.terms else None)
        print("fitted terms: " + json.dumps(found))
    set_terms(found)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write tests/fixtures/measured/step-accuracy.json")
    ap.add_argument("--only", default=None, help="only runs whose id contains this")
    ap.add_argument("--skip-lockstep-ttft", action="store_true",
                    help="while fitting, leave out the TTFT of replays sent in lock-step waves (exact lengths, "
                         "several closed-loop clients): a what-if loss, tried 2026-12-05 and not kept")
    ap.add_argument("--replay-extra", default=None, metavar="FLAGS",
                    help="flags added to every run's servesize bench line, e.g. '--random-range-ratio 0.05' (a what-if "
                         "replay, not the runs as recorded; refused with --write)")
    ap.add_argument("--fit", action="store_true", help="search the step terms on the fit part, then report with them")
    ap.add_argument("--rounds", type=int, default=2, help="coordinate-search rounds (default 2)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--start", default=None, metavar="JSON", help="the terms the search starts from (default: the "
                                                                  "assumptions' defaults)")
    ap.add_argument("--terms", default=None, metavar="A,B",
                    help="search only these terms (default: every term in SEARCH); the others keep their defaults")
    ap.add_argument("--joint", default=None, metavar="A,B",
                    help="search these two or three terms together, every combination of their grids (the others at "
                         "their defaults), then report with the best")
    ap.add_argument("--fit-prompts-per-slot", type=int, default=10,
                    help="while fitting, at most this many prompts per --max-concurrency slot (default 10: every load "
                         "as measured; fewer is faster but the first wave, every slot at once, is then a larger share "
                         "of the requests and its queue inflates TTFT: at 4 the search took MFU to its bound)")
    args = ap.parse_args()
    if args.replay_extra and args.write:
        ap.error("--replay-extra replays the runs otherwise than recorded: it does not write the fixture")
    joint_terms = args.joint.split(",") if args.joint else []
    if joint_terms and (args.fit or not 2 <= len(joint_terms) <= 3 or not set(joint_terms) <= set(SEARCH)):
        ap.error("--joint takes two or three terms the fit searches (SEARCH), and not with --fit")
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    cases = published_cases() + aiconfigurator_cases()
    if args.only:
        cases = [c for c in cases if args.only in c.id]
    if args.replay_extra:
        for c in cases:
            if c.argv is not None:
                c.argv = [*c.argv, *shlex.split(args.replay_extra)]
    found = _searched(args, cases, joint_terms)
    now = found or defaults(BEFORE)  # before BEFORE is set
    predict_all(cases, BEFORE, args.workers)
    before = {c.id: dict(c.predicted) for c in cases if c.argv is not None}
    predict_all(cases, now, args.workers)
    expressed = [c for c in cases if c.argv is not None]
    rows = {"fit": [c for c in expressed if c.split == "fit"],
            "held-out": [c for c in expressed if c.split == "held-out"]}
    print(table(groups(expressed), before))
    print()
    for c in expressed:
        errs = " ".join(f"{q} {100 * e:+.0f}%" for q in QUANTITIES if (e := error(c, q)) is not None)
        print(f"{c.split:8} {c.id[:48]:48} {errs}")
    for part, cs in rows.items():
        print(f"\n{part}, per deployment: mean |log(predicted / measured)| (the fit's loss, clipped at {CLIP})")
        print(deployment_table(cs))
    print(f"\nnot expressed: {len(cases) - len(expressed)} of {len(cases)}")
    for c in cases:
        if c.argv is None:
            print(f"  {c.id[:48]:48} {c.reason}")
    if args.write:
        doc = {"terms": found or now, "fit_on": f"{len(rows['fit'])} runs of the fit part (deployments hashed to 'fit')",
               "about": "servesize bench's predictions of the measured runs in this folder (scripts/step_accuracy.py "
                        "--write); tests/test_step_accuracy.py checks that the CLI still gives each and that the "
                        "summary holds",
               "summary": {part: summary(cs) for part, cs in rows.items()},
               "before": {part: summary([Case(c.id, c.source, c.url, c.deployment, c.family, c.gpu, c.argv,
                                              measured=c.measured, predicted=before[c.id]) for c in cs])
                          for part, cs in rows.items()},
               "runs": [{"id": c.id, "source": c.source, "split": c.split, "deployment": c.deployment,
                         "argv": c.argv, "measured": c.measured, "predicted": c.predicted,
                         "errors": {q: error(c, q) for q in QUANTITIES}} for c in expressed]}
        RESULT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
