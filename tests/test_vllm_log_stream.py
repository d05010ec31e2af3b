"""A vLLM log is read line by line as it is parsed (issue #31: a 2,000,000-line, 158 MB start-up log took
`calibrate` 47 s and 1.7 GB), and a line is searched only when it holds a pattern's needle.

The needles are checked three ways: each is text of its own pattern, every line of every real log the suite
holds (tests/data/vllm-logs and the quoted lines of the fixtures) gives the same facts with the needles as with
every pattern searched on every line, and a file read as lines parses as its whole text does (plain, CRLF,
bad UTF-8, gzip).
"""

from __future__ import annotations

import gzip
import json
import pathlib
import re
import tracemalloc

import pytest

from servesize.cli import main
from servesize.errors import BadInput
from servesize.limits import input_lines, read_input
from servesize.vllm_logs import parse as P

ROOT = pathlib.Path(__file__).resolve().parent
LOGS = sorted((ROOT / "data" / "vllm-logs").glob("*.log"))
FIXTURES = ("vllm-logs-public.json", "vllm-logs-available.json")


def _quoted_lines() -> list[str]:
    out: list[str] = []
    for name in FIXTURES:
        for case in json.loads((ROOT / "fixtures" / name).read_text()):
            quotes = case.get("quotes") or []
            out += [q for q in quotes if isinstance(q, str)]
    return out


def _all_lines() -> list[str]:
    lines = _quoted_lines()
    for path in LOGS:
        lines += path.read_text(encoding="utf-8", errors="replace").split("\n")
    return lines


def _needles(needle) -> tuple[str, ...]:
    return (needle,) if isinstance(needle, str) else tuple(needle)


def test_the_suite_holds_real_logs_to_check_the_needles_on():
    assert len(LOGS) >= 15 and len(_quoted_lines()) >= 60


@pytest.mark.parametrize("name, needle, pattern", [(n, nd, p) for n, nd, p, _ in P._PATTERNS])
def test_each_needle_is_text_of_its_own_pattern(name, needle, pattern):
    source = re.sub(r"\\(.)", r"\1", pattern._args[0])  # the pattern with its escapes read as the text they match
    assert all(n in source for n in _needles(needle)), (name, needle)


def test_the_anchors_cover_every_needle():
    needles = [n for _, needle, _, _ in P._PATTERNS for n in _needles(needle)] + list(P._START_NEEDLES)
    assert all(P._may_state_a_fact(n) for n in needles), [n for n in needles if not P._may_state_a_fact(n)]


def test_every_real_log_line_a_pattern_matches_holds_its_needle_and_passes_the_gate():
    matched = set()
    for raw in _all_lines():
        line = P._ANSI.sub("", raw).replace("\r", " ").strip()
        for name, needle, pattern, _ in P._PATTERNS:
            if pattern.search(line):
                matched.add(name)
                assert any(n in line for n in _needles(needle)), (name, line[:200])
                assert P._may_state_a_fact(raw) or P._may_state_a_fact(line), line[:200]
        if P._START.search(line):
            assert any(n in line for n in P._START_NEEDLES), line[:200]
    # the logs exercise the patterns that matter: every KV-cache line and the start-up markers
    assert {"gpu_kv_cache_tokens", "max_concurrency", "available_kv_gib", "gpu_blocks", "vllm_version",
            "model_loading_gib"} <= matched


def _every_pattern_on_every_line(text: str) -> list:
    """The scan without needles: each cleaned line searched by every pattern (as before the needles)."""
    facts = []
    for no, raw in enumerate(text.split("\n"), start=1):
        line = P._ANSI.sub("", raw[:P.MAX_LOG_LINE_CHARS]).replace("\r", " ").strip()
        if not line:
            continue
        for name, _, pattern, read in P._PATTERNS:
            m = pattern.search(line)
            if m:
                try:
                    value = read(m)
                except P._Malformed:
                    continue
                facts.append((name, no, json.dumps(value, sort_keys=True, default=str)))
    return facts


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_the_needles_find_every_fact_every_pattern_finds(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    everywhere = {(no, name) for name, no, _ in _every_pattern_on_every_line(text)}
    gated = set()
    for no, raw in enumerate(text.split("\n"), start=1):
        line = P._ANSI.sub("", raw).replace("\r", " ").strip()
        if line and (P._may_state_a_fact(raw) or P._may_state_a_fact(line)):
            for name, needle, pattern, _ in P._PATTERNS:
                if any(n in line for n in _needles(needle)) and pattern.search(line):
                    gated.add((no, name))
    assert gated == everywhere and everywhere


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_a_log_read_as_lines_parses_as_its_whole_text(path, tmp_path):
    whole = read_input(path, "log", gunzip=True).decode("utf-8", errors="replace")
    try:
        expected = P.parse_vllm_log(whole, source=path.name)
    except BadInput as exc:
        with pytest.raises(BadInput) as got:
            P.parse_vllm_log(input_lines(path, "log"), source=path.name)
        assert str(got.value) == str(exc)
        return
    assert P.parse_vllm_log(input_lines(path, "log"), source=path.name) == expected
    packed = tmp_path / (path.name + ".gz")
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert P.parse_vllm_log(input_lines(packed, "log", gunzip=True), source=path.name) == expected


def test_lines_split_at_newline_only_keep_carriage_returns_and_replace_bad_bytes(tmp_path):
    f = tmp_path / "x.log"
    f.write_bytes(b"one\r\ntwo\rstill two\n\xff\xfethree\n\nlast")
    assert list(input_lines(f, "log")) == \
        b"one\r\ntwo\rstill two\n\xff\xfethree\n\nlast".decode("utf-8", errors="replace").split("\n")


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 4096])
def test_lines_read_in_blocks_of_any_size_are_the_whole_texts_lines(tmp_path, monkeypatch, chunk):
    """Blocks that end inside a line, inside a multi-byte character or an invalid sequence, and lines longer than a
    block, cut or not: the lines are the whole text's, each cut at the same number of characters."""
    import random

    from servesize import limits

    rng = random.Random(chunk)
    pieces = [b"\n", b"a", b"KV cache", "\u00e9".encode(), "\u4e2d".encode(), "\U0001f600".encode(), b"\xff", b"\xe4\xb8",
              b"\r", b" "]
    data = b"".join(rng.choice(pieces) * rng.choice([1, 1, 1, 5, 40]) for _ in range(3000))
    f = tmp_path / "x.log"
    f.write_bytes(data)
    monkeypatch.setattr(limits, "_CHUNK", chunk)
    for cut in (1, 7, 30, 10_000):
        expected = [x[:cut] for x in data.decode("utf-8", errors="replace").split("\n")]
        if expected and expected[-1] == "":
            expected.pop()  # a file ending in a newline has no line after it (blank lines say nothing to the parse)
        assert list(input_lines(f, "log", max_line_chars=cut)) == expected, (chunk, cut)


def test_a_line_past_the_cut_is_cut_and_the_lines_after_it_are_read(tmp_path):
    f = tmp_path / "x.log"
    f.write_bytes(b"a" * 100 + b"\nnext\n")
    assert list(input_lines(f, "log", max_line_chars=10)) == ["a" * 10, "next"]


def test_over_the_caps_and_broken_gzip_are_one_line_each(tmp_path):
    f = tmp_path / "x.log"
    f.write_bytes(b"x\n" * 100)
    with pytest.raises(BadInput, match="200 bytes, over the 100 servesize reads"):
        list(input_lines(f, "--vllm-log", 100))
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"y" * 5000 + b"\n"))
    from servesize import limits
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(limits, "MAX_DECOMPRESSED_BYTES", 1000)
        with pytest.raises(BadInput, match="decompresses to more than 1,000 bytes"):
            list(input_lines(bomb, "--vllm-log", gunzip=True, max_line_chars=100))
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(gzip.compress(b"z\n" * 1000)[:-8])  # no trailer: the stream ends early
    with pytest.raises(BadInput, match="looks gzip-compressed but cannot be decompressed"):
        list(input_lines(broken, "--vllm-log", gunzip=True))
    with pytest.raises(BadInput, match="is a directory"):
        list(input_lines(tmp_path, "--vllm-log"))


def test_a_long_log_is_parsed_without_holding_it():
    """100,000 debug lines (10 MB of text) around a start-up's KV lines, given as a generator that never holds
    them: the parse keeps what it found, not the lines (tracemalloc's peak, a count, not a time)."""
    quotes = json.loads((ROOT / "fixtures" / "vllm-logs-public.json").read_text())[0]["quotes"]
    filler = "(EngineCore_DP0 pid=6302) DEBUG 11-13 11:03:06 [core.py:712] EngineCore loop active, waiting for work."

    def lines():
        yield "INFO 11-13 11:00:00 [api_server.py:1] vLLM API server version 0.19.0"
        for _ in range(100_000):
            yield filler
        yield from quotes

    tracemalloc.start()
    try:
        facts = P.parse_vllm_log(lines(), source="long")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert facts.gpu_kv_cache_tokens == 290_864 and facts.last_line == 100_003
    assert peak < 1 << 20, peak  # the text is 10 MB


def test_calibrate_reads_a_gzipped_log_as_lines(tmp_path, capsys):
    path = next(p for p in LOGS if p.name == "v1-031-one-line-llama8b-a100.log")
    packed = tmp_path / path.name
    packed.write_bytes(gzip.compress(path.read_bytes()))
    docs = []
    for given in (packed, path):
        assert main(["calibrate", "--vllm-log", str(given), "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out)["calibrations"])
    assert docs[0] == docs[1] and docs[0][0]["max_model_len"] == 131072
