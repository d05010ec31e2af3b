"""Every recipe plan and fleet print is one vLLM starts: read back through servesize's own `--vllm-serve`
reader (which refuses what the release does not know) it gives the deployment the plan sized."""

from __future__ import annotations

import servesize as s
from servesize.engine.quant_methods import SEED_FORMAT_CHECKPOINTS, SIXTEEN_BIT_NAMES
from servesize.engine.versions import DEFAULT_VLLM_VERSION, parse_version
from servesize.errors import BadInput, ServesizeError
from servesize.model.catalogue import load_catalogue
from servesize.resolve import served

GPU_SETS = ("1xH200", "8xA100-40GB", "8xH200")  # one large GPU; eight small ones; eight large (the big MoEs)
QUICK = {"fills": 30, "draws": 500}          # the recipe does not depend on the Monte-Carlo's precision


def _precisions(arch) -> list[tuple[str, str]]:
    """(--quantization, --kv-cache-dtype) pairs: the checkpoint, vLLM's online fp8, the seed's int4, and 16-bit
    for a checkpoint stored quantised."""
    out = [("native", "auto"), ("fp8", "fp8"), ("int4", "auto")]
    if arch.quantization is not None:
        out.append(("bf16", "auto"))
    return out


def _catalogue_plans():
    for key, entry in load_catalogue().items():
        for gpus in GPU_SETS:
            for q, kv in _precisions(entry.architecture()):
                sc = s.Scenario(model=key, gpus=gpus, quantization=q, kv_cache_dtype=kv, **QUICK)
                try:
                    yield sc, s.plan(sc, sensitivity=False)
                except ServesizeError as exc:  # does not fit, or vLLM refuses the method for this checkpoint
                    yield sc, exc


def read_back(model: str, recipe: str, notes, fixed, quantization: str, pp: int = 1, version: str | None = None) -> None:
    """The recipe through the --vllm-serve reader, then through memory: the deployment the plan sized
    (``quantization``: the method the plan was given; ``fixed``: what its memory report fixed)."""
    served_w = fixed.served
    line = served(recipe, parse_version(version or DEFAULT_VLLM_VERSION))  # raises on what vLLM refuses
    got = line.fields
    assert "--quantization int4" not in recipe
    assert got["tensor_parallel_size"] == fixed.tp
    assert got.get("pipeline_parallel_size", 1) == pp
    assert got["kv_cache_dtype"] == fixed.kv_cache_dtype
    assert got["max_model_len"] == fixed.max_model_len
    assert got["max_num_batched_tokens"] == fixed.chunk_tokens  # the chunk the stalls were priced at
    assert got.get("quantization") == served_w.quantization
    if fixed.dp > 1:  # one line per replica; the notes say how many
        assert any(f"run {fixed.dp} of these" in n for n in notes), notes
    gpus = f"{fixed.tp * pp}x{fixed.gpu_key}"
    if line.model == fixed.hf_id:
        assert served_w.placeholder is None
        again = s.memory(s.Scenario(model=model, gpus=gpus, vllm_serve=recipe))
    else:  # a checkpoint the model's own cannot be: named as a placeholder, never the 16-bit id
        assert line.model == served_w.placeholder and line.model.startswith("<")
        assert quantization in (*SEED_FORMAT_CHECKPOINTS, *SIXTEEN_BIT_NAMES)
        assert served_w.quantization is None and "--quantization" not in recipe
        assert notes[0].startswith(served_w.placeholder)
        again = s.memory(s.Scenario(model=model, quantization=quantization, gpus=gpus, vllm_serve=recipe))
    assert again.deployment.tensor_parallel_size == fixed.tp and again.deployment.data_parallel_size == 1
    assert again.weights.per_gpu_bytes == fixed.memory["weights_bytes_per_gpu"]
    assert again.weights.precision == fixed.memory["weights_precision"]
    # the recipe's --max-num-seqs is at most the default the plan sized with: CUDA graphs no larger, the pool no smaller
    assert again.pool.usable_kv_tokens >= fixed.pool_tokens


def read_back_plan(sc: s.Scenario, plan) -> None:
    dep = plan.memory.deployment
    read_back(sc.model, plan.recipe, plan.recipe_notes, plan.fixed, dep.quantization, dep.pipeline_parallel_size,
              dep.vllm_version)


def test_every_recipe_plan_prints_over_the_catalogue_reads_back_as_the_deployment_it_sized():
    planned = refused = placeholders = 0
    for sc, plan in _catalogue_plans():
        if isinstance(plan, ServesizeError):
            refused += 1
            continue
        planned += 1
        placeholders += plan.fixed.served.placeholder is not None
        read_back_plan(sc, plan)
    assert planned >= 250 and placeholders >= 100, (planned, refused, placeholders)  # 319 and 127 today


FLEET_GPUS = "H100-SXM,H200"


def test_every_recipe_fleet_prints_over_the_catalogue_reads_back_as_the_deployment_it_sized():
    winners = int4 = 0
    for key in load_catalogue():
        try:
            result = s.fleet(users=40, models=key, precision="native,fp8,int4", gpus_from=FLEET_GPUS, max_gpus=16,
                             **QUICK)
        except BadInput:
            continue
        if result.winner is None:
            continue
        winners += 1
        int4 += result.winner.precision == "int4"
        assert result.recipe == result.plan.recipe
        read_back(key, result.recipe, result.recipe_notes, result.plan.fixed, result.winner.precision)
    assert winners >= 30 and int4 >= 5, (winners, int4)  # 36 and 6 today


def test_a_teams_fleet_recipe_reads_back_and_names_the_checkpoint_int4_needs():
    result = s.fleet(team=["chat=30:chat", "agents=20"], models="qwen3-8b", precision="int4", kv_cache_dtype="auto",
                     gpus_from="H100-SXM", **QUICK)
    line = served(result.recipe, parse_version(DEFAULT_VLLM_VERSION))
    assert line.model == "<INT4-CHECKPOINT>" and "quantization" not in line.fields
    assert result.recipe_notes[0].startswith("<INT4-CHECKPOINT>: these figures are for int4 weights, which Qwen/Qwen3-8B")
    assert "none in the catalogue" in result.recipe_notes[0]
