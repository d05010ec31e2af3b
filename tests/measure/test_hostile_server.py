"""The harness against a server that misbehaves (issue #31): bytes that are not UTF-8, answers of the wrong shape,
numbers that are not finite or not possible. Each is a one-line refusal or a signal distrusted for the run (a note
naming the endpoint and the field), never "servesize: bug: <traceback>" and never a capacity from that signal."""

from __future__ import annotations

import asyncio
import json

import pytest
from testserver import ServerConfig, TestServer

from cli_runner import run
from servesize.errors import BadInput
from servesize.measure.client import StreamClient
from servesize.measure.metrics import snapshot_from_text
from servesize.measure.prompts import PromptFactory
from servesize.measure.record import FORMAT_VERSION, RunRecord
from servesize.measure.sessions import ClassParams, SessionParams, SessionsConfig

POOL = ["--prompt-tokens", "513", "--max-parallel", "16", "--rounds", "2", "--quiet", "--json"]
SESSIONS = ["--users", "1", "--requests-per-user", "3", "--median", "500", "--prefix", "100", "--think-time", "0.02",
            "--output-tokens", "2", "--turn-tokens", "50", "--max-model-len", "4000", "--subagent-ratio", "0", "--quiet"]
NOT_UTF8 = b"vllm:prefix_cache_queries_total 10.0\n\xff\xfe\xc3\x28 not text\n"


def one_line(err: str) -> str:
    assert err.startswith("servesize: ") and err.count("\n") == 1 and "Traceback" not in err and "bug" not in err, err
    return err.strip()


# -- 1. /metrics whose body is not UTF-8 ------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["pool", "sessions", "sessions on two endpoints"])
def test_a_metrics_body_that_is_not_utf8_is_distrusted_with_a_note_naming_metrics(tmp_path, capsys, command):
    with TestServer(ServerConfig(capacity_tokens=4096)) as good, TestServer(ServerConfig(capacity_tokens=4096,
                                                                                         metrics_body=NOT_UTF8)) as bad:
        if command == "pool":
            code, out, err = run(capsys, "measure", "pool", "--url", bad.url, "--record", tmp_path / "r.jsonl", *POOL)
        else:
            url = bad.url if command == "sessions" else f"{good.url},{bad.url}"
            code, out, err = run(capsys, "measure", "sessions", "--url", url, "--record", tmp_path / "r.jsonl", *SESSIONS)
    assert code == 0, err
    assert f"{bad.url}/metrics answered a body that is not UTF-8 text" in out
    assert "bug" not in err


# -- 2. cache_config_info labels that are no possible figure ------------------------------------------------------

IMPOSSIBLE = [("block_size", "inf"), ("num_gpu_blocks", "1e400"), ("block_size", "0"), ("block_size", "-16"),
              ("num_gpu_blocks", "nan"), ("block_size", "2.5")]


@pytest.mark.parametrize("label,value", IMPOSSIBLE)
def test_an_impossible_cache_config_label_is_refused_as_that_signal(label, value):
    good = ('vllm:prefix_cache_queries_total 0.0\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="256",engine="0"} 1.0\n')
    snap = snapshot_from_text(good.replace(f'{label}="{"16" if label == "block_size" else "256"}"', f'{label}="{value}"'))
    assert snap.cache_config is None and snap.engine_pool_tokens is None and snap.block_size is None
    assert snap.refused is not None and f"label {label}={value!r}" in snap.refused
    assert snapshot_from_text(good).engine_pool_tokens == 256 * 16  # the honest one is taken


@pytest.mark.parametrize("label,value", IMPOSSIBLE[:4])
def test_measure_pool_never_uses_an_impossible_cache_config_label(tmp_path, capsys, label, value):
    with TestServer(ServerConfig(capacity_tokens=4096, config_labels={label: value})) as server:
        code, out, err = run(capsys, "measure", "pool", "--url", server.url, "--record", tmp_path / "p.jsonl", *POOL)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["block_size_source"] != "vllm:cache_config_info"
    assert sum(f"{server.url}/metrics: vllm:cache_config_info label {label}={value!r}" in n for n in doc["notes"]) == 1
    assert "-512" not in out and "-100.0%" not in out


# -- 3. /v1/models of the wrong shape, or not UTF-8 ----------------------------------------------------------------

@pytest.mark.parametrize("body,why", [(b'{"object": "list", "data": "servesize-test"}', "'data' is str"),
                                      (b'{"object": "list", "data": [1, 2]}', "'data' is list"),
                                      (b'{"object": "list", "data": {"id": "servesize-test"}}', "'data' is dict"),
                                      (b'{"object": "list", "data": [{"id": 7}]}', "first entry's 'id' is 7"),
                                      (b'\xff\xfe{"data": []}', "not UTF-8 text")])
def test_a_models_list_of_the_wrong_shape_is_refused_in_one_line(tmp_path, capsys, body, why):
    with TestServer(ServerConfig(models_body=body)) as server:
        code, out, err = run(capsys, "measure", "pool", "--url", server.url, "--record", tmp_path / "p.jsonl", *POOL)
    line = one_line(err)
    assert code == 2 and f"{server.url}/v1/models" in line and why in line


# -- 4. /tokenize counts that are no count, a /tokenize that never answers, usage.prompt_tokens that never changes --

@pytest.mark.parametrize("count", ["207", None, float("nan"), float("inf"), -3, 2.5])
def test_a_tokenize_count_that_is_no_count_is_distrusted_and_lengths_are_calibrated_from_usage(count):
    async def go():
        async with TestServer(ServerConfig(tokenize_count=count)) as server, StreamClient(server.url) as client:
            await client.resolve_model()
            prompts = PromptFactory(client, nonce=1)
            prompt = await prompts.make(0, 300)
            return prompts, prompt
    prompts, prompt = asyncio.run(go())
    assert prompts.mode == "probe" and prompt.tokens == 300 and not prompt.exact
    assert prompts.note is not None and prompts.note.startswith("/tokenize answered count=")


def test_a_tokenize_that_never_answers_is_given_up_after_its_bounded_timeout():
    async def go():
        async with TestServer(ServerConfig(tokenize_hangs=True)) as server, StreamClient(server.url) as client:
            await client.resolve_model()
            prompts = PromptFactory(client, nonce=1, tokenize_timeout_s=0.2)
            await prompts.start()
            return prompts
    prompts = asyncio.run(go())
    assert prompts.mode == "probe"
    assert prompts.note is not None and prompts.note.startswith("/tokenize did not answer within 0.2 s")


@pytest.mark.parametrize("prompt_tokens", [0, 7])
def test_usage_prompt_tokens_that_never_change_refuse_the_calibration_in_one_line(tmp_path, capsys, prompt_tokens):
    with TestServer(ServerConfig(tokenize=False, usage_prompt_tokens=prompt_tokens)) as server:
        code, out, err = run(capsys, "measure", "pool", "--url", server.url, "--record", tmp_path / "p.jsonl", *POOL)
    line = one_line(err)
    assert code == 2 and f"usage.prompt_tokens is {prompt_tokens} for a 64-word probe and {prompt_tokens}" in line


# -- 5. a record of a newer format ----------------------------------------------------------------------------------

def test_resuming_a_record_of_a_newer_format_version_is_refused_naming_both_versions(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    params = SessionParams(user=ClassParams(500, 0.0, 100), max_model_len=4000, output_tokens=2, turn_tokens=50,
                           subagent_ratio=0.0)
    cfg = SessionsConfig(url="http://127.0.0.1:9", params=params, users=[1], requests_per_user=3)
    RunRecord.create(rec, "sessions", cfg.to_params()).close()
    lines = rec.read_text().splitlines()
    header = json.loads(lines[0])
    header["version"] = FORMAT_VERSION + 1
    rec.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(BadInput, match=f"format version {FORMAT_VERSION + 1}.* version {FORMAT_VERSION} only"):
        RunRecord.resume(rec, "sessions")
    with TestServer(ServerConfig()) as server:
        code, _, err = run(capsys, "measure", "sessions", "--resume", rec, "--url", server.url, "--quiet")
    line = one_line(err)
    assert code == 2 and f"format version {FORMAT_VERSION + 1}" in line and f"version {FORMAT_VERSION} only" in line


@pytest.mark.parametrize("cap", ['"inf"', "1e400", "-5", "true", "4096.5"])
def test_a_max_model_len_that_is_no_whole_count_falls_back_as_a_missing_one_does(cap):
    from servesize.commands.measure_sessions import _server_max_model_len

    body = f'{{"object": "list", "data": [{{"id": "servesize-test", "max_model_len": {cap}}}]}}'.encode()
    with TestServer(ServerConfig(models_body=body)) as server:
        assert _server_max_model_len(server.url, None) is None
