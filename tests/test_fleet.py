"""The fleet search as worked examples: its answer is what `servesize plan` says, for every fleet in a small space.

The brute force below plans every fleet of a small search space with ``servesize.plan`` (a whole plan
each, the independent check the search itself never runs) and compares: the cheapest fleet that serves
N users at p5 with no ceiling below N must be the search's winner, and for every replica shape the
fewest replicas the plans need must be the replicas the search ranked it at.
"""

from __future__ import annotations

import json
import math

import pytest

import servesize as s
from servesize.cli import main
from servesize.errors import BadInput, ServesizeError
from servesize.sizing.prices import gpu_hour_prices, parse_price

USERS = 150  # several replicas, several shapes within 8 GPUs (the prefill chunks beside the decodes bind: planning.interference)
PRICES = {"L40S": 0.90, "H100-SXM": 2.20, "H200-SXM": 3.10}  # per GPU-hour, chosen so no one GPU wins by price alone
SPACE = dict(models="qwen3.6-27b", gpus_from="L40S,H100,H200", tensor_parallel_size="1,2", precision="native,fp8",
             kv_cache_dtype="auto,fp8", max_gpus=8, fills=400,
             gpu_hour_price=[f"{gpu}={price}" for gpu, price in PRICES.items()])


def _serves(plan, users: int) -> bool:
    """What the search promises: every ceiling at the users, the hard decode floor in reach."""
    return plan.result.floor_out_of_reach is None and min(plan.ceilings.values()) >= users


def _brute_force() -> dict[tuple, list[tuple[int, float]]]:
    """Every fleet of the space planned on its own: shape -> [(replicas, min ceiling)] for the replicas that serve."""
    out: dict[tuple, list[tuple[int, float]]] = {}
    for gpu in PRICES:
        for tp in (1, 2):
            for precision in ("native", "fp8"):
                for kv in ("auto", "fp8"):
                    for dp in range(1, SPACE["max_gpus"] // tp + 1):
                        scenario = s.Scenario(model="qwen3.6-27b", gpus=f"{tp * dp}x{gpu}", tensor_parallel_size=tp,
                                              data_parallel_size=dp, quantization=precision, kv_cache_dtype=kv,
                                              fills=SPACE["fills"])
                        try:
                            plan = s.plan(scenario, sensitivity=False)
                        except ServesizeError:
                            break  # a shape that does not fit does not fit with more replicas either
                        if _serves(plan, USERS):
                            out.setdefault((gpu, tp, precision, kv), []).append((dp, min(plan.ceilings.values())))
                            break  # the fewest replicas of this shape found
    return out


@pytest.fixture(scope="module")
def searched():
    return s.fleet(users=USERS, top=100, **SPACE)


@pytest.fixture(scope="module")
def brute():
    return _brute_force()


def test_the_winner_is_the_cheapest_fleet_the_plans_say_serves_the_users(searched, brute):
    hours = searched.hours_per_month
    cheapest = min(dp * tp * PRICES[gpu] for (gpu, tp, _, _), found in brute.items() for dp, _ in found)
    w = searched.winner
    assert w is not None
    assert w.cost_per_month == pytest.approx(cheapest * hours, rel=1e-12)
    assert (w.gpu, w.tp, w.precision, w.kv_cache_dtype) in brute
    assert brute[(w.gpu, w.tp, w.precision, w.kv_cache_dtype)][0][0] == w.dp


def test_every_shape_is_ranked_at_the_fewest_replicas_its_plans_need(searched, brute):
    ranked = {(o.gpu, o.tp, o.precision, o.kv_cache_dtype): o.dp for o in searched.options}
    assert ranked == {shape: found[0][0] for shape, found in brute.items()}
    assert len(ranked) >= 4  # a space where several shapes compete


def test_each_ranked_fleet_serves_what_its_plan_serves(searched, brute):
    for o in searched.options:
        dp, plan_min = brute[(o.gpu, o.tp, o.precision, o.kv_cache_dtype)][0]
        if not o.users_served_is_lower_bound:
            assert o.users_served == pytest.approx(plan_min, rel=1e-12)
        else:
            assert plan_min >= o.users_served >= USERS


def test_the_confirming_plan_command_is_the_winners_fleet_and_it_serves(searched):
    w = searched.winner
    assert searched.plan_command == (f"servesize plan qwen3.6-27b --gpus {w.gpus} --tensor-parallel-size {w.tp} "
                                     f"--data-parallel-size {w.dp} --quantization {w.precision} "
                                     f"--kv-cache-dtype {w.kv_cache_dtype} --fills 400")
    plan = s.plan(s.Scenario(**searched.confirm), sensitivity=False)
    assert _serves(plan, USERS)
    assert plan.ceilings == searched.plan.ceilings  # the search's own plan of its winner is that plan


def test_the_frontier_only_rises_and_ends_at_the_cheapest_fleet_that_serves_everyone(searched):
    front = searched.frontier
    assert [p.cost_per_month for p in front] == sorted(p.cost_per_month for p in front)
    assert all(a.users_served < b.users_served for a, b in zip(front, front[1:]))
    assert front[-1].users_served >= USERS and all(p.users_served < USERS for p in front[:-1])
    assert front[-1].cost_per_month == searched.winner.cost_per_month


def test_a_frontier_point_serves_what_its_plan_says(searched):
    point = next(p for p in searched.frontier if p.dp > 1 and not p.users_served_is_lower_bound)
    plan = s.plan(s.Scenario(model="qwen3.6-27b", gpus=point.gpus, tensor_parallel_size=point.tp,
                             data_parallel_size=point.dp, quantization=point.precision,
                             kv_cache_dtype=point.kv_cache_dtype, fills=SPACE["fills"]), sensitivity=False)
    assert min(plan.ceilings.values()) == pytest.approx(point.users_served, rel=1e-12)


def test_plan_users_answers_how_many_gpus_of_this_type(brute):
    plan = s.plan(s.Scenario(model="qwen3.6-27b", gpus="H200", quantization="fp8", kv_cache_dtype="fp8",
                             users=USERS, fills=SPACE["fills"]), sensitivity=False)
    dp = plan.sizing["replicas"]
    assert plan.fixed.dp == dp and plan.fixed.n_gpu == dp and plan.sizing["gpus"] == f"{dp}xH200-SXM"
    assert min(plan.ceilings.values()) >= USERS
    assert dp == brute[("H200-SXM", 1, "fp8", "fp8")][0][0]
    one_fewer = s.plan(s.Scenario(model="qwen3.6-27b", gpus=f"{dp - 1}xH200", data_parallel_size=dp - 1,
                                  quantization="fp8", kv_cache_dtype="fp8", fills=SPACE["fills"]), sensitivity=False)
    assert min(one_fewer.ceilings.values()) < USERS
    per = plan.sizing["per_replica"]
    assert plan.sizing["replicas"] == max(math.ceil(USERS / v) for v in per.values())


def test_plan_users_refuses_a_data_parallel_size_it_would_replace():
    with pytest.raises(BadInput, match="drop --data-parallel-size"):
        s.plan(s.Scenario(model="qwen3.6-27b", gpus="2xH200", data_parallel_size=2, users=100), sensitivity=False)


def test_without_sticky_routing_replicas_add_no_warm_users_and_the_search_says_so():
    result = s.fleet(users=2000, models="qwen3.6-27b", gpus_from="H200", sticky_routing=False, precision="fp8",
                     kv_cache_dtype="fp8", tensor_parallel_size="1", fills=300)
    assert result.winner is None and result.exit_code == 2
    assert any("without sticky routing more replicas keep no more" in why for _, why in result.skipped)


# -- prices -------------------------------------------------------------------------------

def test_every_price_is_a_catalogue_gpu_with_a_provider_a_source_and_a_date():
    prices = gpu_hour_prices()
    assert len(prices) >= 10
    for key, p in prices.items():
        assert p.gpu == key and p.per_hour > 0 and p.currency == "USD"
        assert p.source and p.provider and len(p.date) == 10


def test_a_price_override_names_a_catalogue_gpu_and_a_positive_number():
    assert parse_price("h200=3.1") == ("H200-SXM", 3.1)
    for bad in ("H200", "H200=", "H200=free", "H200=-1", "NOPE9000=1"):
        with pytest.raises(BadInput):
            parse_price(bad)


def test_a_currency_without_prices_in_it_is_refused_before_the_search():
    with pytest.raises(BadInput, match="no GPU searched has a price in EUR"):
        s.fleet(users=10, models="llama-3.1-8b", currency="EUR", gpus_from="H100")


def test_the_power_bill_is_added_only_in_the_prices_currency():
    with pytest.raises(BadInput, match="one currency"):
        s.fleet(users=10, models="llama-3.1-8b", gpus_from="H100", price_includes_power=False)
    owned = s.fleet(users=40, models="llama-3.1-8b", gpus_from="H100,H200", price_includes_power=False,
                    electricity_price=0.12, currency="USD", gpu_hour_price=["H100=1.0", "H200=1.0"],
                    tensor_parallel_size="1", precision="native", kv_cache_dtype="auto", fills=300)
    assert owned.skipped == ()  # every catalogue GPU has a TDP now (H100-SXM's 700 W was missing): each is priced
    assert all(o.power_per_month > 0 for o in owned.options)
    w = owned.winner
    assert w.gpu == "H200-SXM"
    assert w.power_per_month > 0 and w.cost_per_month == pytest.approx(w.rent_per_month + w.power_per_month)
    assert w.rent_per_month == pytest.approx(w.n_gpu * 1.0 * owned.hours_per_month)


# -- the command ----------------------------------------------------------------------------

SMALL = ["--models", "llama-3.1-8b", "--gpus-from", "L40S,H100", "-tp", "1", "--fills", "300"]


def test_fleet_json_is_one_document_with_what_the_explorer_shows(capsys):
    assert main(["fleet", "--users", "60", *SMALL, "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert out.err == ""  # progress goes to stderr, and not under --json
    for key in ("winner", "options", "frontier", "recipe", "recipe_notes", "plan_command", "prices", "searched",
                "skipped", "currency", "teams"):
        assert key in doc
    assert doc["winner"]["gpus"] == f"{doc['winner']['n_gpu']}x{doc['winner']['gpu']}"
    assert doc["recipe"].startswith("vllm serve meta-llama/")


def test_fleet_text_names_the_winner_the_recipe_and_the_frontier(capsys, tmp_path):
    png = tmp_path / "frontier.png"
    assert main(["fleet", "--users", "60", *SMALL, "--plot", str(png)]) == 0
    out = capsys.readouterr()
    assert "servesize: fleet:" in out.err
    for line in ("cheapest fleets that serve every user", "cheapest:", "vllm serve", "confirm: servesize plan",
                 "frontier", f"plot written to {png}"):
        assert line in out.out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["fleet", "--models", "llama-3.1-8b"], "how many users"),
    (["fleet", "--users", "5", "--team", "a=5", "--models", "llama-3.1-8b"], "not both"),
    (["fleet", "--team", "a", "--models", "llama-3.1-8b"], "NAME=USERS"),
    (["fleet", "--team", "a=ten", "--models", "llama-3.1-8b"], "whole number of users"),
    (["fleet", "--team", "a=5", "--priority", "b=1", "--models", "llama-3.1-8b"], "one of the teams"),
    (["fleet", "--users", "5", "--models", "llama-3.1-8b", "--gpus-from", "H9000"], "unknown GPU"),
    (["fleet", "--users", "5", "--models", "llama-3.1-8b", "--gpu-hour-price", "H100=x"], "not a number"),
    (["fleet", "--users", "5", "--models", "llama-3.1-8b", "-q", "fp7"], "precision"),
    (["fleet", "--users", "5", "--models", "llama-3.1-8b", "-tp", "two"], "whole numbers"),
])
def test_bad_fleet_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servesize") and message in err[0]


def test_plan_users_prints_the_direct_answer_first(capsys):
    assert main(["plan", "llama-3.1-8b", "--gpus", "H100", "--users", "300", "--no-sensitivity", "--fills", "300"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("for 300 users: ") and "xH100-SXM" in first and "sets the count" in first
