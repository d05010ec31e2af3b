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
