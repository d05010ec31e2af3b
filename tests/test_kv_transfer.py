"""The KV a disaggregated decode instance pulls for one request (issue 32), by hand for one model of each KV kind:
full attention, sliding window, MLA, hybrid linear attention. The rule is vLLM 0.32's NixlConnector
(vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py get_num_new_matched_tokens and
update_state_after_alloc; base_scheduler.py _prefill_backoff and get_exchange_clipped_blocks)."""

from __future__ import annotations

import math

import pytest

from servesize.api import resolve_model
from servesize.engine.deployment import Deployment
from servesize.engine.kv_transfer import handover_seconds, nixl_pull, prefill_backoff, pull_seconds
from servesize.errors import BadInput
from servesize.model.hardware import load_kv_links, parse_gpus

PROMPT = 10_000


def _pull(model: str, gpus: str, prompt: int = PROMPT, hit: int = 0, **deployment):
    arch = resolve_model(model).architecture
    group = parse_gpus(gpus)
    dep = Deployment(max_model_len=32_768, **deployment).resolved(arch, group)
    return nixl_pull(arch, dep, prompt, hit, group.gpu)


def _groups(t) -> dict[str, tuple[int, int]]:
    return {g.kind: (g.blocks, g.bytes_per_rank) for g in t.groups}


def test_full_attention_pulls_every_block_of_the_prompt_the_decode_instance_does_not_cache():
    # Llama-3.1-8B, bf16: 32 layers x K and V x 8 KV heads x 128 x 2 B = 4,096 B per token per layer; block 16
    per_block = 16 * 2 * 8 * 128 * 2
    cold = _pull("llama-3.1-8b", "1xH100")
    assert (cold.backoff_tokens, cold.remote_tokens) == (0, PROMPT)
    assert _groups(cold) == {"full_attention": (625, 625 * per_block * 32)}
    assert cold.bytes == cold.bytes_per_rank == 1_310_720_000
    # a warm turn: the decode instance still caches the first 8,000 tokens (500 blocks): 125 blocks cross
    warm = _pull("llama-3.1-8b", "1xH100", hit=8_000)
    assert (warm.local_hit_tokens, warm.remote_tokens) == (8_000, 2_000)
    assert _groups(warm) == {"full_attention": (125, 125 * per_block * 32)}
    # a hit is whole blocks and never the last token: 9,999 cached floors to 624 blocks, the last block crosses
    whole = _pull("llama-3.1-8b", "1xH100", hit=PROMPT)
    assert (whole.local_hit_tokens, whole.remote_tokens) == (9_984, 16)
    assert _groups(whole) == {"full_attention": (1, per_block * 32)}


def test_at_tp_2_each_rank_pulls_its_own_heads_and_the_link_carries_the_same_bytes():
    tp2 = _pull("llama-3.1-8b", "2xH100", tensor_parallel_size=2)
    assert tp2.ranks == 2 and tp2.bytes_per_rank == 1_310_720_000 // 2 and tp2.bytes == 1_310_720_000


def test_without_prefix_caching_the_decode_instance_has_no_hit_and_pulls_the_whole_prompt():
    off = _pull("llama-3.1-8b", "1xH100", hit=8_000, enable_prefix_caching=False)
    assert off.local_hit_tokens == 0 and _groups(off)["full_attention"][0] == 625


def test_a_sliding_window_group_pulls_only_its_window_and_one_block_more():
    # gpt-oss-120b: 18 sliding layers (window 128) and 18 full, 8 KV heads x 64, bf16: 2,048 B per token per layer
    per_block = 16 * 2 * 8 * 64 * 2
    window_blocks = math.ceil(128 / 16) + 1  # get_exchange_clipped_blocks: cdiv(window, block) + 1
    t = _pull("gpt-oss-120b", "1xH100")
    assert _groups(t) == {"sliding_window": (window_blocks, window_blocks * per_block * 18),
                          "full_attention": (625, 625 * per_block * 18)}
    # a prompt shorter than the window and a block: every block it has
    short = _pull("gpt-oss-120b", "1xH100", prompt=100)
    assert _groups(short)["sliding_window"] == (7, 7 * per_block * 18)


def test_mla_pulls_the_one_latent_and_every_decode_rank_pulls_its_own_copy():
    # DeepSeek-V3, bf16 KV: (512 + 64) x 2 B = 1,152 B per token per layer, 61 layers, the same latent on every rank;
    # FlashAttention MLA on an H200 keeps block 16
    t = _pull("deepseek-v3", "8xH200", tensor_parallel_size=8)
    per_rank = 625 * 16 * 1_152 * 61
    assert _groups(t) == {"mla": (625, per_rank)}
    assert t.ranks == 8 and t.bytes == 8 * per_rank
    # fp8 KV: FlashMLA's block of 64, 576 B per token
    fp8 = _pull("deepseek-v3", "8xH200", tensor_parallel_size=8, kv_cache_dtype="fp8")
    assert _groups(fp8) == {"mla": (157, 157 * 64 * 576 * 61)}


def test_hybrid_linear_attention_pulls_one_state_per_layer_and_the_attention_blocks_up_to_the_backoff():
    # Qwen3-Next-80B-A3B at TP 2, bf16. Gated DeltaNet (36 layers), per rank: conv (4 - 1) x (2 x 16 x 128 + 32 x
    # 128) / 2 x 2 B, recurrent state 32 / 2 heads x 128 x 128 x 2 B. Attention (12 layers): 2 KV heads x 256 over 2
    # ranks, 1,024 B per token; its block grows to a multiple of 64 (FlashInfer's GDN checkpoints) whose page holds
    # a state. The decode instance recomputes the last prompt token (Mamba/GDN need h(N-1)): 9,999 are pulled.
    state = 3 * (2 * 16 * 128 + 32 * 128) // 2 * 2 + 16 * 128 * 128 * 2
    block = 64 * math.ceil(state / (64 * 1_024))
    assert block == 576
    t = _pull("qwen3-next-80b-a3b-thinking", "2xH100", tensor_parallel_size=2)
    assert (t.backoff_tokens, t.remote_tokens) == (1, PROMPT - 1)
    blocks = math.ceil((PROMPT - 1) / block)
    assert _groups(t) == {"gated_deltanet": (1, state * 36), "full_attention": (blocks, blocks * block * 1_024 * 12)}
    # warm: a hit is whole attention blocks (13 x 576 of the 8,000); the state crosses again, whole
    warm = _pull("qwen3-next-80b-a3b-thinking", "2xH100", hit=8_000, tensor_parallel_size=2)
    assert warm.local_hit_tokens == 13 * block
    assert _groups(warm) == {"gated_deltanet": (1, state * 36),
                             "full_attention": (blocks - 13, (blocks - 13) * block * 1_024 * 12)}


def test_the_backoff_is_the_state_token_or_a_multi_module_drafters_lookahead_less_one():
    def backoff(model: str, **dep) -> int:
        arch = resolve_model(model).architecture
        return prefill_backoff(arch, Deployment(**dep))

    assert backoff("llama-3.1-8b") == 0
    assert backoff("qwen3-next-80b-a3b-thinking") == 1
    assert backoff("deepseek-v3", num_speculative_tokens=3) == 0  # one MTP module: Eagle-like, lookahead 1
    assert backoff("minimax-m2.5", num_speculative_tokens=3) == 2  # three modules, three tokens: lookahead 3


@pytest.mark.parametrize("prompt, hit", [(0, 0), (40_000, 0), (100, 101), (100, -1)])
def test_a_prompt_or_hit_out_of_range_is_one_line(prompt, hit):
    with pytest.raises(BadInput) as e:
        _pull("llama-3.1-8b", "1xH100", prompt=prompt, hit=hit)
    assert "\n" not in str(e.value)


# -- how long a pull takes: descriptors posted, then bytes over the decode GPU's link ------------------------------

POST, PER_DESC, EFF = 3.75e-6, 2.9, 0.163  # kv_transfer.descriptor_post_s, .blocks_per_descriptor, .link_efficiency


def test_a_pull_posts_a_descriptor_per_run_of_blocks_per_layer_and_k_or_v_then_moves_its_bytes_over_the_link():
    # Llama-3.1-8B cold, 10,000 tokens: 625 blocks in each of 32 layers' K and V regions, runs of 2.9 blocks
    t = pull_seconds(_pull("llama-3.1-8b", "1xH100"), load_kv_links()["nvlink4"], prefill_tp=1)
    assert t.descriptors == 32 * 2 * math.ceil(625 / PER_DESC) == 13_824
    assert t.post_s == pytest.approx(13_824 * POST)
    assert t.move_s == pytest.approx(1_310_720_000 / (450e9 * EFF))
    assert t.seconds == pytest.approx(0.05184 + 0.017869, rel=1e-4)
    # the same pull over one 400 Gb/s NIC per GPU: the bytes take 9x longer, the posting is the same
    ib = pull_seconds(_pull("llama-3.1-8b", "1xH100"), load_kv_links()["ib-ndr"], prefill_tp=1)
    assert ib.descriptors == t.descriptors and ib.move_s == pytest.approx(9 * t.move_s)
    # a pool that scatters every block: one descriptor per block
    apart = pull_seconds(_pull("llama-3.1-8b", "1xH100"), load_kv_links()["nvlink4"], prefill_tp=1,
                         blocks_per_descriptor=1)
    assert apart.descriptors == 32 * 2 * 625


def test_a_decode_rank_reads_from_every_prefill_rank_holding_its_heads_but_mla_from_one():
    link = load_kv_links()["nvlink4"]
    one = pull_seconds(_pull("llama-3.1-8b", "1xH100"), link, prefill_tp=1)
    two = pull_seconds(_pull("llama-3.1-8b", "1xH100"), link, prefill_tp=2)
    assert two.descriptors == 2 * one.descriptors and two.move_s == one.move_s
    mla = _pull("deepseek-v3", "8xH200", tensor_parallel_size=8)
    assert pull_seconds(mla, link, prefill_tp=8).descriptors == 61 * 1 * math.ceil(625 / PER_DESC)
    assert pull_seconds(mla, link, prefill_tp=16).descriptors == 61 * math.ceil(625 / PER_DESC)


def test_a_gated_deltanet_state_is_four_regions_of_one_block_each():
    t = pull_seconds(_pull("qwen3-next-80b-a3b-thinking", "2xH100", tensor_parallel_size=2),
                     load_kv_links()["nvlink4"], prefill_tp=2)
    attention = 12 * 2 * math.ceil(math.ceil((PROMPT - 1) / 576) / PER_DESC)
    assert t.descriptors == 36 * 4 * 1 + attention


def test_the_handover_is_the_pull_and_the_decode_instances_steps_around_it():
    t = pull_seconds(_pull("llama-3.1-8b", "1xH100"), load_kv_links()["nvlink4"], prefill_tp=1)
    assert handover_seconds(t, 0.02) == pytest.approx(t.seconds + 4.3 * 0.02)
    assert handover_seconds(t, 0.02, handover_steps=1) == pytest.approx(t.seconds + 0.02)


@pytest.mark.parametrize("kwargs", [{"prefill_tp": 0}, {"prefill_tp": 1, "link_efficiency": 0},
                                    {"prefill_tp": 1, "blocks_per_descriptor": -1}])
def test_a_bad_transfer_parameter_is_one_line(kwargs):
    with pytest.raises(BadInput) as e:
        pull_seconds(_pull("llama-3.1-8b", "1xH100"), load_kv_links()["nvlink4"], **kwargs)
    assert "\n" not in str(e.value)
