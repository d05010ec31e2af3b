"""Workload presets: sourced data, printed first, replaced by a file and then by flags; what would plan nonsense
(a prefix longer than the sessions it belongs to, subagents on chat, MTP on a model without a head) is refused or
said in one line."""

import json

import pytest

from cli_runner import run_json
from servesize.assumptions import assumption
from servesize.cli import main
from servesize.errors import BadInput
from servesize.resolve import knobs_of, plan_inputs, resolved_workload
from servesize.scenario import Scenario
from servesize.workload.catalogue import DEFAULT_PRESET, FIELDS, REQUIRED, preset_names, preset_table
from servesize.workload.model import (
    SEED_INVALIDATION,
    SEED_OUTPUT_TOKENS,
    SEED_SUBAGENT_RATIO,
    SEED_USER_MEDIAN_TOKENS,
    SEED_USER_PREFIX_TOKENS,
    Workload,
)
from servesize.workload.presets import preset

FAST = ["--no-sensitivity", "--fills", "200"]


def plan_json(capsys, *argv):
    return run_json(capsys, "plan", *argv, *FAST, "--json")


def test_the_four_presets_give_every_required_field_each_with_a_source():
    assert set(preset_names()) == {"coding-agent", "chat", "rag", "batch"} and DEFAULT_PRESET == "coding-agent"
    for name, raw in preset_table().items():
        assert raw["description"].strip() and raw["source"].strip(), name
        for field in REQUIRED:
            assert str(raw[field]["source"]).strip(), (name, field)
        assert set(raw) - {"description", "source"} <= set(FIELDS), name


def test_the_default_preset_is_the_seeds_reference_workload_field_for_field():
    p = preset("coding-agent")
    # the same numbers (only the source text differs), and the session turnover the seed has none of (its sessions
    # never end): priced only outside --assumptions seed (workload.session_turnover)
    assert p.workload() == Workload.seed_reference().replace(
        user=p.workload().user, subagent=p.workload().subagent, session_turns=p.values["session_turns"])
    assert (p.values["user_median_tokens"], p.values["user_prefix_tokens"], p.values["subagent_ratio"],
            p.values["invalidation"], p.values["output_tokens"]) == (
        SEED_USER_MEDIAN_TOKENS, SEED_USER_PREFIX_TOKENS, SEED_SUBAGENT_RATIO, SEED_INVALIDATION, SEED_OUTPUT_TOKENS)
    assert p.speculative == "mtp" and p.max_model_len == 180_000


def test_chat_has_no_subagents_and_takes_the_models_own_context():
    w, origin = resolved_workload(Scenario(model="llama-3.1-8b", gpus="1xH100", preset="chat"), model_limit=131_072)
    assert w.subagent is None and w.max_model_len == 131_072
    assert w.user.median_tokens == 1_020 and w.user.prefix_tokens == 512 and w.output_tokens == 211
    assert origin.sources["output_tokens"].startswith("preset chat: Azure LLM inference trace 2023")


def test_flags_replace_the_preset_and_the_plan_says_which_first(capsys):
    code = main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--preset", "chat", "--median", "3k", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    first, second = out.splitlines()[:2]
    assert first.startswith("workload: preset chat, interactive chat") and "median 1,020" in first
    assert second == "  from flags: --median 3,000"


def test_a_plan_without_a_preset_says_it_is_planning_the_seeds_coding_agents(capsys):
    assert main(["plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", *FAST]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("workload: preset coding-agent, agentic coding (the warm-capacity seed's reference")
    assert "prefix 15,000" in first and "subagents r = 0.1" in first and "MTP where the model has a head" in first


def test_a_preset_prefix_at_or_above_the_median_is_refused_in_one_line(capsys):
    # the first command: the seed's 15k prefix under a 2k median
    code = main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--median", "2k", "--max-model-len", "32k", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the user prefix (15,000 tokens, preset coding-agent) is at or above the median user session " \
           "(2,000 tokens, flag --median 2,000)" in err
    assert "--prefix" in err and "--preset chat" in err


def test_the_same_workload_with_its_own_prefix_plans_and_decodes_at_the_bandwidth_roofline(capsys):
    d = plan_json(capsys, "llama-3.1-8b", "--gpus", "1xH100", "--median", "2k", "--prefix", "300", "--max-model-len", "32k")
    assert d["workload"]["user"]["prefix_tokens"] == 300
    one = d["decode"]["points"][0]
    # one user: weights + the median context's KV over the fitted share of the datasheet bandwidth (no MTP head),
    # plus the fixed per-step overhead of a 32-layer model at TP 1 (planning/step_model.py StepTerms.overhead)
    weights = 16_060_522_496 - 128_256 * 4_096 * 2     # bf16 checkpoint less the input embedding (a gather)
    overhead = assumption("decode.step_overhead_s") + 32 * assumption("step.overhead_per_layer_s")
    expected = 1 / ((weights + 2_000 * 131_072) / (3_350e9 * assumption("decode.bandwidth_efficiency")) + overhead)
    assert one["concurrent_decoders"] == 1 and one["per_user_tok_s_p50"] == pytest.approx(expected, rel=0.01)
    assert one["bound"] == "memory"


def test_subagents_on_a_chat_workload_need_their_class_and_are_noted(capsys):
    code = main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--preset", "chat", "--subagent-ratio", "0.2", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "has no subagent class; give --subagent-median and --subagent-sigma" in err
    d = plan_json(capsys, "llama-3.1-8b", "--gpus", "1xH100", "--preset", "chat", "--subagent-ratio", "0.2",
                  "--subagent-median", "600", "--subagent-sigma", "0.5", "--subagent-prefix", "100")
    notes = d["workload_origin"]["notes"]
    assert any("preset chat (interactive chat" in n and "has no subagents" in n for n in notes)
    assert d["workload"]["subagent"]["median_tokens"] == 600 and d["workload"]["subagent_ratio"] == 0.2


def test_mtp_on_a_model_without_a_head_is_noted_for_a_preset_and_refused_for_a_flag(capsys):
    d = plan_json(capsys, "llama-3.1-8b", "--gpus", "1xH100", "--preset", "chat")
    assert any("llama-3.1-8b has no MTP head: decoding without speculation" in n for n in d["workload_origin"]["notes"])
    assert d["decode"]["spec_speedup"] == 1.0
    code = main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--preset", "chat", "--mtp-speedup", "1.7", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "no MTP head" in err


def test_a_head_vllm_does_not_serve_is_noted_and_refused_like_no_head(capsys):
    # MiniMax-M2.5 declares 3 MTP modules (use_mtp, num_mtp_modules), but vLLM maps no minimax_m2 config onto an MTP
    # draft and skips those weights at load (data/vllm_mtp.toml): the recipe used to serve
    # --speculative-config '{"method":"mtp",...}', which vLLM cannot start, and priced its speed-up
    d = plan_json(capsys, "minimax-m2.5", "--gpus", "8xH200", "--preset", "chat")
    assert d["decode"]["spec_speedup"] == 1.0 and "--speculative-config" not in d["recipe"]
    assert any("maps no minimax_m2 checkpoint onto an MTP draft" in n for n in d["workload_origin"]["notes"])
    for flag in (["--mtp-speedup", "1.7"], ["--num-speculative-tokens", "2"],
                 ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']):
        code = main(["plan", "minimax-m2.5", "--gpus", "8xH200", "--preset", "chat", *flag, *FAST])
        err = capsys.readouterr().err
        assert code == 2 and "onto an MTP draft" in err, (flag, err)


def test_a_head_is_served_from_the_release_its_draft_type_appears_in(capsys):
    # Qwen3.5's draft type qwen3_5_mtp is a speculative method from vLLM 0.17.0 (data/vllm_vocabulary.toml)
    served = plan_json(capsys, "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--vllm-version", "0.17.0")
    before = plan_json(capsys, "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--vllm-version", "0.16.0")
    assert '"method":"mtp"' in served["recipe"] and served["decode"]["spec_speedup"] > 1
    assert "--speculative-config" not in before["recipe"] and before["decode"]["spec_speedup"] == 1.0


def test_the_batch_preset_serves_without_speculation_unless_a_flag_asks():
    batch = Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", preset="batch")
    assert knobs_of(batch).mtp_speedup == 1.0
    inputs = plan_inputs(batch)
    assert inputs.deployment.num_speculative_tokens == 0   # no MTP weights sized into the memory either
    assert any("serves without speculative decoding" in n for n in inputs.origin.notes)
    asked = batch.replace(mtp_speedup=1.5)
    assert knobs_of(asked).mtp_speedup == 1.5


def test_an_unknown_preset_is_refused_with_the_list():
    with pytest.raises(BadInput, match="is not one of coding-agent, chat, rag, batch"):
        Scenario(model="llama-3.1-8b", gpus="1xH100", preset="agents")
    with pytest.raises(BadInput, match="no workload preset 'agents'; presets: coding-agent, chat, rag, batch"):
        preset("agents")


def test_a_workload_file_names_its_preset_and_preset_overrides_it(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"servesize_workload": 1, "preset": "chat", "output_tokens": 99,
                                "user": {"kind": "lognormal", "median_tokens": 3_000, "sigma": 0.5}}))
    d = plan_json(capsys, "llama-3.1-8b", "--gpus", "1xH100", "--workload", str(path))
    assert d["workload_origin"]["preset"] == "chat"
    assert d["workload"]["output_tokens"] == 99 and d["workload"]["think_time_s"] == 99.0   # file, then chat's
    assert d["workload"]["user"]["prefix_tokens"] == 512
    d = plan_json(capsys, "llama-3.1-8b", "--gpus", "1xH100", "--workload", str(path), "--preset", "rag")
    assert d["workload_origin"]["preset"] == "rag" and d["workload"]["warm_turn_tokens"] == 5_190
    assert d["workload"]["output_tokens"] == 99  # the file still wins over the preset
