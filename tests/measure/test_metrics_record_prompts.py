"""Prometheus parsing, the JSONL run record, and exact-length unique prompts."""

import asyncio

import pytest
from testserver import BlockCache, ServerConfig, TestServer

from servesize.errors import BadInput
from servesize.measure.client import StreamClient
from servesize.measure.metrics import delta, parse_prometheus, snapshot_from_text
from servesize.measure.prompts import PromptFactory, id_words
from servesize.measure.record import RunRecord, read_record

VLLM_TEXT = """\
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:cache_config_info{block_size="16",cache_dtype="fp8_e4m3",enable_prefix_caching="True",num_gpu_blocks="83125",engine="0"} 1.0
"""


def test_the_scrape_sums_counters_over_engines_and_reads_cache_config_info():
    s = snapshot_from_text(VLLM_TEXT)
    assert s.prefix_queries == 1000 + 500 and s.prefix_hits == 640 and s.preemptions == 2
    assert s.kv_usage == 0.5
    assert s.engine_pool_tokens == 83125 * 16
    assert s.cache_config["cache_dtype"] == "fp8_e4m3"


def test_older_metric_names_are_read():
    s = snapshot_from_text('vllm:gpu_prefix_cache_queries_total{a="b"} 10\nvllm:gpu_prefix_cache_hits_total 4\n'
                           'vllm:gpu_cache_usage_perc 0.1\n')
    assert (s.prefix_queries, s.prefix_hits, s.kv_usage) == (10, 4, 0.1)


def test_a_delta_is_the_increase_and_its_hit_ratio():
    a = snapshot_from_text("vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 10\n")
    b = snapshot_from_text("vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 160\n")
    d = delta(a, b)
    assert (d.queries, d.hits, d.preemptions) == (200, 150, None) and d.hit_ratio == 150 / 200


def test_label_values_with_escapes_are_read():
    series = parse_prometheus('x{a="q\\"uote",b="c"} 1\n')
    assert series["x"][0][0] == {"a": 'q"uote', "b": "c"}


def test_label_escapes_are_the_text_formats_three_and_nothing_else_is_a_crash_or_mojibake():
    """Issue 31's fuzz generator (tests/measure/test_fuzz.py, /metrics answers): a label "\\x" or "\\N{foo}" raised
    UnicodeDecodeError out of the scrape (Python's unicode_escape), and "é" was read as mojibake."""
    text = 'vllm:cache_config_info{block_size="16",a="\\x",b="\\N{foo}",c="é",d="q\\"r\\\\s\\nt"} 1'
    labels = parse_prometheus(text)["vllm:cache_config_info"][0][0]
    assert labels == {"block_size": "16", "a": "\\x", "b": "\\N{foo}", "c": "é", "d": 'q"r\\s\nt'}
    assert snapshot_from_text(text).block_size == 16


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-16", "1e400"])
def test_a_counter_that_is_no_count_is_no_figure_never_a_nan_in_a_hit_ratio(value):
    """Prometheus's text allows NaN and infinities: a prefix-cache counter reading one (or a negative count) is
    treated as absent, as the fuzz generator found (a hit ratio of NaN, a queries figure of -16)."""
    text = f"vllm:prefix_cache_queries_total {value}\nvllm:prefix_cache_hits_total 5\nvllm:num_requests_running 2"
    snap = snapshot_from_text(text)
    assert snap.prefix_queries is None and "prefix_queries" not in snap.names
    assert snap.prefix_hits == 5.0 and snap.running == 2.0


def test_the_record_keeps_every_line_and_drops_only_a_torn_tail(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = RunRecord.create(path, "pool", {"url": "u"})
    rec.append("request", n=1)
    rec.close()
    with open(path, "a") as fh:
        fh.write('{"type": "request", "n": ')  # a crash mid-write
    contents = read_record(path, "pool")
    assert contents.torn_tail and [e["n"] for e in contents.events] == [1]
    rec, contents = RunRecord.resume(path, "pool")
    rec.append("request", n=2)
    rec.close()
    assert [e.get("n") for e in read_record(path).events if e["type"] == "request"] == [1, 2]


def test_a_record_is_never_overwritten_and_kinds_are_not_mixed(tmp_path):
    path = tmp_path / "r.jsonl"
    RunRecord.create(path, "pool", {}).close()
    with pytest.raises(BadInput, match="--resume"):
        RunRecord.create(path, "pool", {})
    with pytest.raises(BadInput, match="not 'measure sessions'"):
        read_record(path, "sessions")
    with pytest.raises(BadInput, match="no run record"):
        read_record(tmp_path / "missing.jsonl")


def test_ids_are_distinct_words():
    assert len({tuple(id_words(n, s)) for n in range(3) for s in range(300)}) == 900


@pytest.mark.parametrize("tokenize", [True, False])
def test_prompts_have_exactly_the_asked_length_and_share_no_block(tokenize):
    async def go():
        async with TestServer(ServerConfig(tokenize=tokenize)) as server:
            async with StreamClient(server.url) as client:
                await client.resolve_model()
                f = PromptFactory(client, seed=1)
                return f, [await f.make(i, 257) for i in range(5)]
    factory, prompts = asyncio.run(go())
    assert factory.mode == ("tokenize" if tokenize else "probe")
    assert all(len(p.text.split()) == 257 for p in prompts)
    cache = BlockCache(10_000, 16)
    for p in prompts:
        assert cache.admit(p.text.split()) == 0  # no prompt hits another's blocks
    assert cache.admit(prompts[0].text.split()) == 256


def test_the_block_cache_evicts_least_recently_used_blocks():
    cache = BlockCache(capacity_blocks=4, block_size=2)
    a, b, c = list("aaaa") + ["a1"], list("bbbb") + ["b1"], list("cccc") + ["c1"]
    assert cache.admit(a) == 0 and cache.admit(b) == 0
    assert cache.admit(a) == 4  # both of a's blocks
    cache.admit(c)  # evicts b, the least recently used
    assert cache.admit(a) == 4 and cache.admit(b) == 0


def test_prompt_ids_that_tokenize_to_the_same_tokens_are_refused():
    """A tokenizer that maps the id words to <unk> would make every 'unique' prompt share the cache."""
    import asyncio

    from servesize.errors import ServesizeError
    from servesize.measure.prompts import PromptFactory

    class UnkTokenizer:  # a stand-in server whose /tokenize knows no English word
        model = "m"

        async def post_json(self, path, body, *, timeout_s=None):
            words = body["prompt"].split()
            return 200, {"count": len(words), "tokens": [0] * len(words), "max_model_len": 4096}

    with pytest.raises(ServesizeError, match="same tokens"):
        asyncio.run(PromptFactory(UnkTokenizer()).start())


def test_tokenize_going_away_on_the_last_count_keeps_the_count_already_measured():
    """After 12 counts without an exact match the closest length is counted once more; /tokenize failing
    just then leaves that length's earlier count on the prompt (it used to be None)."""
    class TwoTokensPerWord:  # no odd length can be met exactly; /tokenize dies on its 16th call
        model = "m"
        calls = 0

        async def post_json(self, path, body, *, timeout_s=None):
            self.calls += 1
            if self.calls == 16:  # 1 + 2 while starting, 12 in the loop, then the last count
                raise OSError("gone")
            words = body["prompt"].split()
            return 200, {"count": 2 * len(words), "tokens": words, "max_model_len": 4096}

    async def go():
        f = PromptFactory(TwoTokensPerWord(), seed=1)
        return f, await f.make(0, 257)
    factory, prompt = asyncio.run(go())
    assert prompt.tokens == 2 * len(prompt.text.split()) and not prompt.exact
    assert "/tokenize unavailable" in factory.note


@pytest.mark.parametrize("content, words", [
    ('{"type": "header", "kind": "pool", "params": {"url": "u", "rounds": "three"}}\n', "'rounds' is \"three\", not int"),
    ('{"type": "header", "kind": "pool", "params": {"rounds": 3}}\n', "has no 'url'"),
    ('{"type": "header", "kind": "pool", "params": []}\n', "holds no run parameters"),
    ('{"type": "header", "kind": "pool", "params": {"url": "u"}}\n' + "[" * 100_000 + "]" * 100_000 + "\n{}\n", "line 2"),
    ('{"type": "header", "kind": "pool", "params": {"url": "u"}}\n{"type": "x", "v": NaN}\n{"type": "y"}\n', "line 2"),
    ("3\n", "line 1 is not a record event"),
    ('{"type": "note"}\n', "no header line"),
])
def test_a_damaged_record_is_refused_in_one_line_naming_what_is_wrong(tmp_path, content, words):
    from servesize.measure.pool import PoolConfig

    path = tmp_path / "r.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput) as exc:
        PoolConfig.from_params(read_record(path, "pool").header["params"])
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_only_a_regular_file_is_read_as_a_record(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        read_record(fifo)  # a FIFO would block the read forever
    with pytest.raises(BadInput, match="not a regular file"):
        read_record(tmp_path)


def test_resume_truncates_a_torn_line_and_keeps_it_in_the_segment_line(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = RunRecord.create(path, "pool", {"url": "u"})
    rec.append("request", n=1)
    rec.close()
    complete = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'{"type": "request", "n": ')
    rec, contents = RunRecord.resume(path, "pool")
    rec.close()
    assert "cut short (25 bytes" in contents.repair
    lines = path.read_bytes().split(b"\n")
    assert path.read_bytes().startswith(complete) and len(lines) == 4 and lines[-1] == b""
    assert read_record(path).events[-1]["dropped"] == '{"type": "request", "n": '


def test_a_resume_given_what_its_caller_read_under_the_lock_reads_the_record_no_more(tmp_path, monkeypatch):
    # --resume reads the record once (commands/_measure._resumed: its parameters, then the RunRecord), not twice
    from servesize.measure import record as record_module

    path = tmp_path / "r.jsonl"
    rec = RunRecord.create(path, "pool", {"url": "u"})
    rec.append("request", n=1)
    rec.close()
    lock = record_module.RecordLock.acquire(path, create=False)
    read = record_module.check_version(read_record(path, "pool"), path)
    with pytest.raises(ValueError, match="pass the lock"):
        RunRecord.resume(path, "pool", contents=read)
    reads: list = []
    monkeypatch.setattr(record_module, "read_record", lambda *a, **k: reads.append(a))
    rec, contents = RunRecord.resume(path, "pool", lock=lock, contents=read)
    rec.close()
    assert reads == [] and contents is read and contents.events[-1]["n"] == 1
    assert path.read_text().splitlines()[-1].startswith('{"type":"segment"')
