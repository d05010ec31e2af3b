"""The model catalogue: resolution, sources, compact forms, and the calculator seed's KV table."""

import json
import pathlib
import shutil
import sys

import pytest

from servesize.engine.kv_cache import all_layers_bytes_per_token
from servesize.errors import BadInput
from servesize.model.catalogue import expand_config, load_catalogue, resolve_model
from servesize.units import KiB

CATALOGUE = load_catalogue()
CONFIGS = pathlib.Path(__file__).parent / "fixtures" / "model-configs"  # sources: SOURCES.md there


def test_resolve_by_catalogue_key_is_case_insensitive():
    r = resolve_model("Llama-3.1-8B")
    assert r.entry is not None and r.entry.key == "llama-3.1-8b"
    assert r.origin == "catalogue: llama-3.1-8b" and r.architecture.hidden_size == 4096


def test_resolve_by_hugging_face_id_and_alias_finds_the_entry():
    assert resolve_model("Qwen/Qwen3-30B-A3B").entry.key == "qwen3-30b-a3b"
    assert resolve_model("meta-llama/Meta-Llama-3.1-8B").entry.key == "llama-3.1-8b"


def test_resolve_a_config_json_path_and_a_model_folder(tmp_path):
    src = CONFIGS / "Qwen--Qwen3-8B" / "config.json"
    folder = tmp_path / "my-model"
    folder.mkdir()
    shutil.copy(src, folder / "config.json")
    by_file = resolve_model(str(folder / "config.json"))
    by_folder = resolve_model(str(folder))
    assert by_file.entry is None and by_file.origin.startswith("file: ")
    assert by_file.architecture == by_folder.architecture
    assert by_file.architecture.name == "my-model"
    assert by_file.architecture.num_layers == 36


def test_a_missing_path_is_bad_input():
    with pytest.raises(BadInput, match="no such file"):
        resolve_model("./nowhere/config.json")


def test_an_unknown_name_suggests_close_matches_and_the_models_command():
    with pytest.raises(BadInput) as info:
        resolve_model("qwen3-32")
    message = str(info.value)
    assert "qwen3-32b" in message and "servesize models lists them" in message and "\n" not in message


def test_an_hf_id_outside_the_catalogue_without_huggingface_hub_says_how_to_pass_a_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(BadInput) as info:
        resolve_model("someorg/some-model")
    message = str(info.value)
    assert "pass its path" in message and "pip install huggingface_hub" in message


def test_an_hf_id_that_cannot_be_fetched_is_one_line_of_bad_input(monkeypatch):
    class FakeHub:
        @staticmethod
        def hf_hub_download(repo_id, filename):
            raise OSError("We couldn't connect to 'https://huggingface.co'\nmore lines")
    monkeypatch.setitem(sys.modules, "huggingface_hub", FakeHub)
    with pytest.raises(BadInput) as info:
        resolve_model("someorg/some-model")
    assert "\n" not in str(info.value) and "pass its path" in str(info.value)


def test_an_hf_id_is_fetched_through_huggingface_hub(monkeypatch, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 128}))

    class FakeHub:
        @staticmethod
        def hf_hub_download(repo_id, filename):
            assert (repo_id, filename) == ("someorg/tiny", "config.json")
            return str(path)
    monkeypatch.setitem(sys.modules, "huggingface_hub", FakeHub)
    r = resolve_model("someorg/tiny")
    assert r.origin == "huggingface: someorg/tiny" and r.architecture.name == "someorg/tiny"


@pytest.mark.parametrize("key", sorted(CATALOGUE))
def test_every_entry_has_a_source_and_a_published_source(key):
    e = CATALOGUE[key]
    assert e.source.strip() and e.published_source.strip() and e.hf_id.count("/") == 1
    assert key == key.lower() and " " not in key


def test_keys_the_calculator_seed_uses_are_in_the_catalogue():
    for key in ("llama-3.1-8b", "llama-3.3-70b", "mistral-7b-v0.3", "qwen2.5-32b", "qwen3-30b-a3b", "gpt-oss-120b",
                "qwen3.5-27b", "qwen3.6-27b", "qwen3.6-35b-a3b", "deepseek-v3", "gemma-3-27b", "llama-3.1-405b"):
        assert key in CATALOGUE


def test_every_full_fixture_config_has_a_catalogue_entry():
    hf_ids = {e.hf_id.lower() for e in CATALOGUE.values()} | {a.lower() for e in CATALOGUE.values() for a in e.aliases}
    hf_ids |= {e.source for e in CATALOGUE.values()}  # entries written from another folder name it in source
    for path in sorted(CONFIGS.glob("*/config.json")):
        folder = path.parent.name
        org, name = folder.split("--", 1)
        assert f"{org}/{name}".lower() in hf_ids or any(folder in s for s in hf_ids), folder


def test_compact_layer_types_expand_to_the_original_list():
    original = json.loads((CONFIGS / "Qwen--Qwen3.5-27B" / "config.json").read_text())
    expanded = CATALOGUE["qwen3.5-27b"].config["text_config"]["layer_types"]
    assert expanded == original["text_config"]["layer_types"]


def test_the_nvfp4_quantized_layers_expand_to_the_same_401_modules_in_order():
    original = json.loads((CONFIGS / "nvidia--Qwen3.6-27B-NVFP4" / "config.json").read_text())
    q = CATALOGUE["qwen3.6-27b-nvfp4"].config["quantization_config"]
    assert list(q["quantized_layers"].items()) == list(original["quantization_config"]["quantized_layers"].items())
    assert len(q["quantized_layers"]) == 64 * 3 + 48 * 3 + 16 * 4 + 1
    arch = CATALOGUE["qwen3.6-27b-nvfp4"].architecture()
    assert arch.quantization.method == "mixed" and arch.quantization.kv_cache_bits == 8


def test_the_fp8_skip_list_expands_to_the_original_order():
    original = json.loads((CONFIGS / "Qwen--Qwen3-30B-A3B-FP8" / "config.json").read_text())
    q = CATALOGUE["qwen3-30b-a3b-fp8"].config["quantization_config"]
    assert q["modules_to_not_convert"] == original["quantization_config"]["modules_to_not_convert"]


def test_expand_config_leaves_a_plain_config_alone():
    plain = {"model_type": "llama", "num_hidden_layers": 2}
    assert expand_config(plain) == plain


# The calculator seed's reference table: KV cache per token at fp16, every layer as full attention.
SEED_KV_PER_TOKEN = {
    "llama-3.1-8b": 2 * 8 * 128 * 2 * 32,          # 128 KiB
    "llama-3.2-3b": 2 * 8 * 128 * 2 * 28,          # 112 KiB
    "llama-3.3-70b": 2 * 8 * 128 * 2 * 80,         # 320 KiB
    "llama-3.1-405b": 2 * 8 * 128 * 2 * 126,       # 504 KiB
    "mistral-7b-v0.3": 2 * 8 * 128 * 2 * 32,       # 128 KiB
    "mixtral-8x7b": 2 * 8 * 128 * 2 * 32,          # 128 KiB
    "qwen2.5-7b": 2 * 4 * 128 * 2 * 28,            # 56 KiB
    "qwen2.5-32b": 2 * 8 * 128 * 2 * 64,           # 256 KiB
    "qwen2.5-coder-32b": 2 * 8 * 128 * 2 * 64,     # 256 KiB
    "qwen2.5-72b": 2 * 8 * 128 * 2 * 80,           # 320 KiB
    "qwen3-32b": 2 * 8 * 128 * 2 * 64,             # 256 KiB
    "qwen3-30b-a3b": 2 * 4 * 128 * 2 * 48,         # 96 KiB
    "qwen3-235b-a22b": 2 * 4 * 128 * 2 * 94,       # 188 KiB
    "deepseek-r1-distill-qwen-32b": 2 * 8 * 128 * 2 * 64,  # 256 KiB
    "deepseek-v3": (512 + 64) * 2 * 61,            # 69 KiB = 70,272 B (MLA latent)
    "gpt-oss-20b": 2 * 8 * 64 * 2 * 24,            # 48 KiB
    "gpt-oss-120b": 2 * 8 * 64 * 2 * 36,           # 72 KiB
    "gemma-3-27b": 2 * 16 * 128 * 2 * 62,          # 496 KiB
    "phi-4": 2 * 10 * 128 * 2 * 40,                # 200 KiB
}
SEED_KIB = {"llama-3.1-8b": 128, "llama-3.2-3b": 112, "llama-3.3-70b": 320, "llama-3.1-405b": 504, "mistral-7b-v0.3": 128,
            "mixtral-8x7b": 128, "qwen2.5-7b": 56, "qwen2.5-32b": 256, "qwen2.5-coder-32b": 256, "qwen2.5-72b": 320,
            "qwen3-32b": 256, "qwen3-30b-a3b": 96, "qwen3-235b-a22b": 188, "deepseek-r1-distill-qwen-32b": 256,
            "deepseek-v3": 69, "gpt-oss-20b": 48, "gpt-oss-120b": 72, "gemma-3-27b": 496, "phi-4": 200}


@pytest.mark.parametrize("key", sorted(SEED_KV_PER_TOKEN))
def test_kv_per_token_matches_the_calculator_seed_table(key):
    got = all_layers_bytes_per_token(CATALOGUE[key].architecture(), "float16")
    assert got == SEED_KV_PER_TOKEN[key]
    assert round(got / KiB) == SEED_KIB[key]


def test_loading_the_catalogue_does_not_import_numpy():
    import subprocess
    code = ("import sys, servesize.model.catalogue as c; c.load_catalogue(); "
            "[e.architecture() for e in c.load_catalogue().values()]; print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_models_command_lists_every_entry_and_its_json_is_one_document(capsys):
    from servesize.cli import main
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert all(key in text for key in CATALOGUE)
    assert "48 GDN + 16 full" in text and "+416 KiB" in text
    assert main(["models", "deepseek-v3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["models"]
    params = row["params"]
    assert row["kv_bytes_per_token"] == 70_272 and params["total"] == params["total_with_mtp"] - params["groups"]["mtp"]


def test_the_models_command_explains_one_ledger(capsys):
    from servesize.cli import main
    assert main(["models", "qwen3.5-27b", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a" in text and "total_with_mtp" in text


def test_the_models_command_refuses_an_unknown_name_with_exit_2(capsys):
    from servesize.cli import main
    assert main(["models", "not-a-model"]) == 2
    assert "servesize models lists them" in capsys.readouterr().err
