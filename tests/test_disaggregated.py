"""Prefill and decode apart (issue 32): `servesize plan --prefill-instances X --decode-instances Y`.

The layout's ceilings are its pools' own plans (the decode pool with no prefill chunk in its steps, the prefill pool
with the TTFT budget less a cold turn's handover) and the link's; the transfers are engine/kv_transfer.py's
(checked by hand in tests/test_kv_transfer.py); here, that the plan composes them as planning/disaggregated.py says,
on the issue's own command."""

from __future__ import annotations

import json
import shlex

import pytest

from cli_runner import run_captured
from servesize.api import plan, plan_disaggregated
from servesize.cli import main
from servesize.errors import BadInput
from servesize.resolve.disaggregated import default_link
from servesize.scenario import Scenario

ISSUE = ["qwen3.6-27b", "--gpus", "4xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--prefill-instances", "1",
         "--decode-instances", "3"]


def _scenario(**extra) -> Scenario:
    return Scenario(model="qwen3.6-27b", gpus="4xH200", quantization="fp8", kv_cache_dtype="fp8", **extra)


@pytest.fixture(scope="module")
def issue_json():
    code, out, err = run_captured("plan", *ISSUE, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_issues_command_gives_users_the_binding_ceiling_the_transfers_and_the_aggregated_line(issue_json):
    d = issue_json
    ceilings = d["ceilings"]
    assert set(ceilings) == {"cache", "decode", "latency", "saturation", "prefill cache", "link"}
    assert d["users"] == min(ceilings.values()) and ceilings[d["binding"]] == d["users"]
    assert {"warm", "cold", "start"} == set(d["transfer"])
    # a warm turn pulls only what the decode instance lacks: its turn and the blocks its hit does not cover (at
    # 1,600-token blocks with MTP drafts, 4,400 tokens: planning.ceilings.warm_prefill_tokens), far less than a cold
    # one, which pulls the whole context
    warm, cold = d["transfer"]["warm"], d["transfer"]["cold"]
    assert 2_000 + 799.5 + 1_600 <= warm["pull"]["remote_tokens"] + 1 <= 2_000 + 799.5 + 1_600 + 1_600
    assert warm["pull"]["remote_tokens"] < 0.2 * cold["pull"]["remote_tokens"]
    assert cold["pull"]["local_hit_tokens"] == 0 and warm["pull"]["bytes"] < cold["pull"]["bytes"]
    agg = d["aggregated"]
    assert f"{agg['users']:,.0f}" in d["comparison"] and f"{d['users']:,.0f}" in d["comparison"]
    assert d["layout"]["gpus_used"] == 4 and d["layout"]["link"]["key"] == "nvlink4"  # H200s in one NVLink domain


def test_each_pool_is_sized_as_servesize_memory_sizes_its_instance_and_the_connector_reserves_nothing(issue_json):
    memory = issue_json["memory"]
    for role in ("prefill", "decode"):
        pool = memory[role]
        assert pool["num_blocks"] > 0 and any("GPU KV cache size" in line for line in pool["log_lines"])
    assert memory["connector_gpu_bytes"] == 0 and "register_kv_caches" in memory["connector_source"]


def test_the_ceilings_are_the_pools_own_plans(issue_json):
    d = issue_json
    assert d["ceilings"]["cache"] == d["decode_pool"]["ceilings"]["cache"]
    assert d["ceilings"]["decode"] == d["decode_pool"]["ceilings"]["decode"]
    assert d["ceilings"]["latency"] == d["prefill_pool"]["ceilings"]["latency"]
    assert d["ceilings"]["saturation"] == d["prefill_pool"]["ceilings"]["saturation"]
    assert d["ceilings"]["prefill cache"] == d["prefill_pool"]["ceilings"]["cache"]
    # the prefill pool plans for the TTFT limit less a cold turn's handover
    assert d["prefill_pool"]["ttft_budget_s"] == pytest.approx(d["ttft_limit_s"] - d["transfer"]["cold"]["handover_s"])


def test_a_decode_pool_without_prefill_chunks_decodes_for_more_users_per_gpu_than_the_aggregated_one(issue_json):
    # aggregated, decodes wait for the chunks in their steps (decode binds there); the decode pool's steps carry none
    d = issue_json
    assert d["aggregated"]["binding"] == "decode"
    assert d["ceilings"]["decode"] / 3 > d["aggregated"]["ceilings"]["decode"] / 4


def test_the_handover_is_the_pull_and_the_decode_instances_steps_at_the_floor(issue_json):
    d = issue_json
    step = d["decode_pool"]["decode_step_s"]
    for tt in d["transfer"].values():
        assert tt["handover_s"] == pytest.approx(tt["time"]["seconds"] + 4.3 * step)


def test_the_link_ceiling_is_the_users_at_which_the_decode_ranks_or_the_prefill_gpus_are_busy_all_the_time(issue_json):
    d = issue_json
    link, shares = d["link"], d["link"]["shares"]
    mean_s = sum(shares[t] * d["transfer"][t]["time"]["seconds"] for t in shares)
    assert link["mean_pull_s"] == pytest.approx(mean_s)
    # coding-agent: think 30 s, subagent requests r = 0.1; 3 decode instances each pull one request at a time
    assert link["decode_side_users"] == pytest.approx(3 * (1 / mean_s) * 30 / 1.1)
    mean_bytes = sum(shares[t] * d["transfer"][t]["pull"]["bytes"] for t in shares)
    assert link["prefill_side_users"] == pytest.approx(1 * 450e9 * 0.163 / mean_bytes * 30 / 1.1)
    assert d["ceilings"]["link"] == min(link["decode_side_users"], link["prefill_side_users"])


def test_more_prefill_instances_raise_the_prefill_pools_ceilings():
    one, two = plan_disaggregated(_scenario(prefill_instances=1, decode_instances=3)), \
        plan_disaggregated(_scenario(prefill_instances=2, decode_instances=2))
    assert two.values["saturation"] == pytest.approx(2 * one.values["saturation"], rel=1e-6)
    assert two.values["decode"] < one.values["decode"]


def test_every_recipe_line_reads_back_through_the_vllm_serve_reader(issue_json, capsys):
    for role in ("prefill", "decode"):
        line = issue_json["recipes"][role]
        assert "--kv-transfer-config" in line and ('"kv_producer"' if role == "prefill" else '"kv_consumer"') in line
        assert main(["memory", "--vllm-serve", line, "--gpus", "1xH200", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert any("NixlConnector" in w for w in report["flags_not_modelled"])  # the connector is named, not lost
        assert shlex.split(line)[:3] == ["vllm", "serve", "Qwen/Qwen3.6-27B"]


@pytest.mark.parametrize("interconnect, host_link, gpus, key", [
    ("NVLink4 900 GB/s", "PCIe Gen5 x16", 4, "nvlink4"),
    ("NVLink4 900 GB/s", "PCIe Gen5 x16", 16, "ib-ndr"),  # more than one 8-GPU NVLink domain
    ("PCIe Gen4 x16 64 GB/s; no NVLink", "PCIe Gen4 x16", 2, "pcie4-x16"),
    ("NVLink5 1,800 GB/s", "", 8, "nvlink5"),
])
def test_the_default_link_is_the_gpus_nvlink_in_one_domain_else_a_nic_per_gpu(interconnect, host_link, gpus, key):
    got, why = default_link(interconnect, host_link, gpus)
    assert got == key and "assumed" in why and "--kv-link" in why


@pytest.mark.parametrize("argv, words", [
    (["--prefill-instances", "3", "--decode-instances", "3"], "needs 6 GPUs"),
    (["--prefill-instances", "1"], "both --prefill-instances"),
    (["--prefill-instances", "1", "--decode-instances", "1", "--kv-connector", "NixlPushConnector"],
     "does not price"),
    (["--prefill-instances", "1", "--decode-instances", "1", "--kv-connector", "P2pNcclConnector"],
     "registers no such connector"),
    (["--prefill-instances", "1", "--decode-instances", "1", "--kv-link", "eth-100", "--ttft-limit", "0.1"],
     "faster --kv-link"),
    (["--prefill-instances", "1", "--decode-instances", "1", "--sweep", "median=31k,45k"], "--sweep"),
    (["--prefill-instances", "1", "--decode-instances", "1", "--team", "a=10"], "--team"),
])
def test_a_layout_that_cannot_be_planned_is_one_line(argv, words, capsys):
    assert main(["plan", "qwen3.6-27b", "--gpus", "4xH200", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and "Traceback" not in "".join(err)


def test_the_aggregated_plan_refuses_a_disaggregated_scenario_and_names_the_function_that_plans_it():
    with pytest.raises(BadInput, match="plan_disaggregated"):
        plan(_scenario(prefill_instances=1, decode_instances=1))


def test_the_docs_table_is_the_plans_own():
    import importlib.util
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("disaggregated_table", root / "scripts" / "disaggregated_table.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    doc = (root / "docs" / "disaggregated.md").read_text()
    for preset in script.PRESETS:
        for gpus in (2, 4, 8):
            assert script.row(preset, gpus) in doc, (preset, gpus)


def test_fleet_considers_prefill_and_decode_apart_on_its_winners_shape_and_says_why_it_picked_its_winner():
    import math

    from servesize.api import fleet

    result = fleet(users=500, models="qwen3.6-27b", gpus_from="H200")
    d = result.disaggregated
    assert d is not None and d["considered"]
    sizing = d["sizing"]
    # each pool's instances: the users over what one instance holds at its binding ceiling
    assert sizing["prefill_instances"] == math.ceil(500 / sizing["per_prefill_instance"][sizing["prefill_binding"]])
    assert sizing["decode_instances"] == math.ceil(500 / sizing["per_decode_instance"][sizing["decode_binding"]])
    assert d["gpus"] == sizing["prefill_instances"] * sizing["prefill_tp"] + sizing["decode_instances"] * sizing["decode_tp"]
    assert d["cheaper"] == (d["gpus"] < result.winner.n_gpu)
    assert f"{d['gpus']} GPUs" in d["why"] and str(result.winner.n_gpu) in d["why"]
    assert ("aggregated winner" in d["why"]) != d["cheaper"]
    assert "--prefill-instances" in d["plan_command"]


def test_a_pool_whose_instance_vllm_would_not_start_exits_3_as_the_aggregated_plan_does(capsys):
    argv = ["plan", "llama-3.1-8b", "--gpu-memory-utilization", "0.2", "--max-model-len", "131072"]
    assert main([*argv, "--gpus", "1xH100"]) == 3
    aggregated = capsys.readouterr().err.strip().splitlines()[-1]
    assert main([*argv, "--gpus", "2xH100", "--prefill-instances", "1", "--decode-instances", "1"]) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == aggregated and "would not start" in aggregated


def test_a_pasted_serve_lines_kv_transfer_config_names_the_connector(capsys):
    line = ("vllm serve Qwen/Qwen3.6-27B --quantization fp8 --kv-cache-dtype fp8 --kv-transfer-config "
            "'{\"kv_connector\":\"NixlPullConnector\",\"kv_role\":\"kv_consumer\"}'")
    d = plan_disaggregated(Scenario(vllm_serve=line, gpus="2xH200", prefill_instances=1, decode_instances=1))
    assert d.layout.connector == "NixlPullConnector"
    push = line.replace("NixlPullConnector", "NixlPushConnector")
    assert main(["plan", "--vllm-serve", push, "--gpus", "2xH200", "--prefill-instances", "1",
                 "--decode-instances", "1"]) == 2
    err = capsys.readouterr().err
    assert "--kv-connector NixlPushConnector" in err and "does not price" in err


def test_pools_of_two_gpu_types_each_plan_on_their_own_gpus_over_a_nic_and_the_aggregated_answer_adds_both_types():
    from servesize.api import plan_inputs

    mixed = plan_disaggregated(_scenario(prefill_instances=2, decode_instances=3, prefill_gpu="H100").replace(
        gpus="3xH200"))
    layout = mixed.layout
    assert layout.mixed and (layout.gpu, layout.prefill_gpu) == ("H200-SXM", "H100-SXM")
    # each pool is the plan of its own GPUs: the prefill pool's instance is sized as `memory` sizes one on an H100
    assert mixed.prefill.fixed.gpu_key == "H100-SXM" and mixed.decode.fixed.gpu_key == "H200-SXM"
    h100 = plan_inputs(_scenario(tensor_parallel_size=1, data_parallel_size=2).replace(gpus="2xH100"))
    assert mixed.prefill.memory.pool.num_blocks == h100.memory_and_fixed()[0].pool.num_blocks
    # GPUs of two types share no NVLink fabric: the default link is a NIC per GPU, and it says so
    assert layout.link_key == "ib-ndr" and "share no NVLink" in layout.link_assumed
    # the aggregated answer on the same GPUs: each type's GPUs served apart, their users added
    groups = mixed.aggregated.plans
    assert [p.fixed.gpu_key for p in groups] == ["H200-SXM", "H100-SXM"]
    assert mixed.aggregated.users == sum(p.ceilings[p.binding] for p in groups)
    d = mixed.to_dict()
    assert d["layout"]["prefill_gpu"] == "H100-SXM" and d["aggregated"]["users"] == mixed.aggregated.users
    assert [g["gpu"] for g in d["aggregated"]["groups"]] == ["H200-SXM", "H100-SXM"]
    assert "H100-SXM" in mixed.comparison() and "H200-SXM" in mixed.comparison()
    # one type named twice is the one-type layout
    same = plan_disaggregated(_scenario(prefill_instances=1, decode_instances=3, prefill_gpu="H200"))
    assert not same.layout.mixed and len(same.aggregated.plans) == 1 and "groups" not in same.to_dict()["aggregated"]


@pytest.mark.parametrize("argv,words", [
    (["--prefill-instances", "2", "--decode-instances", "3", "--prefill-gpu", "FOO"], "--prefill-gpu 'FOO': unknown GPU"),
    (["--prefill-instances", "2", "--decode-instances", "3", "--prefill-gpu", "2xH100"], "names a GPU type"),
    (["--prefill-instances", "1", "--decode-instances", "5", "--prefill-gpu", "H100"], "holds the decode pool alone"),
    (["--prefill-gpu", "H100"], "--prefill-gpu shapes a disaggregated layout"),
    (["--prefill-tp", "2"], "--prefill-tp shapes a disaggregated layout"),
    (["--kv-link", "ib-ndr"], "--kv-link shapes a disaggregated layout"),
])
def test_a_layout_of_two_gpu_types_or_a_layout_field_alone_is_refused_in_one_line(argv, words, capsys):
    assert main(["plan", "qwen3.6-27b", "--gpus", "4xH200", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and "Traceback" not in "".join(err)
