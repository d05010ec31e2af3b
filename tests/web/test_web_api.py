"""The JSON API, in-process (aiohttp's test server): the numbers are the library's, refusals are 400 with
the field, the body is bounded, and nothing outside the request is read."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from aiohttp.test_utils import TestClient, TestServer

import servesize as s
from servesize.units import fmt_bytes, fmt_tokens
from servesize.web.app import make_app
from servesize.web.form import MAX_BODY_BYTES, presets
from servesize.web.views import finite

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
BASE = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8"}


def call(method: str, path: str, body=None, *, headers=None, raw: bytes | None = None):
    """(status, JSON or text) of one request to a fresh application."""

    async def go():
        async with TestClient(TestServer(make_app())) as client:
            data = raw if raw is not None else (json.dumps(body) if body is not None else None)
            sent = {"Content-Type": "application/json", **(headers or {})} if method == "POST" else headers
            response = await client.request(method, path, data=data, headers=sent)
            text = await response.text()
            try:
                return response.status, json.loads(text), response.headers
            except ValueError:
                return response.status, text, response.headers

    return asyncio.run(go())


def test_the_plan_is_what_servesize_plan_prints_for_the_same_scenario():
    status, view, _ = call("POST", "/api/plan", BASE)
    assert status == 200
    expected = finite(s.plan(s.Scenario(**BASE), sensitivity=False).to_dict())
    assert view["plan"] == expected
    assert view["verdict"]["binding"] == expected["binding"]
    assert view["verdict"]["users"] == expected["ceilings"][expected["binding"]]
    tiles = {t["id"]: t for t in view["tiles"]}
    assert tiles["warm"]["value"] == expected["warm_users"]["p5"]
    assert tiles["pool"]["value"] == expected["pool_tokens"]


def test_the_pool_tile_says_why_the_logged_token_count_is_not_the_pool():
    """Since vLLM 0.20.1 the 'GPU KV cache size' line is max concurrency x max_model_len, not the pool: the tile
    quotes the line and the engine's own reason beside the pool it plans with (#29)."""
    status, view, _ = call("POST", "/api/plan", BASE)
    pool = {t["id"]: t for t in view["tiles"]}["pool"]
    doc = view["plan"]
    assert status == 200 and pool["value"] == doc["pool_tokens"]
    assert doc["memory"]["log_lines"][0] in pool["sub"]
    line = doc["memory"]["log_lines"][0]   # "GPU KV cache size: N tokens, Maximum concurrency for L tokens ...: Cx"
    concurrency, length = line.rsplit(": ", 1)[1].rstrip("x"), line.split("concurrency for ")[1].split(" tokens")[0]
    assert f"the logged tokens are concurrency x max_model_len ({concurrency} x {length})" in pool["sub"]
    assert f"holds about {doc['pool_tokens']:,.0f} tokens" in pool["sub"]


def test_with_cpu_offload_the_verdict_and_tiles_carry_the_plans_gpu_and_host_ram_split_and_restore():
    body = {"model": "llama-3.1-8b", "gpus": "2xH100-SXM", "tensor_parallel_size": 2, "cpu_offload_gib": 256,
            "fills": 200}
    status, view, _ = call("POST", "/api/plan", body)
    assert status == 200, view
    o = finite(s.plan(s.Scenario(**body), sensitivity=False).to_dict())["offload"]
    assert view["plan"]["offload"] == o and view["verdict"]["offload"] == o["text"]
    tiles = {t["id"]: t for t in view["tiles"]}
    assert tiles["offload_split"]["value"] == o["users_in_host_ram"]["p5"]
    users = o["users_in_host_ram"]["p5"] + o["users_in_gpu_kv"]["p5"]
    assert tiles["offload_split"]["text"] == f"{o['users_in_host_ram']['p5']:,.0f} of {users:,.0f}"
    assert f"{o['users_in_gpu_kv']['p5']:,.0f} in GPU KV" in tiles["offload_split"]["sub"]
    assert tiles["restore"]["value"] == o["restore_s_per_turn"] and tiles["restore"]["text"] == f"{o['restore_s_per_turn']:.3f} s"
    assert "2 x PCIe Gen5 x16" in tiles["restore"]["sub"]
    status, plain, _ = call("POST", "/api/plan", {**body, "cpu_offload_gib": 0})
    assert plain["verdict"]["offload"] is None and not {"offload_split", "restore"} & {t["id"] for t in plain["tiles"]}


def test_the_fit_tables_columns_say_per_gpu_or_whole_model_and_the_whole_models_weights_are_the_fits_own():
    status, view, _ = call("POST", "/api/fit", {"gpus": "4xH100-SXM", "max_model_len": "32768"})
    assert status == 200, view
    labels = {c["key"]: c["label"] for c in view["columns"]}
    assert labels["weights_bytes"] == "weights, whole model" and labels["weights_bytes_per_gpu"] == "weights per GPU"
    assert labels["kv_bytes_per_sequence"] == "KV per sequence, per GPU"
    doc = s.fit("4xH100-SXM", max_model_len=32768).to_dict()
    (row,) = [r for r in view["rows"] if r["model"] == "llama-3.3-70b" and r["precision"].startswith("native")]
    (ref,) = [p for p in doc["placements"] if p["model"] == "llama-3.3-70b" and p["precision"].startswith("native")]
    assert row["weights_bytes"] == ref["weights_bytes"] and row["cells"]["weights_bytes"] == fmt_bytes(ref["weights_bytes"])
    assert ref["weights_bytes"] == pytest.approx(ref["tp"] * ref["weights_bytes_per_gpu"], rel=0.02)  # TP 4: a quarter each
    assert row["cells"]["weights_bytes_per_gpu"] == fmt_bytes(ref["weights_bytes_per_gpu"])
    assert set(row["cells"]) == set(labels)


@pytest.mark.parametrize(("budget", "expected"), [("simple", 0.90), ("engine", None)])
def test_the_fit_states_the_utilisation_its_figures_use(budget, expected):
    status, view, _ = call("POST", "/api/fit", {"gpus": "1xH100-SXM", "budget": budget})
    assert status == 200, view
    used = s.memory(s.Scenario(model="llama-3.1-8b", gpus="1xH100-SXM", budget=budget)).deployment.gpu_memory_utilization
    assert view["effective"]["gpu_memory_utilization"] == used
    if expected is not None:
        assert used == expected   # the calculator seed's simple budget, not the release's default


def test_the_glossary_is_served_with_the_catalogue_and_quotes_the_librarys_own_defaults():
    from servesize.assumptions import modelled_assumptions

    status, cat, _ = call("GET", "/api/catalogue")
    assert status == 200
    entries = {g["abbr"] or g["term"]: g for g in cat["glossary"]}
    assert {"MFU", "TTFT", "f, f*", "B*", "MBU"} <= set(entries)
    table = modelled_assumptions()
    for g in cat["glossary"]:
        if g["assumption"]:
            default = table[g["assumption"]]["default"]
            assert (default if isinstance(default, str) else f"{default:g}") in g["text"], g["term"]
    mfu = table["prefill.mfu"]
    assert f"default {mfu['default']:g}, believed to lie in {mfu['low']:g}-{mfu['high']:g}" in entries["MFU"]["text"]


def test_the_glossary_follows_a_changed_default(monkeypatch):
    import servesize.web.glossary as glossary
    from servesize.assumptions import modelled_assumptions

    table = {k: dict(v) for k, v in modelled_assumptions().items()}
    table["prefill.mfu"]["default"] = 0.37
    monkeypatch.setattr(glossary, "modelled_assumptions", lambda: table)
    (mfu,) = [g for g in glossary.glossary() if g["abbr"] == "MFU"]
    assert "default 0.37," in mfu["text"]


def test_the_verdict_sentence_is_the_clis_verdict_line_with_the_workload_the_percentile_and_the_seeds_answer():
    status, view, _ = call("POST", "/api/plan", BASE)
    assert status == 200
    plan = s.plan(s.Scenario(**BASE), sensitivity=False)
    v = view["verdict"]
    assert v["sentence"] == plan.verdict()
    assert v["sentence"].startswith(f"{v['users_text']} users: {v['binding']} binds first (workload coding-agent: ")
    assert f"{fmt_tokens(plan.workload.user.median_tokens)} median context" in v["sentence"]
    assert "the warm users 19 in 20 simulated fills of the cache keep (p5)" in v["sentence"]
    status, panel, _ = call("POST", "/api/sensitivity", BASE)   # after the verdict: the line with the seed's answer
    full = s.plan(s.Scenario(**BASE))
    assert status == 200 and panel["verdict"] == full.verdict() and panel["verdict"].startswith(v["sentence"])
    seed = panel["vs_seed"]   # under servesize's defaults one seed assumption moves this answer: named, with its users
    assert seed is not None and seed == full.vs_seed
    assert "as the warm-capacity study assumes" in panel["verdict"]
    assert f"{seed['users']:,.0f} users ({seed['binding']} binds)" in panel["verdict"]
    assert seed["assumption"] not in panel["verdict"], "the assumption in words, not by its name in the code"
    tiles = {t["id"]: t for t in view["tiles"]}
    assert not any(t["big"] for t in view["tiles"]), "one headline: the verdict, no tile drawn as a second one"
    assert "planning number" not in tiles["warm"]["label"]


SEED_TABLE = {31_000: (86, 69), 45_000: (56, 45), 60_000: (42, 34), 80_000: (33, 27), 100_000: (28, 23),
              140_000: (23, 19)}   # seed 000's table ('There is no single capacity number'), p50 and p5


@pytest.mark.parametrize("median", sorted(SEED_TABLE))
def test_the_seed_values_preset_alone_reproduces_the_seeds_median_table(median):
    seed = next(p for p in presets()["assumptions"] if p["label"] == "the warm-capacity seed's values")
    body = {k: v for k, v in seed["values"].items() if v is not None}   # what the page sends: nulls clear a field
    status, view, _ = call("POST", "/api/plan", {**body, "median": median})
    assert status == 200, view
    p50, p5 = SEED_TABLE[median]
    assert view["plan"]["warm_users"]["p50"] == pytest.approx(p50, abs=2)
    assert view["plan"]["warm_users"]["p5"] == pytest.approx(p5, abs=2)


def test_every_derivation_is_the_engines_own_rendering():
    status, doc, _ = call("POST", "/api/explain", BASE)
    assert status == 200
    plan = s.plan(s.Scenario(**BASE), sensitivity=False)
    assert [x["text"] for x in doc["sections"]["all"]] == [step.render() for step in plan.derivation.steps]
    assert [x["text"] for x in doc["sections"]["memory"]] == [step.render() for step in plan.memory.derivation.steps]


def test_the_sensitivity_panel_is_the_plans_own():
    status, panel, _ = call("POST", "/api/sensitivity", BASE)
    assert status == 200
    assert panel["sensitivity"] == finite(s.plan(s.Scenario(**BASE)).sensitivity)


def test_memory_and_fit_are_the_commands_documents():
    status, doc, _ = call("POST", "/api/memory", BASE)
    assert status == 200 and doc["memory"] == finite(s.memory(s.Scenario(**BASE)).to_dict())
    status, doc, _ = call("POST", "/api/fit", {"gpus": "4xH100", "max_model_len": "32K"})
    assert status == 200 and doc["fit"] == finite(s.fit("4xH100", max_model_len=32768).to_dict())


@pytest.mark.parametrize(("body", "field"), [({**BASE, "max_model_len": 0}, "max_model_len"),
                                            ({**BASE, "nonsense": 1}, "nonsense"),
                                            ({**BASE, "model": "/etc/hostname"}, "model"),
                                            ({"model": "llama-3.1-70b", "gpus": "1xH100"}, "tensor_parallel_size")])
def test_a_refusal_is_400_with_the_field(body, field):
    status, doc, _ = call("POST", "/api/plan", body)
    assert status == 400 and doc["field"] == field and doc["error"]


def test_a_split_that_does_not_fit_comes_back_with_the_splits_that_do():
    # at its own 131k context (or 32K) bf16 70B on 2xH100 leaves too little for one request: vLLM would not start (exit 3)
    status, doc, _ = call("POST", "/api/plan", {"model": "llama-3.1-70b", "gpus": "2xH100", "data_parallel_size": 2,
                                                "max_model_len": 16384})
    assert status == 400
    fits = {(x["dp"], x["tp"]): x["fits"] for x in doc["splits"]}
    assert fits == {(2, 1): False, (1, 2): True}


def test_a_body_that_is_not_json_is_refused_in_one_line():
    status, doc, _ = call("POST", "/api/plan", raw=b"{not json")
    assert status == 400 and "not valid JSON" in doc["error"]


def test_the_request_size_is_bounded():
    status, doc, _ = call("POST", "/api/calibrate", raw=b"x" * (MAX_BODY_BYTES + 1),
                          headers={"Content-Type": "application/json"})
    assert status == 413 and "MiB" in doc["error"]


def test_a_foreign_host_header_is_refused():
    status, doc, _ = call("GET", "/api/catalogue", headers={"Host": "attacker.example:80"})
    assert status == 403


def test_the_page_and_its_assets_are_served_with_a_same_origin_policy():
    status, text, headers = call("GET", "/")
    assert status == 200 and "<title>" in text
    assert "connect-src 'self'" in headers["Content-Security-Policy"]
    for asset in ("app.js", "charts.js", "style.css"):
        assert call("GET", f"/static/{asset}")[0] == 200
    assert call("GET", "/static/../app.py")[0] in (403, 404)


def _log(log_id: str) -> str:
    entry = next(x for x in json.loads((FIXTURES / "vllm-logs-public.json").read_text()) if x["id"] == log_id)
    return "\n".join(entry["quotes"])


def test_a_calibration_comes_from_a_pasted_log_and_replaces_the_pool():
    log = _log("vllm-17327-qwen3-30b-a3b-4xa10")
    body = {"model": "qwen3-30b-a3b", "gpus": "4xA10", "tensor_parallel_size": 4, "max_model_len": 8192,
            "vllm_version": "0.8.5", "median": 3000, "prefix": 1500, "subagent_median": 2000, "subagent_prefix": 500}
    status, doc, _ = call("POST", "/api/calibrate", {**body, "vllm_log": log})
    assert status == 200 and doc["usable"]
    calibration = s.calibrate(log, source="pasted log", model="qwen3-30b-a3b")   # the quotes name none: the page's
    assert doc["calibration"] == finite(calibration.to_dict())
    status, view, _ = call("POST", "/api/plan", {**body, "calibration": doc["calibration"]})
    assert status == 200
    expected = s.plan(s.Scenario(**body, calibration=calibration), sensitivity=False)
    assert view["plan"]["pool_tokens"] == expected.fixed.pool_tokens
    assert "calibration" in view["plan"]["pool_source"]
    # the page's model is now the calibration's: on another model's page it is refused, naming the field
    status, refused, _ = call("POST", "/api/plan", {**body, "model": "llama-3.1-8b", "gpus": "1xH100",
                                                    "tensor_parallel_size": 1, "calibration": doc["calibration"]})
    assert status == 400 and refused["field"] == "calibration" and "qwen3-30b-a3b" in refused["error"]


_QWEN35_H20 = {"model": "qwen3.5-27b", "gpus": "1xH20", "max_model_len": 32768, "max_num_batched_tokens": 16384,
               "max_num_seqs": 16, "vllm_version": "0.19.0"}


def test_a_hybrid_log_is_applied_with_the_groups_and_block_size_of_the_pages_flags():
    """vllm#40691 (Qwen3.5-27B, vLLM 0.19.0: 16 full-attention + 48 GDN layers) prints only the token and
    concurrency lines; the page's flags give what it does not print, as `calibrate --block-size 784
    --kv-cache-groups 4` would, and the calibration then fixes the pool."""
    log = _log("vllm-40691-qwen35-27b-h20")
    status, doc, _ = call("POST", "/api/calibrate", {**_QWEN35_H20, "vllm_log": log})
    assert status == 200 and doc["usable"], doc["applies"]
    pool = s.memory(s.Scenario(**_QWEN35_H20)).pool
    used = {c["name"]: (c["value"], c["from"]) for c in doc["controls"]}
    assert used["block_size"] == (pool.block_size, "the page's flags") and used["kv_cache_groups"][0] == len(pool.groups)
    by_hand = s.calibrate(log, source="pasted log", block_size=pool.block_size, kv_cache_groups=len(pool.groups),
                          mamba_cache_mode="none", num_speculative_tokens=0, model="qwen3.5-27b")
    assert doc["calibration"] == finite(by_hand.to_dict())
    assert doc["calibration"]["pool_tokens"] == (1487 - 1 - 3) * 784   # the fixture's notes: 1,487 blocks of 784
    status, view, _ = call("POST", "/api/plan", {**_QWEN35_H20, "calibration": doc["calibration"]})
    assert status == 200 and view["plan"]["pool_tokens"] == by_hand.pool_tokens
    assert not any("--" in n for n in doc["notes"])   # hints name the page's controls, not command-line flags
    assert f"block size (tokens) {pool.block_size}" in doc["applied_text"] and "from the page's flags" in doc["applied_text"]


def test_a_compared_figure_is_formatted_by_the_library_never_sent_as_raw_bytes():
    log = "\n".join(["INFO [gpu_worker.py:227] Available KV cache memory: 94.43 GiB",
                     "INFO [kv_cache_utils.py:1319] GPU KV cache size: 290,864 tokens",
                     "INFO [kv_cache_utils.py:1324] Maximum concurrency for 32,768 tokens per request: 33.04x"])
    status, doc, _ = call("POST", "/api/calibrate", {**_QWEN35_H20, "vllm_log": log})
    assert status == 200
    memory = next(c for c in doc["checks"] if c["name"] == "available_kv_bytes_per_gpu")
    assert memory["text"]["predicted"] == fmt_bytes(memory["predicted"]) and memory["text"]["predicted"].endswith(" GiB")
    assert memory["text"]["logged"] == " – ".join(fmt_bytes(x) for x in memory["logged"])


def test_a_log_hint_out_of_its_range_is_refused_naming_its_control():
    status, doc, _ = call("POST", "/api/calibrate", {**_QWEN35_H20, "vllm_log": _log("vllm-40691-qwen35-27b-h20"),
                                                     "log_hints": {"kv_cache_groups": 0}})
    assert status == 400 and doc["field"] == "hint_kv_cache_groups" and "KV-cache groups" in doc["error"]


def test_a_log_hint_given_wins_over_the_pages_flags():
    """Told 784-token blocks but one KV-cache group, the log's two lines disagree: nothing is applied, and the
    comparison is still shown."""
    status, doc, _ = call("POST", "/api/calibrate", {**_QWEN35_H20, "vllm_log": _log("vllm-40691-qwen35-27b-h20"),
                                                     "log_hints": {"kv_cache_groups": "1", "block_size": 784}})
    assert status == 200
    used = {c["name"]: (c["value"], c["from"]) for c in doc["controls"]}
    assert used["kv_cache_groups"] == (1, "given") and used["block_size"] == (784, "given")
    assert any(c["logged"] == 290_864 for c in doc["checks"])


def test_a_pool_record_gives_the_measured_pool_beside_the_prediction():
    record = "\n".join(json.dumps(x) for x in (
        {"type": "header", "kind": "pool", "version": 1, "params": {}},
        {"type": "end", "result": {"pool_tokens": {"low": 2_900_000, "high": 3_000_000, "measured": 2_950_000}}}))
    status, doc, _ = call("POST", "/api/record", {**BASE, "record": record})
    assert status == 200
    predicted = s.plan(s.Scenario(**BASE), sensitivity=False).fixed.pool_tokens
    assert doc["predicted_pool_tokens"] == predicted
    assert doc["verdict"]["mark"] == ("✓" if 2_900_000 <= predicted < 3_000_000 else doc["verdict"]["mark"])
    assert doc["apply"] == {"pool_tokens": 2_950_000}


@pytest.mark.parametrize("text", ["not a record", '{"type": "header", "kind": "pool"}', "[1, 2]"])
def test_a_record_that_is_not_a_finished_run_is_refused(text):
    status, doc, _ = call("POST", "/api/record", {**BASE, "record": text})
    assert status == 400 and doc["field"] in ("record", None) and doc["error"]


def test_every_chart_answers_with_series():
    for name in ("decode", "miss", "scaling", "batch"):
        status, doc, _ = call("POST", f"/api/charts/{name}", BASE)
        assert status == 200, (name, doc)
    assert call("POST", "/api/charts/nonsense", BASE)[0] == 404


def test_the_decode_chart_carries_the_engines_effective_mfu_beside_the_per_user_speed():
    status, doc, _ = call("POST", "/api/charts/decode", BASE)
    assert status == 200
    plan = s.plan(s.Scenario(**BASE), sensitivity=False)
    expected = s.api.decode_mfu_at(plan, doc["n"])
    assert doc["mfu_p50"] == pytest.approx(expected.tolist())
    assert len(doc["mfu_p50"]) == len(doc["n"]) == len(doc["p50_text"]) and doc["p50_text"][0].endswith("tok/s")
    # more decoders share each weight read: the executed FLOPs per second, and with them the MFU, grow with n
    assert doc["mfu_p50"][-1] > doc["mfu_p50"][0] > 0
    assert f"{100 * doc['mfu_p50'][0]:.2f}%" in doc["mfu_caption"]


def test_the_method_section_is_the_plans_own_derivation_step_by_step():
    status, doc, _ = call("POST", "/api/method", BASE)
    assert status == 200
    plan = s.plan(s.Scenario(**BASE), sensitivity=False)
    sections = {x["id"]: x["steps"] for x in doc["sections"]}
    for sid, derivation in (("memory", plan.memory.derivation), ("warm", plan.result.warm.derivation),
                            ("decode", plan.result.decode.derivation), ("prefill", plan.result.prefill.derivation)):
        assert [r["name"] for r in sections[sid]] == [st.name for st in derivation.steps]
        for row, st in zip(sections[sid], derivation.steps):
            assert row["text"] == st.shown()
            if st.inputs:   # a computed step: its formula in symbols, then the figures that went in
                assert row["kind"] == "computed" and row["formula"] == st.formula() and row["figures"] == st.substituted()
    ceiling = next(r for r in sections["decode"] if r["name"] == "decode_ceiling")
    assert ceiling["value"] == plan.result.decode.n
    assert any(r["kind"] == "modelled" for r in sections["decode"]) and any(r["kind"] == "given" for r in sections["memory"])


def test_the_faq_reads_its_figures_from_the_plan():
    status, doc, _ = call("POST", "/api/method", BASE)
    plan = s.plan(s.Scenario(**BASE), sensitivity=False)
    text = " ".join(x["q"] + " " + x["a"] for x in doc["faq"])
    w = plan.result.warm
    assert f"{plan.memory.pool.max_concurrency:.2f}x" in text
    assert f"p5 {w.users.p5:,.0f}, p50 {w.users.p50:,.0f}, p95 {w.users.p95:,.0f}" in text
    per_session = plan.workload.user.median_tokens * plan.fixed.kv_bytes_per_token_rank
    assert fmt_bytes(per_session) in text and f"{plan.result.decode.n:,} decoders per replica" in text


def test_serve_refuses_a_port_that_is_not_one_in_one_line(capsys):
    from servesize.cli import main

    assert main(["serve", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --port: '70000' must be from 0 to 65,535" in err, err


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(capsys):
    import socket

    from servesize.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesize: cannot listen on 127.0.0.1:{port}") and err.count("\n") == 1


def test_a_matrix_column_is_the_best_chosen_placement_of_each_model_on_that_gpu():
    status, doc, _ = call("POST", "/api/fit/matrix", {"query": {"gpus": "2xH100", "max_model_len": 8192}, "gpu": "B200"})
    assert status == 200 and doc["gpu"] == "B200" and doc["count"] == 2
    best: dict = {}
    for p in s.fit("2xB200", max_model_len=8192).placements:
        if p.chosen and p.concurrent_total > best.get(p.model, -1):
            best[p.model] = p.concurrent_total
    assert {m: c["concurrent_total"] for m, c in doc["cells"].items()} == best


def test_a_fit_row_of_a_checkpoint_served_as_it_is_explains_as_native():
    status, view, _ = call("POST", "/api/fit", {"gpus": "1xH100"})
    row = next(r for r in view["rows"] if r["model"] == "gpt-oss-20b")
    assert row["precision"].startswith("native") and row["quantization"] == "native"
    status, cell, _ = call("POST", "/api/fit/cell", {"query": {"gpus": "1xH100"}, "row": row})
    assert status == 200 and cell["concurrency"] == row["concurrent_per_replica"]


# -- the fleet view ---------------------------------------------------------------------------------

FLEET = {"models": "qwen3.6-27b", "users": 300, "gpus_from": "H100-SXM,H200-SXM,L40S", "max_gpus": 24}


def test_the_fleet_is_what_servesize_fleet_answers_for_the_same_query():
    status, view, _ = call("POST", "/api/fleet", FLEET)
    assert status == 200
    result = s.fleet(**FLEET)
    assert view["fleet"] == finite(result.to_dict())
    assert view["headline"]["found"] and result.winner.gpus in view["headline"]["shape"]
    assert view["frontier_chart"]["x"] == [o.users_served for o in result.frontier]
    assert view["frontier_chart"]["y"] == [o.cost_per_month for o in result.frontier]
    # the "open in plan" fields are the confirming Scenario's: planning them is planning the confirm command
    confirm = s.Scenario(**view["open_plan"])
    assert s.plan(confirm, sensitivity=False).ceilings == s.plan(s.Scenario(**result.confirm), sensitivity=False).ceilings


def test_a_fleet_of_teams_comes_with_each_teams_figures_and_the_verdict():
    body = {"models": "qwen3.6-27b", "gpus_from": "H200-SXM", "team": ["agents=120:coding-agent", "support=300:chat"],
            "priority": "support=1"}  # a repeatable field as one text, as a share link carries it
    status, view, _ = call("POST", "/api/fleet", body)
    assert status == 200
    result = s.fleet(models="qwen3.6-27b", gpus_from="H200-SXM", team=["agents=120:coding-agent", "support=300:chat"],
                     priority=["support=1"])
    assert view["fleet"] == finite(result.to_dict())
    assert [t["name"] for t in view["fleet"]["shared_pool"]["teams"]] == ["agents", "support"]
    assert view["fleet"]["verdict"]["choice"] in ("share", "partition", "either")
    assert view["open_plan"] is None  # several teams: no single plan confirms them


def test_a_fleet_per_team_where_no_shared_pool_serves_is_the_pages_verdict_as_it_is_the_commands():
    """Without sticky routing no shared pool keeps both teams warm and a fleet per team does: `servesize fleet`
    exits 0 with that verdict, and the page's headline gives the same fleets and cost, not "no fleet"."""
    query = {"models": "qwen3.6-27b", "gpus_from": "H200-SXM", "team": ["agents=60:coding-agent", "support=400:chat"],
             "precision": "fp8", "kv_cache_dtype": "fp8", "tensor_parallel_size": "1", "sticky_routing": False}
    status, view, _ = call("POST", "/api/fleet", query)
    assert status == 200
    result = s.fleet(**query)
    assert result.winner is None and result.exit_code == 0 and view["fleet"] == finite(result.to_dict())
    head = view["headline"]
    assert head["found"] and head["title"].startswith("No shared pool serves") and head["text"] == result.verdict["text"]
    assert head["cost"] == "9,914 USD/month"  # the command's verdict line: "a fleet per team (3 GPUs) costs 9,914 USD/month"
    assert f"costs {head['cost']}" in result.verdict["text"]
    for split in result.partition.cheapest:
        assert f"{split.team} {split.option.gpus}" in head["shape"]


def test_no_fleet_in_the_space_is_an_answer_not_a_refusal():
    status, view, _ = call("POST", "/api/fleet", {"models": "llama-3.1-70b", "users": 5000, "gpus_from": "L4", "max_gpus": 8})
    assert status == 200
    assert view["fleet"]["winner"] is None and not view["headline"]["found"]
    assert view["headline"]["text"].startswith("skipped: ")


@pytest.mark.parametrize(("body", "field"), [
    ({**FLEET, "users": 0}, "users"),
    ({"models": "qwen3.6-27b"}, "users"),
    ({**FLEET, "team": ["a=3"]}, "users"),                              # users and teams together
    ({"users": 4}, "models"),
    ({**FLEET, "models": "/etc/hostname"}, "models"),
    ({**FLEET, "max_gpus": 5000}, "max_gpus"),               # out of the declared bounds
    ({**FLEET, "max_gpus": 1000}, "max_gpus"),               # inside them, beyond what the page searches
    ({**FLEET, "tensor_parallel_size": "two"}, "tensor_parallel_size"),
    ({**FLEET, "fills": 10 ** 5}, "fills"),
    ({**FLEET, "nonsense": 1}, "nonsense"),
    ({"models": "qwen3.6-27b", "team": ["a=3:/etc/passwd"]}, "team"),  # a team's workload file: never read here
    ({"models": "qwen3.6-27b", "team": ["a=many"]}, "team"),
    ({"models": "qwen3.6-27b", "team": [f"t{i}=3" for i in range(9)]}, "team"),
    ({"models": "qwen3.6-27b", "team": ["a=3"], "priority": ["b=1"]}, "priority"),
])
def test_a_fleet_refusal_is_400_with_the_field(body, field):
    status, doc, _ = call("POST", "/api/fleet", body)
    assert status == 400 and doc["field"] == field and doc["error"], doc


def test_the_catalogue_carries_the_fleet_form_from_its_declaration():
    from servesize.fleet_query import FLEET_PARAMS

    status, cat, _ = call("GET", "/api/catalogue")
    assert status == 200
    form = cat["form"]["fleet"]
    assert set(form["fields"]) == set(FLEET_PARAMS)
    shown = [f for sec in form["sections"] for f in sec["fields"]]
    assert len(shown) == len(set(shown)) and set(shown) | {"priority", "workload"} == set(FLEET_PARAMS)
    assert form["fields"]["max_gpus"]["hi"] == FLEET_PARAMS["max_gpus"].hi
    assert form["fields"]["gpus_from"]["choices"] == [g["key"] for g in cat["gpus"]]
    assert cat["start"]["fleet"]["users"] >= 1


def test_an_uploaded_workload_is_searched_as_the_library_searches_it():
    from servesize.workload.model import Workload

    workload = s.plan(s.Scenario(**BASE, preset="chat"), sensitivity=False).workload.to_dict()
    body = {"models": "qwen3.6-27b", "users": 200, "gpus_from": "H200-SXM", "max_gpus": 8, "workload": workload}
    status, view, _ = call("POST", "/api/fleet", body)
    assert status == 200
    expected = s.fleet(**{**body, "workload": Workload.from_dict(workload)})
    assert view["fleet"] == finite(expected.to_dict())
    # the winner opens in the plan view with the workload's content, and plans as the confirming Scenario
    assert view["open_plan"]["workload"] == workload
    status, opened, _ = call("POST", "/api/plan", view["open_plan"])
    assert status == 200
    confirm = s.Scenario(**{**expected.confirm, "workload": Workload.from_dict(workload)})
    assert opened["plan"]["ceilings"] == finite(s.plan(confirm, sensitivity=False).to_dict())["ceilings"]
    status, doc, _ = call("POST", "/api/fleet", {**body, "workload": "/etc/passwd"})
    assert status == 400 and doc["field"] == "workload"


def test_eight_gpus_left_unsplit_show_the_split_plan_chose_pressed_and_why():
    body = {"model": "qwen3-8b", "gpus": "8xH100", "fills": 50}
    status, view, _ = call("POST", "/api/plan", body)
    assert status == 200
    placement = s.plan(s.Scenario(**body), sensitivity=False).placement
    assert view["plan"]["placement"]["gpus_used"] == 8 and view["placement_text"] == placement.text()
    current = [(x["dp"], x["tp"]) for x in view["splits"] if x["current"]]
    assert current == [(placement.dp, placement.tp)]
    assert view["title"].startswith(f"qwen3-8b on 8xH100-SXM (DP {placement.dp} x TP {placement.tp})")


def test_the_ranking_flags_a_model_whose_context_cannot_hold_the_median_and_ranks_it_last():
    status, f, _ = call("POST", "/api/frontier", BASE)
    assert status == 200
    rows = f["rows"]
    phi = next(r for r in rows if r["model"] == "phi-4")
    assert phi["context_shortfall"]["max_model_len"] == 16_384 and phi["context_shortfall"]["median_tokens"] == 31_000
    flagged = [r["context_shortfall"] is not None for r in rows]
    assert flagged == sorted(flagged), "every row that can hold the workload ranks above every row that cannot"
    alone = s.plan(s.Scenario(**{**BASE, "model": "phi-4", "fills": 200}), sensitivity=False).context_shortfall()
    assert phi["context_shortfall"] == alone   # the library's own flag (it depends on the workload, not the fills)


def test_a_charts_description_states_its_values():
    """Each chart carries a sentence with its values (the screen reader's reading of it): the first, middle and
    last points of each series, as the axes write them (#29)."""
    from servesize.web.views import series_words

    assert series_words("p50", [1, 2, 4, 8, 16], [100.0, 90.0, 70.0, 50.0, 30.0], lambda x: f"{x} decoders",
                        lambda y: f"{y:.0f} tok/s") == "p50: 100 tok/s at 1 decoders, 70 tok/s at 4 decoders, 30 tok/s at 16 decoders"
    assert series_words("empty", [], []) == "empty: no points"
    status, decode, _ = call("POST", "/api/charts/decode", BASE)
    assert status == 200 and decode["description"].startswith("Per-user decode p50 against concurrent decoders")
    assert f"{decode['p50'][0]:,.0f} tok/s at 1 decoders" in decode["description"]
    assert f"met up to {decode['decode_ceiling']:,} decoders" in decode["description"]
    status, miss, _ = call("POST", "/api/charts/miss", BASE)
    assert all(f"{c}: {miss['ceilings'][c][0]:,.0f} users at 0.0% misses" in miss["description"] for c in miss["ceilings"])


def test_prefill_and_decode_apart_is_the_librarys_layouts_and_one_gpu_is_refused_in_one_line():
    status, doc, _ = call("POST", "/api/disaggregated", {**BASE, "gpus": "2xH200"})
    assert status == 200
    [layout] = s.api.disaggregated_layouts(s.Scenario(**{**BASE, "gpus": "2xH200"}))
    assert [r["layout"] for r in doc["rows"]][1:] == ["1P1D"] and doc["rows"][1]["users_text"] == f"{layout.users:,.0f}"
    assert doc["comparison"] == layout.comparison() and "--prefill-instances 1 --decode-instances 1" in doc["command"]
    status, doc, _ = call("POST", "/api/disaggregated", BASE)
    assert status == 400 and "one prefill and one decode instance" in doc["error"] and "\n" not in doc["error"]
