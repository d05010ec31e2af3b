"""The lengths ``servesize bench`` and ``servesize measure bench`` draw are the ones ``vllm bench serve`` draws.

vLLM's own sampler (``vllm.benchmarks.datasets.utils.get_sampling_params``, from the CPU build's venv) is run with
the generator its random dataset seeds with ``--seed``, for a tokenizer that adds no special tokens (a Qwen one;
servesize knows no tokenizer: ``BenchLoad.bounds`` says what a BOS changes). Every input and output length must be
equal, the floor and ceil of the interval's ends included (the ceiling of 777 x 1.5 is 1,166); a load vLLM refuses
is refused."""

from __future__ import annotations

import json
import subprocess

import pytest
from vllm_server import vllm_env

from servesize.simulate.bench import BenchLoad

pytestmark = pytest.mark.vllm

SAMPLE = """
import json, sys
import numpy as np
from vllm.benchmarks.datasets.utils import get_sampling_params

class NoSpecialTokens:
    vocab_size = 1000
    def num_special_tokens_to_add(self):
        return 0

out = []
for n, ratio, i, o, seed in json.loads(sys.argv[1]):
    ins, outs, _ = get_sampling_params(np.random.default_rng(seed), n, ratio, i, o, NoSpecialTokens())
    out.append([ins.tolist(), outs.tolist()])
print(json.dumps(out))
"""
CASES = [(200, 0.0, 1024, 128, 0), (500, 0.1, 1000, 200, 3), (300, 0.5, 777, 33, 12345), (100, 0.9, 20, 1, 7)]


def test_every_drawn_length_is_vllms_own_for_the_same_seed(vllm_python):
    r = subprocess.run([str(vllm_python), "-c", SAMPLE, json.dumps(CASES)], capture_output=True, text=True,
                       timeout=300, env=vllm_env())
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    for (n, ratio, i, o, seed), (ins, outs) in zip(CASES, theirs):
        load = BenchLoad(random_input_len=i, random_output_len=o, random_range_ratio=ratio, num_prompts=n,
                         random_seed=seed)
        ours_in, ours_out = load.lengths()
        assert ours_in.tolist() == ins and ours_out.tolist() == outs, (n, ratio, i, o, seed)
        assert load.longest_request_tokens >= max(ins) + max(outs)
    # numpy maps each draw through the interval's width, so equal draws are draws from one interval: 777 x 1.5 =
    # 1,165.5 has vLLM's ceiling 1,166 (servesize took int(), 1,165, before)
    assert BenchLoad(random_input_len=777, random_range_ratio=0.5).bounds(777) == (388, 1166)


def test_a_load_that_can_draw_an_empty_prompt_is_refused_as_vllm_refuses_it(vllm_python):
    # 10 x (1 - 0.9) is 0.9999999999999998 in floats: vLLM's lowest input length is 0, and its random dataset
    # refuses the load ("--random-input-len is too small"); so does BenchLoad, in one line
    from servesize.errors import BadInput

    probe = "import math; print(math.floor(10 * (1 - 0.9)))"
    assert subprocess.run([str(vllm_python), "-c", probe], capture_output=True, text=True).stdout.strip() == "0"
    with pytest.raises(BadInput, match="empty prompt"):
        BenchLoad(random_input_len=10, random_range_ratio=0.9)
    BenchLoad(random_input_len=10, random_range_ratio=0.9, random_prefix_len=1)  # a prefix: never empty


PARSER = """
import json
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
parsed = vars(parser.parse_args([]))  # every default as vLLM resolves it (a string default through its type)
print(json.dumps({"options": sorted(o for a in parser._actions for o in a.option_strings),
                  "defaults": {k: v if v is None or isinstance(v, (int, float, str, bool)) else str(v)
                               for k, v in parsed.items()}}))
"""


def test_every_load_flag_of_servesize_bench_is_vllm_bench_serves_with_its_default(vllm_python):
    # the load is given in vllm bench serve's own flags: each of servesize's is one of vLLM's (0.32's parser, from the
    # CPU build's venv), with the default vLLM resolves it to (--ready-check-timeout-sec 0: skipped, since PR #30975)
    import argparse

    from servesize.commands.bench import add_load_arguments

    r = subprocess.run([str(vllm_python), "-c", PARSER], capture_output=True, text=True, timeout=300, env=vllm_env())
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    ours = {a.option_strings[0]: (a.dest, a.default) for a in parser._actions if a.option_strings[0] != "-h"}
    assert "--ready-check-timeout-sec" in ours and set(ours) <= set(theirs["options"]), \
        sorted(set(ours) - set(theirs["options"]))
    for opt, (dest, default) in ours.items():
        vllm_default = theirs["defaults"][dest]
        if opt == "--random-range-ratio" and vllm_default is None:  # None is vLLM's 0.0 (utils.get_sampling_params)
            vllm_default = 0.0
        if isinstance(default, (int, float)) and not isinstance(default, bool) and vllm_default is not None:
            vllm_default = float(vllm_default)  # some of vLLM's defaults are strings its dataset code parses ("0.0")
        assert default == vllm_default, (opt, default, vllm_default)
