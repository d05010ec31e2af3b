"""Issue #19's catalogue rows: GLM-5.2 and Mistral Small 3.1 24B sized from their published configs, DeepSeek-V4-Flash
refused naming the layers servesize lacks (sources: tests/fixtures/model-configs/SOURCES.md)."""

import json
import pathlib

import pytest

from servesize.cli import main
from servesize.engine.kv_cache import all_layers_bytes_per_token
from servesize.engine.weights import weights
from servesize.errors import UnsupportedArchitecture
from servesize.model.architecture import from_config, load_config_file
from servesize.model.catalogue import count_granularity, is_precise, load_catalogue
from servesize.model.ledger import parameter_ledger

CATALOGUE = load_catalogue()
CONFIGS = pathlib.Path(__file__).parent / "fixtures" / "model-configs"
NEW_ROWS = ("glm-5.2", "mistral-small-3.1-24b")


def _counted(key, which):
    ledger = parameter_ledger(CATALOGUE[key].architecture())
    return {"total": ledger.total, "total_with_mtp": ledger.total_with_mtp}[which]


@pytest.mark.parametrize("key, which, published_text", [
    ("glm-5.2", "total", "744B"), ("glm-5.2", "total_with_mtp", "753B"), ("mistral-small-3.1-24b", "total", "24B")])
def test_the_ledger_matches_the_published_count_at_the_precision_it_was_printed(key, which, published_text):
    e = CATALOGUE[key]
    text = {"total": e.published_params_text, "total_with_mtp": e.published_params_with_mtp_text}[which]
    published = {"total": e.published_params, "total_with_mtp": e.published_params_with_mtp}[which]
    assert text == published_text
    counted = _counted(key, which)
    # 1% where the printed figure is that fine (as tests/test_ledger.py); else half a unit of its last digit ("24B": +-0.5B)
    tolerance = 0.01 if is_precise(text) else count_granularity(text)
    assert abs(counted / published - 1) <= tolerance, f"{counted:,} vs {text}"


def test_mistral_small_3_1_counts_its_untied_head_and_the_pixtral_tower():
    ledger = parameter_ledger(CATALOGUE["mistral-small-3.1-24b"].architecture())
    groups = ledger.groups
    assert groups["lm_head"] == groups["embedding"] == 131072 * 5120  # MistralConfig: tie_word_embeddings = False
    # Pixtral: patch conv + ln_pre, 24 blocks (4 x 1024^2 attention + 3 x 1024 x 4096 MLP + 2 norms), projector
    blocks = 24 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024)
    projector = 1024 + 1024 * 4 * 1024 + 1024 * 5120 + 5120 * 5120
    assert groups["vision"] == 3 * 14 * 14 * 1024 + 1024 + blocks + projector


def test_glm_5_2_caches_the_indexer_key_on_its_21_full_layers_only():
    arch = CATALOGUE["glm-5.2"].architecture()
    assert arch.indexer_count == 21 and arch.num_layers == 78
    latent = (512 + 64) * 2 * 78                  # MLA latent, 16-bit, every layer
    indexer = (128 + 4) * 21                      # fp8 index key + one fp32 scale, 'full' layers only (vLLM)
    assert all_layers_bytes_per_token(arch, "bfloat16") == latent + indexer
    # the checkpoint ships an indexer on every layer: the ledger counts all 78
    ledger = parameter_ledger(arch)
    per_layer = 2048 * 32 * 128 + 6144 * 128 + 6144 * 32 + 2 * 128
    assert ledger.groups["indexer"] == 78 * per_layer
    # ... and vLLM loads it on the 21 full layers only (deepseek_v2.py load_weights drops the others)
    (resident,) = [g for g in weights(arch).groups if g.group == "indexer"]
    assert resident.params == 21 * per_layer
    assert arch.indexer_layers[:5] == (0, 1, 2, 6, 10)


def test_glm_5_2_indexer_types_must_agree_with_the_rule_vllm_follows():
    config = json.loads((CONFIGS / "zai-org--GLM-5.2" / "config.json").read_text())
    assert from_config(config).indexer_count == config["indexer_types"].count("full")
    config["index_skip_topk_offset"] = 2      # vLLM would then pick other layers than indexer_types names
    with pytest.raises(UnsupportedArchitecture, match="indexer_types disagrees"):
        from_config(config)


def test_deepseek_v4_flash_is_refused_naming_what_servesize_lacks(capsys):
    path = CONFIGS / "deepseek-ai--DeepSeek-V4-Flash" / "config.refused.json"
    with pytest.raises(UnsupportedArchitecture) as info:
        from_config(load_config_file(path))
    message = str(info.value)
    assert "deepseek_v4" in message and "compressed attention" in message and "hc_mult" in message
    assert main(["memory", str(path), "--gpus", "8xB300"]) == 2
    err = capsys.readouterr().err
    assert "no reader for its layer kind" in err and err.count("\n") == 1


@pytest.mark.parametrize("key, extra", [("glm-5.2", ["--max-model-len", "131072"]), ("mistral-small-3.1-24b", [])])
def test_memory_runs_for_each_new_row(key, extra, capsys):
    assert main(["memory", key, "--gpus", "8xB300", *extra]) == 0
    assert f"{key} on 8 x B300" in capsys.readouterr().out


def test_glm_5_2_at_its_full_million_token_window_is_refused_as_vllm_would(capsys):
    # 1,048,576 tokens x 92,628 B = 90.46 GiB of KV per request, replicated on every rank (MLA): more than B300 holds
    assert main(["memory", "glm-5.2", "--gpus", "8xB300"]) == 3
    assert "90.46 GiB of KV cache" in capsys.readouterr().err


def test_the_models_command_lists_the_new_rows(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(key in out for key in NEW_ROWS)
