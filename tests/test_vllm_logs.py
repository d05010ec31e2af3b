"""The six public vLLM start-up logs (tests/fixtures/vllm-logs-public.json, each case with its issue URL), reproduced.

Each case is reproduced two ways:
- exactly, from what the log itself states (its available KV memory, or — where the log prints
  no memory figure — the block count that the other printed numbers pin down): both printed
  lines must come out character for character;
- from the flags alone, through the engine budget with its named reserve estimate: the token
  figure must land within the estimate's stated tolerance, and we record by how much it misses.
"""

import json
import pathlib

import pytest

from servesize.engine.deployment import Deployment
from servesize.engine.memory import memory_report
from servesize.model.architecture import from_config, load_config_file
from servesize.model.catalogue import resolve_model
from servesize.model.hardware import parse_gpus
from servesize.units import GiB

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def logs():
    return {case["id"]: case for case in json.loads((FIXTURES / "vllm-logs-public.json").read_text())}


def arch(folder):
    return from_config(load_config_file(FIXTURES / "model-configs" / folder), folder)


# Qwen3-14B is not among the fixture configs; its published geometry (Qwen/Qwen3-14B config.json).
QWEN3_14B = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 17408,
             "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
# Gemma-3-4B-it text geometry (google/gemma-3-4b-it config.json): 34 layers, 5:1 sliding (1024).
GEMMA3_4B = {"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024, "sliding_window_pattern": 6,
    "vocab_size": 262208, "intermediate_size": 10240, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}}


def printed(case):
    r = case["reported"]
    return r["gpu_kv_cache_size_tokens"], f"{r['max_concurrency']:.2f}x"


def lines_of(report):
    text = " | ".join(report.pool.log_lines)
    return text


def test_lmcache_1739_qwen3_14b_reproduces_exactly_from_logged_available_memory(logs):
    case = logs["lmcache-1739-qwen3-14b"]
    tokens, conc = printed(case)
    rep = memory_report(from_config(QWEN3_14B, "Qwen3-14B"), parse_gpus("1xH100"),
                        Deployment(max_model_len=32768, vllm_version="0.11.0",
                                   kv_cache_memory_bytes=int(case["reported"]["available_kv_cache_memory_gib"] * GiB)))
    # 6.51 GiB / (16 tokens x 40 layers x 8 KV heads x 128 x 2 (K,V) x 2 B) -> 2,666 blocks
    assert rep.pool.num_blocks == int(6.51 * GiB) // (16 * 40 * 8 * 128 * 2 * 2) == 2666
    assert rep.pool.log_lines == (f"GPU KV cache size: {tokens:,} tokens",
                                  f"Maximum concurrency for 32,768 tokens per request: {conc}")


def test_10517_llama31_8b_v0_blocks_lie_in_the_interval_the_rounded_logged_memory_allows(logs):
    case = logs["vllm-10517-llama31-8b-3090-20k"]
    a = arch("meta-llama--Meta-Llama-3.1-8B")
    logged_gib = case["reported"]["kv_cache_size_gib"]  # printed with 2 decimals: the true value is within +-0.005
    block_bytes = 16 * 32 * 8 * 128 * 2 * 2
    lo = memory_report(a, parse_gpus("1xRTX3090"), Deployment(max_model_len=20000, vllm_version="0.6.4",
                                                               kv_cache_memory_bytes=int((logged_gib - 0.005) * GiB))).pool
    hi = memory_report(a, parse_gpus("1xRTX3090"), Deployment(max_model_len=20000, vllm_version="0.6.4",
                                                              kv_cache_memory_bytes=int((logged_gib + 0.005) * GiB))).pool
    assert lo.num_blocks == int((logged_gib - 0.005) * GiB) // block_bytes
    assert lo.num_blocks <= case["reported"]["gpu_blocks"] <= hi.num_blocks
    exact = memory_report(a, parse_gpus("1xRTX3090"), Deployment(max_model_len=20000, vllm_version="0.6.4",
                                                                  num_gpu_blocks_override=case["reported"]["gpu_blocks"]))
    assert exact.pool.log_lines == ("# GPU blocks: 1952, # CPU blocks: 2048",
                                    "Maximum concurrency for 20000 tokens per request: 1.56x")
    assert f"{exact.pool.max_concurrency:.2f}" == f"{case['reported']['max_concurrency']:.2f}"


def test_17327_qwen3_30b_a3b_tp4_a10_reproduces_exactly_from_its_block_count(logs):
    case = logs["vllm-17327-qwen3-30b-a3b-4xa10"]
    tokens, conc = printed(case)
    a = arch("Qwen--Qwen3-30B-A3B")
    # 4 KV heads over TP 4 -> 1 per rank: 48 layers x 1 x 128 x 2 x 2 B = 24 KiB per token per rank
    rep = memory_report(a, parse_gpus("4xA10"), Deployment(tensor_parallel_size=4, max_model_len=8192, vllm_version="0.8.5",
                                                           num_gpu_blocks_override=tokens // 16))
    assert rep.pool.kv_bytes_per_token == 48 * 1 * 128 * 2 * 2
    assert rep.pool.log_lines == (f"GPU KV cache size: {tokens:,} tokens", f"Maximum concurrency for 8,192 tokens per request: {conc}")
    assert rep.weights.per_gpu_bytes == pytest.approx(case["reported"]["model_loading_gib"] * GiB, rel=0.01)


def test_40691_qwen35_27b_hybrid_block_size_784_and_old_token_line(logs):
    case = logs["vllm-40691-qwen35-27b-h20"]
    tokens, conc = printed(case)
    a = arch("Qwen--Qwen3.5-27B")
    dep = Deployment(max_model_len=32768, max_num_batched_tokens=16384, max_num_seqs=16, vllm_version="0.19.0",
                     num_gpu_blocks_override=1487)
    rep = memory_report(a, parse_gpus("1xH20-3e"), dep)
    # GDN state: conv 3 x 10240 x 2 B + ssm 48 x 128 x 128 x 4 B (fp32) = 3,207,168 B; attention 4 x 256 x 2 x 2 = 4,096 B/token
    assert rep.pool.block_size == 16 * -(-(3 * 10240 * 2 + 48 * 128 * 128 * 4) // (16 * 4096)) == 784
    assert len(rep.pool.groups) == 4 and rep.pool.group_size == 16
    assert rep.pool.log_lines == (f"GPU KV cache size: {tokens:,} tokens", f"Maximum concurrency for 32,768 tokens per request: {conc}")
    # The true single-request capacity is ~4x the printed line: (1487 - 1 - 3) x 784
    assert rep.pool.usable_kv_tokens == (1487 - 1 - 3) * 784


def test_40691_from_flags_alone_on_a_141gb_h20_lands_near_the_logged_blocks(logs):
    # Only the 141 GB H20-3e can hold bf16 Qwen3.5-27B weights and ~71 GiB of KV (1,487 blocks x 784 x 4 KiB x 16 layers).
    a = arch("Qwen--Qwen3.5-27B")
    rep = memory_report(a, parse_gpus("1xH20-3e"), Deployment(max_model_len=32768, max_num_batched_tokens=16384,
                                                              max_num_seqs=16, vllm_version="0.19.0"))
    assert rep.pool.num_blocks == pytest.approx(1487, rel=0.03)


def test_kvcached_215_gemma3_4b_sliding_groups_and_padding_layer(logs):
    case = logs["kvcached-215-gemma3-4b-a100"]
    tokens, conc = printed(case)
    a = from_config(GEMMA3_4B, "gemma-3-4b-it")
    rep = memory_report(a, parse_gpus("1xA100"), Deployment(max_model_len=3072, vllm_version="0.11.0",
                                                            num_gpu_blocks_override=138750))
    assert rep.pool.group_size == 5 and len(rep.pool.groups) == 7 and rep.pool.padding_layers == 1
    # per request: 192 full blocks + 6 sliding groups x (cdiv(min(1023 + 8192, 3072), 16) + 1)
    assert sum(g.blocks_per_request for g in rep.pool.groups) == 192 + 6 * (192 + 1)
    assert rep.pool.log_lines == (f"GPU KV cache size: {tokens:,} tokens", f"Maximum concurrency for 3,072 tokens per request: {conc}")


def test_26646_qwen3_next_old_token_line_under_reports_by_the_number_of_groups(logs):
    """The printed tokens are (n // 4 groups) x B while concurrency counts one attention group:
    tokens x 4 ~ concurrency x max_model_len, in the log and in servesize's reproduction.
    (That int4 AutoRound build's block size is not derivable from the public config: B = 448 and
    672 both fit its printed lines, the bf16-state geometry gives 544, so we test the structure.)"""
    case = logs["vllm-26646-qwen3-next-80b-int4-tp2"]
    r = case["reported"]
    assert r["gpu_kv_cache_size_tokens"] * 4 == pytest.approx(r["max_concurrency"] * r["max_concurrency_at_tokens"], rel=0.01)
    a = arch("Qwen--Qwen3-Next-80B-A3B-Thinking")
    rep = memory_report(a, parse_gpus("2xH100"), Deployment(tensor_parallel_size=2, max_model_len=215040,
                                                            vllm_version="0.11.0", num_gpu_blocks_override=804, quantization="int4"))
    assert len(rep.pool.groups) == 4
    pool = rep.pool
    assert pool.kv_cache_tokens == 804 // 4 * pool.block_size
    assert pool.kv_cache_tokens * 4 == pytest.approx(pool.max_concurrency * 215040, rel=0.01)


def test_the_warm_capacity_seeds_own_log_needs_the_mtp_layer_in_the_attention_group():
    """Seed 000 (tests/fixtures/seeds.json) quotes vLLM 0.19.0's `GPU KV cache size: 352,000 tokens` for
    Qwen3.6-27B FP8 on one H200 with MTP (2 drafts), FP16 KV. With MTP the draft's attention layer joins the attention group
    (17 layers, 3 padding GDN slots) and the conv state grows by the draft tokens, so the block is
    16 x cdiv(5 x 10240 x 2 + 48 x 128 x 128 x 4, 16 x 4096) = 800 tokens: 440 x 800 = 352,000."""
    # The geometry of Qwen3.6-27B (the NVFP4 fixture's, as served with vLLM's fp8: the bf16 checkpoint's
    # geometry is the same, catalogue entry qwen3.6-27b).
    a = resolve_model("qwen3.6-27b").architecture
    assert a.layers == arch("nvidia--Qwen3.6-27B-NVFP4").layers
    dep = Deployment(max_model_len=262144, vllm_version="0.19.0", quantization="fp8", num_speculative_tokens=2,
                     num_gpu_blocks_override=1760)
    pool = memory_report(a, parse_gpus("1xH200"), dep).pool
    assert pool.block_size == 16 * -(-(5 * 10240 * 2 + 48 * 128 * 128 * 4) // (16 * 4096)) == 800
    assert pool.group_size == 17 and pool.padding_layers == 3
    assert pool.log_lines[0] == "GPU KV cache size: 352,000 tokens"
    (seed,) = [s for s in json.loads((FIXTURES / "seeds.json").read_text()) if s["id"] == "seed-000-warm-capacity"]
    assert any(f"`{pool.log_lines[0]}`" in figure["quote"] for figure in seed["figures"])
    # and the flags alone land within 4% of those blocks (the reserve estimate)
    free = memory_report(a, parse_gpus("1xH200"), Deployment(max_model_len=262144, vllm_version="0.19.0",
                                                            quantization="fp8", num_speculative_tokens=2)).pool
    assert free.num_blocks == pytest.approx(1760, rel=0.04)
