"""Issue 31's command-line cases, each a regression test: servesize's own numbers are ASCII digits (Python's int()
and float() read any Unicode digit: `--users ٣` was planned as 3 users, `serve --port １` served on port 1), the
engine simulator's flags have physical bounds checked before any loop, and a flag of the cache replay given to the
engine simulator (which would ignore it) is refused by name. Each refusal is one line and exit 2."""

from __future__ import annotations

import pytest

from cli_runner import run
from servesize.commands._types import fraction, whole
from servesize.limits import MAX_ENGINE_USERS
from test_hardening import assert_refused

NO_TRACE = "no-such-trace.jsonl"  # every refusal below comes before the trace is opened
SIM = ["simulate", NO_TRACE]
ENGINE = [*SIM, "qwen3.6-27b", "--gpus", "1xH200", "--engine"]
PLAN = ["plan", "llama-3.1-8b", "--gpus", "1xH100"]

NON_ASCII = [
    (PLAN + ["--users", "٣"], "--users"),                    # ARABIC-INDIC DIGIT THREE: int() reads 3
    (PLAN + ["--cpu-offload-gib", "１０"], "--cpu-offload-gib"),  # FULLWIDTH: float() reads 10.0
    (PLAN + ["--seed", "٣"], "--seed"),
    (["serve", "--port", "１"], "--port"),
    ([*SIM, "--users", "٣"], "--users"),
    ([*SIM, "--seed", "٣"], "--seed"),
    ([*SIM, "--sessions", "٣"], "--sessions"),
    ([*SIM, "--trace-block-size", "٣"], "--trace-block-size"),
    ([*SIM, "--sessions-per-user", "٣"], "--sessions-per-user"),
    ([*SIM, "--engine-max-users", "٣"], "--engine-max-users"),
    ([*SIM, "--curves-for-users", "4,٣"], "--curves-for-users: '٣' is not a whole number in ASCII"),
    ([*SIM, "--warmup", "٠.٥"], "--warmup"),
]


@pytest.mark.parametrize("argv, name", NON_ASCII, ids=[" ".join(a[-2:]) for a, _ in NON_ASCII])
def test_a_number_in_digits_that_are_not_ascii_is_refused_naming_the_flag(argv, name, capsys):
    code, _, err = run(capsys, *argv)
    assert_refused(code, err, name)
    assert "ASCII" in err


OUT_OF_RANGE = [
    ([*ENGINE, "--sessions", "0"], "--sessions"),           # was taken as 'not given' (0 or None)
    ([*ENGINE, "--engine-max-users", "0"], "--engine-max-users"),
    ([*SIM, "--target-hit-rate", "5"], "--target-hit-rate"),
    ([*SIM, "--target-hit-rate", "nan"], "--target-hit-rate"),
    ([*SIM, "--target-hit-rate", "0"], "--target-hit-rate"),
    ([*SIM, "--warmup", "1"], "--warmup"),                   # nothing would be measured
    ([*SIM, "--trace-block-size", "-16"], "--trace-block-size"),
    ([*ENGINE, "--users", "100000"], f"{MAX_ENGINE_USERS:,}"),  # ran past every bound
    (["serve", "--port", "70000"], "--port"),
    (PLAN + ["--cpu-offload-gib", "1048576"], "--cpu-offload-gib"),  # a petabyte of host RAM was planned
]


@pytest.mark.parametrize("argv, name", OUT_OF_RANGE, ids=[" ".join(a[-2:]) for a, _ in OUT_OF_RANGE])
def test_an_engine_or_replay_number_out_of_its_range_is_refused_before_any_work(argv, name, capsys):
    code, _, err = run(capsys, *argv)
    assert_refused(code, err, name)


@pytest.mark.parametrize("flags", [["--curves-for-users", "5,10"], ["--service", "model"], ["--no-output-blocks"],
                                   ["--no-exact"], ["--no-bounds"], ["--target-hit-rate", "0.8"],
                                   ["--no-exact", "--no-bounds"]])
def test_a_flag_of_the_cache_replay_given_to_the_engine_simulator_is_refused_by_name(flags, capsys):
    code, _, err = run(capsys, *ENGINE, *flags)
    names = [f for f in flags if f.startswith("--")]
    assert_refused(code, err, *names, "cache replay")


def test_the_replay_still_takes_its_own_flags_and_reaches_the_trace(capsys):
    """The same flags without --engine pass the command line and stop only at the missing trace."""
    code, _, err = run(capsys, *SIM, "--curves-for-users", "5,10", "--service", "none", "--no-bounds", "--target-hit-rate",
                        "0.8", "--warmup", "0", "--seed", "7", "--sessions", "3")
    assert_refused(code, err, NO_TRACE)


@pytest.mark.parametrize("text, value", [("7", 7), (" 12 ", 12), ("+3", 3), ("0", 0)])
def test_ascii_whole_numbers_read_as_python_reads_them(text, value):
    assert whole(0, 100)(text) == value


@pytest.mark.parametrize("text", ["٣", "１", "²", "1.5", "", "1e3", "9" * 30])
def test_anything_but_ascii_digits_is_not_a_whole_number(text):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        whole(0, 10**40)(text)


def test_a_fraction_keeps_its_open_and_closed_ends():
    import argparse
    read = fraction(0.0, 1.0, lo_open=True)
    assert read("1") == 1.0 and read("0.25") == 0.25
    for bad in ("0", "1.0001", "inf", "nan", "-0.5", "０.５"):
        with pytest.raises(argparse.ArgumentTypeError):
            read(bad)


def test_a_fleet_of_mostly_cold_sessions_is_sized_not_a_bug(capsys):
    """The 10,000-case run of plausible command lines (2026-12-05) found this one ending in 'servesize: bug'
    (an IndexError in the warm fill: tests/test_fill_pass.py has the rule's own test)."""
    argv = ["fleet", "--models", "qwen3.6-27b", "--users", "40", "--priority", "a=high", "--seed", "2",
            "--invalidation", "0.9", "--fills", "20", "--draws", "200", "--json"]
    import json

    from servesize.cli import main

    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "bug" not in err and json.loads(out)["winner"]
