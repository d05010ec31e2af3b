"""The measure commands' flags: each bounded, a refusal one line naming the flag, the value and the range."""

from __future__ import annotations

import pytest

from cli_runner import run_captured


@pytest.mark.parametrize("argv, words", [
    (["measure", "pool", "--url", "http://127.0.0.1:9", "--block-size", "-16"], "--block-size -16 is out of range: [1, 65,536]"),
    (["measure", "pool", "--url", "http://127.0.0.1:9", "--prompt-tokens", "1e400"], "--prompt-tokens '1e400'"),
    (["measure", "sessions", "--url", "http://127.0.0.1:9", "--median", "1e400"], "--median '1e400'"),
    (["measure", "sessions", "--url", "http://127.0.0.1:9", "--duration", "nan", "--users", "1"], "--duration 'nan'"),
    (["measure", "sessions", "--url", "http://127.0.0.1:9", "--users", "0,4"], "--users: '0' must be from 1 to 100,000"),
    (["measure", "sessions", "--url", "http://127.0.0.1:9", "--predicted-users", "1e9"], "--predicted-users"),
    (["measure", "server", "--url", "http://127.0.0.1:9", "--rounds", "1", "--predict", "x --gpus 1xH100"],
     "--rounds 1 is out of range: [2, 100]"),
])
def test_a_measure_flag_out_of_range_is_one_line_naming_the_flag_the_value_and_the_range(argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_captured(*argv)
    assert code == 2 and words in err and err.count("\n") == 1, err
    if "--median" not in argv:
        # the range is named (--median is the Scenario's own flag)
        assert "allowed:" in err or "out of range" in err or "must be from" in err


def _outside(p):
    """Values just outside each declared bound, and one inside."""
    step = 1 if p.kind in ("int", "tokens") else 1e-9
    below = p.lo if p.lo_open else p.lo - step
    return [v for v in (below, p.hi + step if p.hi is not None else None) if v is not None]


@pytest.mark.parametrize("name", sorted(__import__("servesize.commands._measure", fromlist=["FLAGS"]).FLAGS))
def test_every_measure_flag_is_bounded_on_both_sides_and_names_itself_when_refused(name):
    from servesize.commands._measure import FLAGS, bounded
    from servesize.errors import BadInput

    p = FLAGS[name]
    assert p.lo is not None and p.hi is not None, f"--{name} has no declared range"
    parse = bounded(p)
    for value in _outside(p) + ["1e400", "nan", "-inf", "junk"]:
        with pytest.raises(BadInput) as exc:
            parse(str(value) if not isinstance(value, float) else repr(value))
        message = str(exc.value)
        assert message.startswith(p.flag + " ") and p.range_text() in message and "\n" not in message
    assert parse(str(p.hi if p.kind != "tokens" else int(p.hi))) == p.hi
