"""servesize plan: the seed's headline figures, the JSON contract, sweeps, plots and bad input."""

import json

import pytest

from cli_runner import run, run_json
from servesize.cli import main

H200_NOMINAL = 141e9                     # the seed's nominal H200 memory (working-set-model.md 2.4)
W_27B_FP8 = 28.8 * 2**30                 # the seed's Qwen3.6-27B FP8 checkpoint
RESERVE = 19_308_875_468.8               # the seed's activation reserve per GPU (2.4)
POOL_FP8 = 2_770_000                     # the calibrated FP8 pool, tokens
POOL_FP16 = (H200_NOMINAL - W_27B_FP8 - RESERVE) / 65536           # 2 x 32,768 B per token
POOL_TP2 = (2 * H200_NOMINAL - W_27B_FP8 - 2 * RESERVE) / 32768    # one TP2 group, FP8 KV

SEED = ["qwen3.6-27b", "-q", "fp8", "--state-dtype", "bfloat16", "--assumptions", "seed", "--vllm-version", "0.19.0",
        "--no-sensitivity"]  # the seed ran vLLM 0.19.0
FAST = ["--fills", "400"]


def plan_json(capsys, *argv):
    return run_json(capsys, "plan", *SEED, *argv, "--json")


def test_the_seeds_fp8_headline_reproduces_86_warm_users_p50_and_69_p5(capsys):
    d = plan_json(capsys, "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", str(POOL_FP8))
    assert d["warm_users"]["p50"] == pytest.approx(86, abs=3)
    assert d["warm_users"]["p5"] == pytest.approx(69, abs=3)
    assert d["ceilings"]["cache"] == d["warm_users"]["p5"]
    assert d["state_bytes_per_session_per_rank"] == 3 * 16 * 1_638_400 == 78_643_200  # the seed's 75 MiB
    assert d["ceilings"]["decode"] == pytest.approx(118, abs=3)
    assert d["binding"] == "cache"


def test_without_mtp_the_decode_ceiling_is_about_60(capsys):
    d = plan_json(capsys, *FAST, "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", str(POOL_FP8),
                  "--mtp-speedup", "1.0")
    assert d["ceilings"]["decode"] == pytest.approx(60, abs=3)
    assert "speculative-config" not in d["recipe"]


def test_fp16_kv_keeps_about_45_users_warm(capsys):
    d = plan_json(capsys, "--gpus", "1xH200", "--kv-cache-dtype", "auto", "--pool-tokens", str(int(POOL_FP16)))
    assert POOL_FP16 == pytest.approx(1_385_000)
    assert d["warm_users"]["p50"] == pytest.approx(45, abs=3)


def test_tp2_keeps_about_202_users_warm(capsys):
    d = plan_json(capsys, "--gpus", "2xH200", "-tp", "2", "--kv-cache-dtype", "fp8", "--pool-tokens", str(int(POOL_TP2)))
    assert d["warm_users"]["p50"] == pytest.approx(202, abs=3)


def test_the_median_sweep_reproduces_the_seeds_table(capsys):
    d = plan_json(capsys, "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", "2.77m",
                  "--sweep", "median=31k,45k,60k,80k,100k,140k")
    p50 = [row["warm_users"]["p50"] for row in d["sweep"]["rows"]]
    for got, want in zip(p50, [86, 56, 42, 33, 28, 23]):
        assert got == pytest.approx(want, abs=3)
    assert [row["label"] for row in d["sweep"]["rows"]] == ["31k", "45k", "60k", "80k", "100k", "140k"]


def test_the_json_holds_every_required_key(capsys):
    code = main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--fills", "200",
                 "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in ("warm_users", "warm_sessions", "pool_tokens", "ceilings", "binding", "recipe", "power",
                "sensitivity", "assumptions", "memory"):
        assert key in d
    assert set(d["warm_users"]) == {"p5", "p50", "p95"}
    assert set(d["ceilings"]) == {"cache", "decode", "latency", "saturation"}
    assert d["binding"] in d["ceilings"]
    assert d["recipe"].startswith("vllm serve ") and "--max-num-seqs" in d["recipe"]
    assert d["power"]["kw_at_meter"] > 0
    assert "bandwidth_efficiency" in d["sensitivity"]
    assert d["pool_tokens"] == d["memory"]["modelled_pool_tokens"]


def test_data_parallel_recipe_says_to_use_a_session_sticky_router(capsys):
    code = main(["plan", *SEED, *FAST, "--gpus", "2xH200", "-dp", "2", "--kv-cache-dtype", "fp8",
                 "--pool-tokens", "2.77m"])
    out = capsys.readouterr().out
    assert code == 0
    assert "run 2 of these behind a session-sticky router" in out


def test_a_bad_workload_value_is_one_line_and_exit_2(capsys):
    code = main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "--sigma", "-1"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("servesize: ")
    code = main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "--median", "lots"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_explain_lists_the_named_assumptions_with_their_sources(capsys):
    code = main(["plan", *SEED, *FAST, "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", "2.77m",
                 "--explain"])
    out = capsys.readouterr().out
    assert code == 0
    assert "decode.bandwidth_efficiency" in out and "seed: data/assumptions.toml" in out
    assert "pool_tokens" in out and "derivation:" in out


def test_plot_writes_a_png(capsys, tmp_path):
    path = tmp_path / "plan.png"
    code = main(["plan", *SEED, "--fills", "200", "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", "2.77m",
                 "--plot", str(path)])
    capsys.readouterr()
    assert code == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_calibration_without_the_module_or_file_is_a_clear_error(capsys, tmp_path):
    code = main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "--calibration", str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("servesize: ")


def test_a_calibrations_pool_replaces_the_modelled_one(capsys, tmp_path):
    from servesize.vllm_logs.calibration import calibrate
    from servesize.vllm_logs.files import save_calibration
    from servesize.vllm_logs.parse import parse_vllm_log

    log = "INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n" \
          "INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens\n" \
          "INFO 10-03 16:22:17 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 1.30x\n"
    cal = calibrate(parse_vllm_log(log, "lmcache-1739.log"))
    assert cal.pool_tokens
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    # the lines (LMCache#1739) are a Qwen3-14B's and name no model: applied to another model only when told
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--calibration", str(path), "--no-sensitivity", "--json"]) == 2
    capsys.readouterr()
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--calibration", str(path), "--no-sensitivity", "--json",
                 "--calibration-mismatch-ok"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == cal.pool_tokens


def test_a_calibration_with_only_available_memory_drives_the_pool_through_the_engine(capsys, tmp_path):
    import pathlib

    from servesize.vllm_logs.calibration import calibrate
    from servesize.vllm_logs.files import save_calibration
    from servesize.vllm_logs.parse import parse_vllm_log

    log = pathlib.Path(__file__).parent / "data" / "vllm-logs" / "v1-024-two-line.log"
    cal = calibrate(parse_vllm_log(log.read_text(), log.name))
    assert cal.pool_tokens is None and cal.available_kv_bytes_per_gpu
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    # 5.98 GiB holds one Llama-3.1-8B request of at most 48,960 tokens (vLLM's start-up check): cap at 32k. The
    # log is a Qwen3.6-35B's, its config line cut before the model: applied to Llama only when told
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--calibration", str(path), "--max-model-len", "32768",
                 "--no-sensitivity", "--json", "--calibration-mismatch-ok"]) == 0
    pool = json.loads(capsys.readouterr().out)["pool_tokens"]
    lo, hi = cal.available_kv_bytes_per_gpu
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--kv-cache-memory-bytes", str((lo + hi) // 2),
                 "--max-model-len", "32768", "--json"]) == 0
    assert pool == json.loads(capsys.readouterr().out)["usable_kv_tokens"]


def test_the_cap_never_exceeds_the_models_own_context(capsys):
    d = json.loads((main(["plan", "qwen3-32b", "--gpus", "1xH200", "--no-sensitivity", "--json"]), capsys.readouterr().out)[1])
    assert d["workload"]["max_model_len"] == 40960 and "--max-model-len 40960" in d["recipe"]


@pytest.mark.parametrize("argv,fragment", [
    (["llama-3.1-8b", "--gpus", "1xH100", "--mtp-speedup", "1.7"], "no MTP head"),
    (["qwen3.6-27b", "--gpus", "1xH200", "--mtp-speedup", "3.5"], "at most 3x"),
    (["qwen3.6-27b", "--gpus", "1xH200", "--comfortable-floor", "0"], "--comfortable-floor 0 is out of range: (0,"),
    (["qwen3.6-27b", "--gpus", "1xH200", "--pool-tokens", "1"], "prefixes"),
    (["qwen3.6-27b", "--gpus", "1xH200", "--sweep", "spec_tokens=0,1,3"], "draft count"),
])
def test_plan_refuses_what_it_cannot_model_in_one_line(capsys, argv, fragment):
    code = main(["plan", *argv, "--no-sensitivity"])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_json_has_no_infinities_when_nothing_stays_warm(capsys):
    assert main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "--invalidation", "1", "--no-sensitivity", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)  # strict JSON: json.loads accepts Infinity, so check explicitly
    assert d["ceilings"]["cache"] == 0 and d["headroom"]["decode"] is None
    assert d["power"]["cost_per_user_month"] is None


def _fixed_27b_on_one_h200(with_deployment=False):
    from servesize.engine.deployment import Deployment
    from servesize.engine.memory import memory_report
    from servesize.model.catalogue import resolve_model
    from servesize.model.hardware import parse_gpus
    from servesize.planning.inputs import fixed_from_memory

    arch = resolve_model("qwen3.6-27b").architecture
    dep = Deployment(quantization="fp8", kv_cache_dtype="fp8", max_model_len=180_000)
    fixed = fixed_from_memory(memory_report(arch, parse_gpus("1xH200"), dep), arch)
    return (fixed, dep) if with_deployment else fixed


def test_a_ceiling_the_changed_value_cannot_move_is_not_computed_again():
    from servesize.planning.ceilings import CeilingCache, ceilings
    from servesize.planning.inputs import Knobs
    from servesize.workload.model import Workload

    fixed, wl, knobs, cache = _fixed_27b_on_one_h200(), Workload.seed_reference(), Knobs(fills=300), CeilingCache()
    base = ceilings(fixed, wl, knobs, cache)
    paced = ceilings(fixed, wl.replace(think_time_s=10.0), knobs, cache)       # pacing: latency only
    colder = ceilings(fixed, wl.replace(invalidation=0.05), knobs, cache)      # coldness: not the decode lengths
    assert paced.warm is base.warm and paced.decode is base.decode and paced.values["latency"] < base.values["latency"]
    assert colder.decode is base.decode and colder.values["cache"] < base.values["cache"]
    assert ceilings(fixed, wl, Knobs(fills=300, mfu=0.3), cache).warm is base.warm


def test_the_binding_from_searches_taken_only_as_far_as_needed_is_the_full_plans():
    from servesize.planning.ceilings import CeilingCache, binding_of, ceilings
    from servesize.planning.inputs import Knobs
    from servesize.workload.model import Workload

    fixed, wl = _fixed_27b_on_one_h200(), Workload.seed_reference()
    lazy = CeilingCache()  # one cache across the scan, as the sensitivity panel keeps it
    cases = ([(wl, Knobs(fills=300, ttft_limit_s=t)) for t in (0.5, 1.0, 2.0, 4.0, 10.0, 30.0, 60.0)]
             + [(wl, Knobs(fills=300, mfu=f)) for f in (0.02, 0.05, 0.15, 0.45, 0.9)]
             + [(wl.replace(think_time_s=t), Knobs(fills=300)) for t in (1.0, 3.0, 10.0, 60.0, 180.0)])
    found = []
    for workload, knobs in cases:
        full = ceilings(fixed, workload, knobs, CeilingCache(), comfortable=False).binding  # every search finished
        assert binding_of(fixed, workload, knobs, lazy) == full
        found.append(full)
    assert "latency" in found and len(set(found)) >= 2  # the scan crosses a flip into and out of latency
    # ... and some searches were left open: latency (or decode) was plainly above another ceiling before the end
    assert any(search._result is None for search in lazy.ttft.values())
    assert any(bisection._result is None for bisection in lazy.decode_load.values())


def test_a_latency_or_decode_binding_is_decided_without_finishing_the_ttft_search():
    # latency binds (a tight TTFT budget, slow prefill) or decode sits under it (a high floor): either way the
    # TTFT bracket and two probes of the decode bisection decide it, the TTFT search is left open, and the answer
    # is the full plan's
    from dataclasses import replace

    from servesize.planning.ceilings import CeilingCache, binding_of, ceilings
    from servesize.planning.inputs import Knobs
    from servesize.workload.model import Workload

    fixed, wl = _fixed_27b_on_one_h200(), Workload.seed_reference()
    cases = ([(fixed, Knobs(fills=300, ttft_limit_s=t, mfu=f)) for t in (1.0, 3.0, 8.0) for f in (0.1, 0.3, 0.6)]
             + [(fixed, Knobs(fills=300, decode_floor=f)) for f in (40, 60, 80)]
             + [(replace(fixed, chunk_tokens=c), Knobs(fills=300)) for c in (256, 2048, 32768)])
    open_by_binding: dict[str, int] = {}
    for fx, knobs in cases:
        full = ceilings(fx, wl, knobs, CeilingCache(), comfortable=False).binding
        lazy = CeilingCache()
        assert binding_of(fx, wl, knobs, lazy) == full
        left_open = all(search._result is None for search in lazy.ttft.values())
        open_by_binding[full] = open_by_binding.get(full, 0) + left_open
    assert open_by_binding.get("latency", 0) >= 2 and open_by_binding.get("decode", 0) >= 1, open_by_binding


def test_the_sensitivity_scan_finds_each_rows_flip_between_its_ends():
    from servesize.planning.inputs import Knobs
    from servesize.planning.plan import make_plan
    from servesize.scenario import SENSITIVITY_ROWS
    from servesize.workload.model import Workload

    plan = make_plan(*_fixed_27b_on_one_h200(with_deployment=True), Workload.seed_reference(), Knobs(fills=400),
                     sensitivity_rows=SENSITIVITY_ROWS)
    assert list(plan.sensitivity) == list(SENSITIVITY_ROWS)
    for name, row in plan.sensitivity.items():
        assert row["binding_at_current"] in ("cache", "decode", "latency", "saturation"), name
        if row["flip_at"] is not None:
            lo, hi = row["range"]
            assert lo <= row["flip_at"] <= hi and row["binds_after"] != row["binding_at_current"], name


def test_the_panel_places_each_flip_within_one_and_a_half_percent_of_a_ten_step_search():
    """FLIP_BISECTIONS (7) steps place every flip of the seed's workload within 1.5% of where ten steps place it (at
    most 1.0% on the reference case, scripts/flip_precision.py, where the flips move 0.8-8.7% between seeds); three
    steps would miss by 2-20%. The panel's default is that count."""
    from servesize.planning.ceilings import CeilingCache, ceilings
    from servesize.planning.inputs import Knobs
    from servesize.planning.sensitivity import FLIP_BISECTIONS, sensitivity
    from servesize.scenario import SENSITIVITY_ROWS
    from servesize.workload.model import Workload

    fixed, workload, knobs = _fixed_27b_on_one_h200(), Workload.seed_reference(), Knobs(fills=400)

    def flips(steps: int | None) -> dict:
        cache = CeilingCache()
        base = ceilings(fixed, workload, knobs, cache).binding
        kw = {} if steps is None else {"iterations": steps}
        found = sensitivity(fixed, workload, knobs, base, SENSITIVITY_ROWS, cache=cache, **kw)
        return {name: row["flip_at"] for name, row in found.items() if row.get("flip_at") is not None}

    panel, fine = flips(None), flips(10)
    assert panel == flips(FLIP_BISECTIONS) and len(fine) >= 4 and set(panel) == set(fine)
    gaps = {name: abs(panel[name] / fine[name] - 1) for name in fine}
    assert max(gaps.values()) <= 0.015, gaps
    assert panel != fine  # fewer steps than the ten: the panel's flips are its own


def test_a_model_whose_context_is_shorter_than_the_median_session_says_so():
    import math

    import servesize as s

    plan = s.plan(s.Scenario(model="phi-4", gpus="1xH200", kv_cache_dtype="fp8", fills=200), sensitivity=False)
    short = plan.context_shortfall()
    w = plan.workload
    assert w.max_model_len == 16_384 < w.user.median_tokens == 31_000   # Phi-4's 16K window, the 31k median
    z = (math.log(16_384) - math.log(31_000)) / w.user.sigma                 # log-normal: P(L > cap) = 1 - Phi(z)
    assert short["share_over"] == pytest.approx(1 - 0.5 * (1 + math.erf(z / math.sqrt(2))), rel=1e-9)
    assert short["share_over"] > 0.5 and "cannot hold this workload" in short["text"]
    assert plan.to_dict()["context_shortfall"] == short
    fits = s.plan(s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8", fills=200),
                  sensitivity=False)
    assert fits.context_shortfall() is None


def _offload_plan(capsys, *extra):
    args = ["llama-3.1-8b", "--gpus", "2xH100-SXM", "-tp", "2", "--cpu-offload-gib", "256", "--fills", "200",
            "--no-sensitivity", *extra]
    doc = run_json(capsys, "plan", *args, "--json")
    code, out, err = run(capsys, "plan", *args)
    assert code == 0, err
    return doc, out


def test_cpu_offload_says_where_the_warm_users_live_and_what_a_restore_costs(capsys):
    doc, text = _offload_plan(capsys)
    o, restore = doc["offload"], doc["offload_restore"]
    b = doc["kv_bytes_per_token_per_rank"] * 2                       # the TP 2 group's KV bytes per token
    rate = 64e9 * 0.78 * 2                                           # gpus.toml: H100 SXM on PCIe Gen5 x16, both ranks
    assert restore["pcie_bytes_per_s"] == pytest.approx(rate) and not restore["pcie_assumed"]
    assert restore["seconds_per_100k_tokens"] == pytest.approx(100_000 * b / rate)
    assert o["restore_s_per_turn"] == restore["median_session_seconds"] == pytest.approx(
        (restore["median_session_unique_tokens"] * b + 2 * doc["state_bytes_per_session_per_rank"]) / rate)
    assert o["link"] == "2 x PCIe Gen5 x16" and "PCI-SIG" in o["link_source"]
    assert o["users_in_host_ram"] == doc["cpu_offloaded_users"] and o["users_in_gpu_kv"] == doc["gpu_resident_users"]
    assert o["users_in_host_ram"]["p5"] > 0 and o["users_in_gpu_kv"]["p5"] > 0
    for q in ("p5", "p50", "p95"):   # one fill's two tiers: they add up to its warm users, the percentile's rank
        assert o["users_in_gpu_kv"][q] + o["users_in_host_ram"][q] == pytest.approx(doc["warm_users"][q], abs=1)
    users = o["users_in_gpu_kv"]["p5"] + o["users_in_host_ram"]["p5"]
    head = (f"of {users:,.0f} warm users (p5), {o['users_in_gpu_kv']['p5']:,.0f} have their session "
            f"in GPU KV and {o['users_in_host_ram']['p5']:,.0f} in host RAM only")
    assert o["text"].startswith(head)
    assert f"{o['restore_s_per_turn']:.3f} s for the median session" in o["text"]
    assert "  CPU offload: " + o["text"] in text
    assert f"offload restore over 2 x PCIe Gen5 x16 ({rate / 1e9:g} GB/s)" in text
    rows = {r["name"]: r for r in doc["assumptions"]}
    assert rows["offload.host_link_efficiency"]["value"] == 0.78 and rows["offload.host_link"]["value"] == "PCIe Gen5 x16"


def test_without_cpu_offload_the_plan_has_no_offload_block(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100-SXM", "--fills", "200", "--no-sensitivity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["offload"] is None


def test_a_gpu_without_a_catalogued_host_link_restores_over_an_assumed_one_and_says_so(capsys):
    doc, text = _offload_plan(capsys, "--gpus", "1xB200", "-tp", "1")
    assert doc["offload"]["link_assumed"] and doc["offload"]["link"] == "PCIe Gen5 x16 (assumed)"
    assert "gpus.toml has no host link for B200" in doc["offload"]["link_source"]
    assert "PCIe Gen5 x16 (assumed)" in text


def test_the_seed_sentence_on_prefill_mfu_says_both_mfus_are_scaled_by_the_deployments_kernels():
    """Where the study's 45% MFU is the switch that moves the answer, on an FP8 deployment both it and servesize's
    MFU run scaled by the GPU's measured FP8 GEMM share: the sentence says so and gives both effective shares of the
    peak, not a bare 'servesize: 66% of peak' that an FP8 H100 never runs at."""
    from servesize.api import plan
    from servesize.planning.plan import seed_words
    from servesize.scenario import Scenario

    p = plan(Scenario(model="llama-3.1-8b", gpus="1xH100", quantization="fp8", ttft_limit=1.0))
    assert p.vs_seed is not None and p.vs_seed["assumption"] == "prefill.mfu"
    share = p.vs_seed["prefill_factor"]
    assert share == pytest.approx(p.fixed.fp8_prefill_share) and 0.5 < share < 1.0
    text = p.seed_sentence()
    assert f"x {share:.3g}" in text and f"{p.vs_seed['default'] * share:.0%}" in text
    assert seed_words("prefill.mfu", 0.45, 0.66) == "prefill runs at 45% of peak FLOP/s (servesize: 66%)"
