"""aiconfigurator's measured vLLM rows (tests/fixtures/measured/aiconfigurator-silicon-vllm.csv) as step_accuracy Cases.

A row is a deployment (model, system, TP, MoE TP/EP, attention DP, weights) and a load (ISL, OSL, concurrency):
`vllm bench serve --dataset-name random --random-input-len ISL --random-output-len OSL --max-concurrency C`.
What a row does not say is a named choice here, with its reason:
"""

from __future__ import annotations

MODELS = {
    "openai/gpt-oss-120b": ("gpt-oss-120b", []),
    "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", []),
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", ["-q", "fp8"]),  # precision fp8 on the bf16 id: served as FP8
    "Qwen/Qwen3-32B": ("qwen3-32b", []),
    "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b-fp8", []),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", ["-q", "fp8"]),  # a per-tensor FP8 checkpoint of it
}
MOE = {"openai/gpt-oss-120b", "MiniMaxAI/MiniMax-M2.5", "Qwen/Qwen3-235B-A22B-FP8", "moonshotai/Kimi-K2.5"}
SYSTEMS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM"}
# the row names no prompt count: InferenceMAX-style sweeps send ten prompts per concurrency slot, so the first
# wave (every slot at once) is a tenth of the requests
PROMPTS_PER_SLOT = 10
# InferenceMAX's sweep: these (ISL, OSL) pairs at concurrency 4-64 (128 at TP8), ten prompts per slot, for the models
# it runs (gpt-oss-120b, MiniMax-M2.5, Llama-3.1-70B, Kimi-K2.5). Its client (bench_serving/benchmark_serving.py, a
# fork of vLLM's old benchmark script, run with --random-range-ratio 0.8 --ignore-eos; github.com/InferenceMAX/
# InferenceMAX README, kedarpotdar-nv/bench_serving sample_random_requests) draws each prompt's and each reply's
# length uniformly from [0.8 L, L], not L exactly: requests finish at different steps, so the concurrency slots do
# not send in lock-step waves. The rows of aiconfigurator's own gap analysis (other grids; their source names
# aic-auto-gap-analysis) say nothing of a ratio, and keep fixed lengths.
INFERENCEMAX_GRID = {(1024, 1024), (1024, 8192), (8192, 1024)}
INFERENCEMAX_RATIO = 0.8
# InferenceMAX serves gpt-oss-120b on Hopper with vLLM's Marlin MoE kernel, not the release's default (Triton):
# `export VLLM_MXFP4_USE_MARLIN=1` in its launch scripts for both GPUs (github.com/SemiAnalysisAI/InferenceX
# benchmarks/gptoss_fp4_h100.sh and benchmarks/single_node/gptoss_fp4_h100.sh, gptoss_fp4_h200.sh; both set it at
# cec542a9a, 2026-03-27, "update gptoss H100 & H200 vLLM image to v0.18.0", the release the rows name), what
# vLLM 0.17 on spells --moe-backend marlin. Its MiniMax-M2.5 H200 script of the rows' time (a36346339, 2026-03-01)
# sets no kernel: defaults, --gpu-memory-utilization 0.95
INFERENCEMAX_SERVER_FLAGS = {"openai/gpt-oss-120b": ["--moe-backend", "marlin"]}
# InferenceMAX's client sends the first prompt alone before its run and waits for the answer ("Starting initial single
# prompt test run...", unconditionally: kedarpotdar-nv/bench_serving benchmark_serving.py ``benchmark``), but its
# servers run with prefix caching off (`no-enable-prefix-caching: true` in SemiAnalysisAI/InferenceX
# benchmarks/single_node/gptoss_fp4_h200.sh, `--no-enable-prefix-caching` in minimaxm2.5_fp8_h200.sh, as stored),
# so the test leaves nothing for the run to hit: the rows are replayed without it (servesize bench's default),
# which is what the two give with caching off. The gap analysis's rows do not say which client they ran.


def _inferencemax(isl: int, osl: int, source: str) -> bool:
    """Whether a row is of InferenceMAX's sweep: its grid, and not aiconfigurator's own gap analysis."""
    return (isl, osl) in INFERENCEMAX_GRID and "aic-auto-gap-analysis" not in source


def _lengths(isl: int, osl: int, source: str) -> list[str]:
    """`servesize bench`'s length flags for a row: InferenceMAX's [r L, L] is vLLM's current random dataset (lengths
    uniform in [m (1 - r'), m (1 + r')]) at the mean m = (1 + r) L / 2 and r' = (1 - r) / (1 + r)."""
    if not _inferencemax(isl, osl, source):
        return ["--random-input-len", str(isl), "--random-output-len", str(osl)]
    r = INFERENCEMAX_RATIO
    return ["--random-input-len", str(round((1 + r) * isl / 2)), "--random-output-len", str(round((1 + r) * osl / 2)),
            "--random-range-ratio", f"{(1 - r) / (1 + r):.6f}"]


def _whole(text: str, default: int = 1) -> int:
    return int(text) if text not in ("", None) else default


def aic_case(row: dict, case_type):
    model = row["model_path"]
    system = row["system"]
    tp = _whole(row["tp_size"])
    adp = _whole(row["attention_dp_size"])
    moe_tp, moe_ep = _whole(row["moe_tp_size"], 0), _whole(row["moe_ep_size"], 0)
    source = dict(kv.split("=", 1) for kv in (p.strip() for p in row["silicon_data_source"].split(";")) if "=" in kv)
    conc = _whole(source.get("silicon_concurrency", ""), 0) or _whole(row["batch_size"]) * adp
    deployment = f"{model} {SYSTEMS.get(system, system)} TP{tp}" + (f" ADP{adp}" if adp > 1 else "") \
        + (f" EP{moe_ep}" if moe_ep > 1 else "")
    family = model.split("/")[-1].split("-")[0].lower()
    case = case_type(row["id"], "aiconfigurator-silicon-vllm.csv", "aiconfigurator-core 0.12.0 silicon_sample.csv",
                     deployment, family, SYSTEMS.get(system, system), None)
    case.measured = {"tpot": float(row["silicon_tpot_ms"]), "ttft": float(row["silicon_ttft_ms"]),
                     "output_throughput": None}
    case.peer = {"tpot": float(row["aic_estimate_tpot_ms"]) if row["aic_estimate_tpot_ms"] else None,
                 "ttft": float(row["aic_estimate_ttft_ms"]) if row["aic_estimate_ttft_ms"] else None}
    why = []
    if model not in MODELS:
        why.append(f"{model}: servesize refuses its config (a vision tower with no tensor layout)"
                   if "Kimi" in model else f"{model} is not in the catalogue")
    if adp > 1:
        why.append("attention data parallelism is not modelled")
    if model in MOE and moe_ep > 1:
        why.append("expert parallelism is not modelled")
    if model in MOE and moe_tp and moe_tp * max(moe_ep, 1) != tp * adp:
        why.append(f"MoE TP {moe_tp} x EP {moe_ep} is not TP {tp} x attention DP {adp} (an unrecorded split)")
    if why:
        case.reason = "; ".join(why)
        return case
    name, extra = MODELS[model]
    if model == "Qwen/Qwen3-32B" and row["precision"] == "fp8":
        extra = ["-q", "fp8"]
    if _inferencemax(int(row["isl"]), int(row["osl"]), row["silicon_data_source"]):
        extra = [*extra, *INFERENCEMAX_SERVER_FLAGS.get(model, [])]
    case.argv = [name, "--gpus", f"{tp}x{SYSTEMS[system]}", "-tp", str(tp), *extra, "--max-model-len", "auto",
                 *_lengths(int(row["isl"]), int(row["osl"]), row["silicon_data_source"]),
                 "--max-concurrency", str(conc), "--num-prompts", str(PROMPTS_PER_SLOT * conc)]
    return case
