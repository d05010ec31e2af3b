"""The steps of calibrate(), one fact each, as worked examples (vllm-kv-sizing.md §4, §6 for the formulas)."""

import math
from dataclasses import replace

from servesize.units import GiB
from servesize.vllm_logs.calibration import (
    _available_kv_bytes,
    _block_count,
    _block_count_from_new_line,
    _block_count_from_old_line,
    _block_size_from_concurrency,
    _blocks_per_request,
    _kv_cache_groups,
    _pool_tokens,
    _PoolLines,
    _stated_block_size,
    _weights_gib,
    gib_interval,
)
from servesize.vllm_logs.parse import Fact, LogFacts


def log_facts(*named: tuple[str, object], line: str = "") -> LogFacts:
    facts = tuple(Fact(name, value, no, line or name) for no, (name, value) in enumerate(named, start=1))
    return LogFacts("test.log", facts, startups=1, chosen=1, first_line=1, last_line=len(facts) or 1)


def pool_lines(**kw) -> _PoolLines:
    base = dict(era="v1-uniform", tokens=None, concurrency=None, max_model_len=None, block_size=None, groups=None,
                groups_given=False, mamba=False, mamba_cache_mode=None, blocks_per_request=None)
    return _PoolLines(**{**base, **kw})


# --- block size ----------------------------------------------------------------------------------


def test_the_callers_block_size_wins_over_every_line():
    facts = log_facts(("attention_block_size", 784), ("block_size", 16), ("forced_block_size", 32))
    assert (_stated_block_size(facts, 800).value, _stated_block_size(facts, 800).how) == (800, "value given")
    assert _stated_block_size(facts, None).how == "'Setting attention block size' line"
    assert _stated_block_size(log_facts(("block_size", 16), ("forced_block_size", 32)), None).value == 16
    assert _stated_block_size(log_facts(("forced_block_size", 32)), None).value == 32
    assert _stated_block_size(log_facts(), None).value is None


def test_only_block_size_16_prints_the_v0_concurrency_of_1952_blocks_at_20000_tokens():
    found = _block_size_from_concurrency(1952, 1.56, 20000)
    assert found.value == 16  # 1952 x 16 / 20000 = 1.5616; 8 -> 0.78, 32 -> 3.12
    assert "1,952 x B / 20,000 prints 1.56x" in found.how


def test_no_block_size_is_inferred_where_none_or_several_print_the_concurrency():
    assert _block_size_from_concurrency(1952, 9.99, 20000).value is None
    assert _block_size_from_concurrency(1952, 1.56, None).value is None
    assert _block_size_from_concurrency(10, 0.0, 1_000_000).value is None  # 10 x B / 1M prints 0.00 for every B


# --- groups ----------------------------------------------------------------------------------------


def test_one_group_is_assumed_without_a_hybrid_line_and_unknown_with_one():
    assert _kv_cache_groups(pool_lines(), None, hybrid=False).value == 1
    assert _kv_cache_groups(pool_lines(), None, hybrid=True).value is None
    assert _kv_cache_groups(pool_lines(), 4, hybrid=True).value == 4


def test_a_token_line_a_quarter_of_concurrency_times_length_rules_one_group_out():
    # vllm#26646's shape: (n // 4) x B tokens while C counts one attention group, so tokens x 4 ~ C x L
    lines = pool_lines(era="v1-hybrid-old", tokens=50_000, concurrency=0.93, max_model_len=215_040)
    found = _kv_cache_groups(lines, None, hybrid=False)
    assert found.value is None and "too far apart for one KV-cache group" in found.notes[0]


def test_a_new_era_token_line_off_the_block_grid_rules_one_group_out():
    lines = pool_lines(era="v1-new", tokens=567_978, concurrency=4.33, max_model_len=131_072)
    found = _kv_cache_groups(lines, None, hybrid=False)
    assert 567_978 % 16 and 131_072 % 16 == 0
    assert found.value is None and "(16, assumed)" in found.notes[0]


# --- block count -----------------------------------------------------------------------------------


def test_blocks_per_request_add_one_or_two_state_blocks_per_mamba_group():
    lines = pool_lines(block_size=784, groups=4, max_model_len=32_768, mamba=True)
    assert _blocks_per_request(lines) == [math.ceil(32_768 / 784) + 3 * 1, math.ceil(32_768 / 784) + 3 * 2]
    assert _blocks_per_request(pool_lines(block_size=784, groups=4, max_model_len=32_768, mamba=True,
                                          mamba_cache_mode="none")) == [42 + 3]
    assert _blocks_per_request(pool_lines(block_size=16, groups=7, max_model_len=3072)) == []  # sliding groups: unknown


def test_old_line_of_a_four_group_hybrid_pins_1487_blocks_by_its_concurrency():
    # vllm#40691: 290,864 / 784 = 371 = n // 4, so n in 1484..1487; n / (cdiv(32768, 784) + 3) = 33.04 only for 1487
    lines = pool_lines(era="v1-hybrid-old", tokens=371 * 784, concurrency=33.04, max_model_len=32_768, block_size=784,
                       groups=4, groups_given=True, mamba=True, mamba_cache_mode="none")
    found = _block_count_from_old_line(lines)
    assert found.value == 1487 and f"{1487 / (42 + 3):.2f}" == "33.04"
    assert found.how == "(n // 4 groups) x 784 = 290,864, and n / 45 blocks per request prints 33.04x"


def test_old_line_off_the_block_grid_pins_nothing_and_says_why():
    found = _block_count_from_old_line(pool_lines(tokens=42_657, block_size=16, groups=1))
    assert found.value is None and found.notes == ("42,657 tokens is not a multiple of block size 16: the block count is not exact",)


def test_new_line_pins_the_one_block_count_that_prints_both_lines():
    # int(n / cdiv(131072, 16) x 131072) = 16 n = 460,496 -> n = 28,781; its concurrency 28,781 / 8,192 prints 3.51
    lines = pool_lines(era="v1-new", tokens=460_496, concurrency=3.51, max_model_len=131_072, block_size=16, groups=1)
    found = _block_count_from_new_line(lines)
    assert found.value == 460_496 // 16 == 28_781
    assert found.how.endswith("(no hybrid line printed: one KV-cache group assumed)")


def test_a_logged_block_count_is_taken_as_is_and_a_missing_one_says_what_is_missing():
    assert _block_count(pool_lines(), 1952).how == "logged '# GPU blocks'"
    found = _block_count(pool_lines(era="v1-new", tokens=567_978), None)
    assert found.value is None
    assert found.how == "not inferable exactly from the printed lines without the block size and the KV-cache group count"


# --- pool ------------------------------------------------------------------------------------------


def test_the_pool_by_era_and_groups():
    assert _pool_tokens(pool_lines(era="v0", block_size=16), 1952).value == 1952 * 16
    assert _pool_tokens(pool_lines(era="v1-uniform", block_size=16, groups=1), 127_626).value == (127_626 - 1) * 16
    hybrid = pool_lines(era="v1-hybrid-old", tokens=290_864, block_size=784, groups=4, mamba=True)
    assert _pool_tokens(hybrid, 1487).value == (1487 - 1) * 784  # one request's attention tokens
    assert _pool_tokens(hybrid, None).value == 290_864 * 4  # the old line divides the blocks by every group
    # with the concurrency, the one per-request sum that prints it (1487 / 45 = 33.04, not 1487 / 48 = 30.98) says
    # how many state blocks one request pins: 45 - cdiv(32768, 784) = 3, which the pool does not hold for context
    pinned = replace(hybrid, concurrency=33.04, max_model_len=32_768)
    assert _pool_tokens(pinned, 1487).value == (1487 - 1 - (45 - 42)) * 784
    spec = replace(pinned, concurrency=1487 / (42 + 3 * (2 + 2)), mamba_cache_mode="align", spec_tokens=2)
    assert _pool_tokens(spec, 1487).value == (1487 - 1 - 3 * (2 + 2)) * 784  # 'align' + 2 draft tokens: 4 per group
    several = pool_lines(era="v1-new", tokens=567_978, concurrency=4.33, max_model_len=131_072)
    assert _pool_tokens(several, None).value is None


def test_the_old_line_under_reporting_a_hybrid_is_noted():
    lines = pool_lines(era="v1-hybrid-old", tokens=50_000, concurrency=0.93, max_model_len=215_040)
    assert "under-reports" in _pool_tokens(lines, None).notes[0]  # 0.93 x 215,040 = 199,987 > 1.05 x 50,000


# --- memory figures --------------------------------------------------------------------------------


def test_available_kv_is_the_interval_of_the_printed_gib_else_the_suggestion_lines_exact_bytes():
    assert _available_kv_bytes(log_facts(("available_kv_gib", 6.51))).value == gib_interval(6.51)
    lo, hi = gib_interval(6.51)
    assert lo == math.ceil(6.505 * GiB) and hi == math.ceil(6.515 * GiB)
    exact = _available_kv_bytes(log_facts(("suggestion", {"kv_cache_in_use_bytes": 59_212_694_937})))
    assert exact.value == (59_212_694_937, 59_212_694_937 + 1) and "exact bytes" in exact.notes[0]
    assert _available_kv_bytes(log_facts()).value is None


def test_weights_in_gb_are_gib_and_say_so():
    found = _weights_gib(log_facts(("model_loading_gib", 14.99), line="Loading model weights took 14.99 GB"))
    assert found.value == 14.99 and "X is GiB" in found.notes[0]
