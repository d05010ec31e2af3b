"""Version boundaries of vLLM's behaviour, as checked against its released wheels (0.19.1-0.33.0)."""

import pytest

from servesize.engine.deployment import Deployment
from servesize.engine.memory import memory_report
from servesize.engine.versions import log_era, parse_version
from servesize.model.catalogue import resolve_model
from servesize.model.hardware import parse_gpus


def report(model, gpus, **dep):
    return memory_report(resolve_model(model).architecture, parse_gpus(gpus), Deployment(**dep))


@pytest.mark.parametrize("version,era", [("0.6.4", "v0"), ("0.8.5", "v1-uniform"), ("0.19.0", "v1-hybrid-old"),
                                         ("0.20.0", "v1-hybrid-old"), ("0.20.1", "v1-new"), ("0.33.0", "v1-new")])
def test_the_token_line_formula_changes_at_0_20_1(version, era):
    assert log_era(parse_version(version)) == era


@pytest.mark.parametrize("version,util", [("0.19.1", 0.90), ("0.20.0", 0.92)])
def test_the_default_utilisation_rises_to_0_92_at_0_20(version, util):
    assert report("llama-3.1-8b", "1xH100", vllm_version=version).deployment.gpu_memory_utilization == util


@pytest.mark.parametrize("version,graphs", [("0.19.1", False), ("0.20.0", True)])
def test_cuda_graph_memory_is_subtracted_from_0_20(version, graphs):
    assert (report("llama-3.1-8b", "1xH100", vllm_version=version).budget.cudagraph_bytes > 0) == graphs


@pytest.mark.parametrize("version,lines", [("0.27.0", 2), ("0.28.0", 1)])
def test_the_two_kv_lines_become_one_at_0_28(version, lines):
    assert len(report("llama-3.1-8b", "1xH100", vllm_version=version).pool.log_lines) == lines


@pytest.mark.parametrize("gpus,version,batched,seqs", [
    ("1xA100", "0.33.0", 2048, 256),       # >= 70 GiB but an A100: the small tier (vLLM PR #17885)
    ("1xH100", "0.33.0", 8192, 1024),
    ("1xB200", "0.27.0", 8192, 1024),
    ("1xB200", "0.28.0", 16384, 1024),     # >= 160 GiB tier from 0.28
    ("1xL40S", "0.33.0", 2048, 256),
])
def test_default_batch_and_sequences_follow_vllms_tiers(gpus, version, batched, seqs):
    dep = report("llama-3.1-8b", gpus, vllm_version=version).deployment
    assert (dep.max_num_batched_tokens, dep.max_num_seqs) == (batched, seqs)


@pytest.mark.parametrize("gpus,kv,version,block", [
    ("8xH200", "auto", "0.33.0", 16),     # FlashAttention MLA: any multiple of 16
    ("8xH200", "fp8", "0.33.0", 64),      # fp8 KV falls to FlashMLA
    ("8xB200", "auto", "0.33.0", 32),     # FlashInfer MLA's smaller block
    ("8xH200", "auto", "0.11.0", 64),     # older releases: FlashMLA on Hopper
])
def test_mla_block_size_follows_the_backend(gpus, kv, version, block):
    r = report("deepseek-v3", gpus, tensor_parallel_size=8, kv_cache_dtype=kv, vllm_version=version)
    assert r.pool.block_size == block


@pytest.mark.parametrize("version,mode", [("0.25.0", "none"), ("0.26.0", "align")])
def test_hybrid_models_get_prefix_caching_and_align_mode_from_0_26(version, mode):
    assert report("qwen3.6-27b", "1xH200", quantization="fp8", vllm_version=version).deployment.mamba_cache_mode == mode


def test_flashinfer_gdn_on_hopper_aligns_blocks_to_64_and_holds_a_checkpoint_block():
    r = report("qwen3.6-27b", "1xH200", quantization="fp8", kv_cache_dtype="fp8", vllm_version="0.33.0")
    state = 3 * 10240 * 2 + 48 * 128 * 128 * 4  # conv (bf16) + recurrent state (fp32), one GDN layer
    attn_page_per_token = 4 * 256 * 2 * 1        # K and V of 4 KV heads x 256, fp8
    assert r.pool.block_size == 64 * -(-state // (64 * attn_page_per_token))
    gdn_groups = [g for g in r.pool.groups if g.kind == "gated_deltanet"]
    assert gdn_groups and all(g.blocks_per_request == 3 for g in gdn_groups)  # 2 (align) + 1 checkpoint
    older = report("qwen3.6-27b", "1xH200", quantization="fp8", kv_cache_dtype="fp8", vllm_version="0.30.0")
    assert older.pool.block_size == 16 * -(-state // (16 * attn_page_per_token))


# -- V0 turns chunked prefill on by itself above 32K (PR #6666) -------------------------------

def _v0(version="0.6.5", **kw):
    from servesize.engine.deployment import Deployment
    from servesize.model.catalogue import resolve_model
    from servesize.model.hardware import parse_gpus

    arch = resolve_model(kw.pop("model", "llama-3.1-8b")).architecture
    gpus = parse_gpus(kw.pop("gpus", "1xH100"))
    return Deployment(vllm_version=version, **kw).resolved(arch, gpus)


def test_v0_enables_chunked_prefill_above_32k_and_batches_512_tokens():
    from servesize.engine.versions import V0_CHUNKED_BATCHED_TOKENS, V0_LONG_CONTEXT_TOKENS

    long = _v0(max_model_len=V0_LONG_CONTEXT_TOKENS + 1)
    assert long.enable_chunked_prefill and long.max_num_batched_tokens == V0_CHUNKED_BATCHED_TOKENS == 512
    at = _v0(max_model_len=V0_LONG_CONTEXT_TOKENS)  # use_long_context is max_model_len > 32768
    assert not at.enable_chunked_prefill and at.max_num_batched_tokens == 32_768


def test_v0_long_context_chunked_prefill_follows_what_the_user_and_the_model_say():
    assert not _v0(enable_chunked_prefill=False).enable_chunked_prefill  # the default is only for unset
    assert not _v0(enable_lora=True).enable_chunked_prefill
    assert not _v0(num_speculative_tokens=2).enable_chunked_prefill
    assert not _v0(device="cpu").enable_chunked_prefill


def test_the_v0_boundary_is_the_release_after_pr_6666():
    from servesize.engine.versions import V0_LONG_CONTEXT_CHUNKED_PREFILL_FROM

    assert V0_LONG_CONTEXT_CHUNKED_PREFILL_FROM == (0, 5, 4)
    assert not _v0(version="0.5.3").enable_chunked_prefill
    assert _v0(version="0.5.4").enable_chunked_prefill and _v0(version="0.7.3").enable_chunked_prefill


def test_llama_8b_on_an_h100_at_131k_with_0_6_5_reserves_a_512_token_activation_not_a_whole_prompt(capsys):
    import json

    from servesize.cli import main

    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--vllm-version", "0.6.5", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["deployment"]["enable_chunked_prefill"] is True and d["deployment"]["max_num_batched_tokens"] == 512
    kv_gib = d["available_kv_bytes_per_gpu"] / 2**30
    assert kv_gib > 54  # was 40.0 GiB with a 131,072-token profile batch (a 16 GiB activation peak)
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--vllm-version", "0.6.5",
                 "--no-enable-chunked-prefill", "--json"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["available_kv_bytes_per_gpu"] / 2**30 < kv_gib - 10


def test_v0_long_context_chunked_prefill_is_left_off_on_amd_gpus():
    assert not _v0(gpus="1xMI300X").enable_chunked_prefill
    assert _v0(gpus="1xH200").enable_chunked_prefill


def test_every_version_boundary_in_the_code_is_a_named_constant():
    """A version compared in src/ is a named constant with its source beside it, never a bare (0, x, y)."""
    import pathlib
    import re

    src = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"
    bare = re.compile(r"(<|>|<=|>=|==|!=)\s*\(0, \d+, \d+\)|\(0, \d+, \d+\)\s*(<|>|<=|>=)")
    found = [f"{p.relative_to(src)}:{n}" for p in src.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line.split("#")[0])]
    assert found == []
