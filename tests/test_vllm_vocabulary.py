"""vLLM's own vocabulary per release (data/vllm_vocabulary.toml, from scripts/vllm_vocabulary.py):
the flags, switches, --quantization methods and --kv-cache-dtype values each release accepts."""

import json
import pathlib

import pytest

from servesize.engine.vocabulary import accepts, canonical_flag, known_flag, release_read, takes_value, vocabulary

CLI = pathlib.Path(__file__).parent / "fixtures" / "vllm-cli" / "vllm-0.32.0-serve-options.json"


def test_the_static_reading_of_0_32_is_the_running_parsers_own_option_list():
    dump = json.loads(CLI.read_text())
    assert set(vocabulary("flags", (0, 32, 0))) == set(dump["flags"])
    assert set(vocabulary("switches", (0, 32, 0))) == set(dump["switches"])
    assert len(dump["flags"]) == 430 and len(dump["switches"]) == 187


@pytest.mark.parametrize("kind,name,version,expected", [
    ("quantization", "modelopt_fp4", (0, 9, 2), True),   # arrived in 0.9.2
    ("quantization", "modelopt_fp4", (0, 8, 5), False),
    ("quantization", "bitsandbytes", (0, 27, 0), True),  # gone after 0.27
    ("quantization", "bitsandbytes", (0, 28, 0), False),
    ("quantization", "auto-round", (0, 11, 0), True),
    ("quantization", "auto-round", (0, 15, 0), False),
    ("kv_cache_dtype", "nvfp4", (0, 19, 0), False),
    ("kv_cache_dtype", "nvfp4", (0, 33, 0), True),
    ("kv_cache_dtype", "fp8_ds_mla", (0, 14, 0), True),
    ("speculative_method", "eagle3", (0, 10, 0), True),
])
def test_each_value_belongs_to_the_releases_that_accept_it(kind, name, version, expected):
    assert accepts(kind, name, version) is expected


def test_an_unread_release_takes_the_vocabulary_of_the_nearest_earlier_one_read():
    assert release_read((0, 20, 1)) == (0, 19, 1)
    assert release_read((0, 99, 0)) == (0, 33, 0)


@pytest.mark.parametrize("written,canonical", [("--max_model_len=8k", "--max-model-len"), ("-cc.mode", "-cc"),
                                               ("-O3", "-O"), ("--compilation-config.level", "--compilation-config")])
def test_a_flag_is_read_as_vllms_flexible_parser_reads_it(written, canonical):
    assert canonical_flag(written) == canonical
    assert known_flag(written, (0, 32, 0))


def test_switches_take_no_value_and_an_unknown_flag_is_unknown():
    v = (0, 32, 0)
    assert not takes_value("--trust-remote-code", v) and not takes_value("-ep", v) and takes_value("--host", v)
    assert not known_flag("--enable-everything", v)
