import math

import pytest

from servesize.errors import BadInput
from servesize.model.hardware import find_gpu
from servesize.planning.power import PowerStates, duty_cycles, power_bill, seed_decode_capacity

# the seed's H200 states (working-set-model.md 2.10): idle 80, decode 385, prefill 630 W, host 575 W per GPU
H200 = PowerStates(idle_w=80, decode_w=385, prefill_w=630, host_w_per_gpu=575)


def test_h200_states_are_the_modelled_fractions_of_a_700_w_tdp():
    s = PowerStates.from_tdp(700)
    assert s.decode_w == pytest.approx(0.55 * 700) == 385
    assert s.prefill_w == pytest.approx(0.90 * 700) == 630
    assert s.idle_w == pytest.approx(80, abs=0.1)
    assert s.host_w_per_gpu == 575


def test_duty_cycles_partition_time_between_prefill_decode_and_idle():
    d_p, d_d = duty_cycles(rate_group_per_s=2.0, mean_service_s=0.1, decode_capacity_tok_s=10_000, output_tokens_per_request=1000)
    assert d_p == pytest.approx(2.0 * 0.1)
    assert d_d == pytest.approx(2.0 * 1000 / 10_000)
    d_p, d_d = duty_cycles(2.0, 0.45, 1_000, 1000)
    assert d_p == pytest.approx(0.9) and d_d == pytest.approx(0.1)  # decode gets only what prefill leaves


def test_the_seeds_decode_capacity_is_the_ceiling_at_the_floor():
    assert seed_decode_capacity(228, 40) == 228 * 40


def test_an_unloaded_deployment_draws_idle_plus_host_at_the_meter():
    bill = power_bill(H200, n_gpu=2, replicas=1, rate_group_per_s=0, mean_service_s=0.1,
                      decode_capacity_tok_s=9120, users=0, pue=1.5, price_per_kwh=0.19)
    assert bill.w_per_gpu == 80
    assert bill.kw_at_meter == pytest.approx(2 * (80 + 575) * 1.5 / 1000) == bill.idle_floor_kw
    assert bill.cost_per_million_output_tokens == math.inf


def test_a_saturated_prefill_server_draws_the_prefill_plateau():
    bill = power_bill(H200, 1, 1, rate_group_per_s=100, mean_service_s=0.1, decode_capacity_tok_s=9120, users=10)
    assert bill.d_p == 1.0 and bill.d_d == 0.0 and bill.w_per_gpu == 630


def test_the_27b_tp2_bill_at_64_users_worked_out():
    # 64 users x 1.1 / 30 s at E[S] = 96.2 ms, decode ceiling 228 at 40 tok/s, 1,000 output tokens each
    rate = 64 * 1.1 / 30
    d_p = rate * 0.0962
    d_d = rate * 1000 / (228 * 40)
    w = d_p * 630 + d_d * 385 + (1 - d_p - d_d) * 80
    kw = 2 * (w + 575) * 1.5 / 1000
    bill = power_bill(H200, n_gpu=2, replicas=1, rate_group_per_s=rate, mean_service_s=0.0962,
                      decode_capacity_tok_s=seed_decode_capacity(228, 40), users=64, pue=1.5, price_per_kwh=0.19,
                      output_tokens_per_request=1000, hours_per_month=720)
    assert bill.w_per_gpu == pytest.approx(w)
    assert bill.kw_at_meter == pytest.approx(kw)
    assert bill.cost_per_month == pytest.approx(kw * 720 * 0.19)
    assert bill.cost_per_user_month == pytest.approx(kw * 720 * 0.19 / 64)
    assert bill.cost_per_million_output_tokens == pytest.approx(kw * 0.19 / 3600 / (rate * 1000) * 1e6)


def test_the_bill_is_linear_in_price_and_pue():
    args = dict(states=H200, n_gpu=2, replicas=2, rate_group_per_s=1.0, mean_service_s=0.17,
                decode_capacity_tok_s=4720, users=64)
    base = power_bill(**args, pue=1.5, price_per_kwh=0.19)
    assert power_bill(**args, pue=1.5, price_per_kwh=0.38).cost_per_month == pytest.approx(2 * base.cost_per_month)
    assert power_bill(**args, pue=3.0, price_per_kwh=0.19).kw_at_meter == pytest.approx(2 * base.kw_at_meter)


def test_the_draw_stays_between_idle_and_the_prefill_plateau_at_every_load():
    for rate in (0.0, 0.1, 1.0, 3.0, 10.0, 1e4):
        bill = power_bill(H200, 1, 1, rate, 0.17, 4720, 64)
        assert 0 <= bill.d_p + bill.d_d <= 1 + 1e-12
        assert 80 <= bill.w_per_gpu <= 630


def test_the_bill_explains_itself_and_names_its_currency():
    bill = power_bill(H200, 1, 1, 1.0, 0.17, 4720, 64)
    assert bill.derivation.value("kw_at_meter") == bill.kw_at_meter
    assert bill.to_dict()["currency"] == "EUR"  # the default tariff is the EU average in euros
    usd = power_bill(H200, 1, 1, 1.0, 0.17, 4720, 64, price_per_kwh=0.12, currency="USD")
    assert usd.to_dict()["currency"] == "USD" and "USD/month" in usd.derivation.render()
    assert usd.cost_per_month == pytest.approx(bill.cost_per_month * 0.12 / 0.19)


@pytest.mark.parametrize("bad", [dict(n_gpu=3, replicas=2), dict(pue=0.9), dict(price_per_kwh=-1), dict(rate_group_per_s=-1)])
def test_impossible_bills_are_refused(bad):
    args = dict(states=H200, n_gpu=2, replicas=1, rate_group_per_s=1.0, mean_service_s=0.1,
                decode_capacity_tok_s=1000, users=1)
    with pytest.raises(BadInput):
        power_bill(**{**args, **bad})


def test_power_states_must_order_idle_decode_prefill():
    with pytest.raises(BadInput):
        PowerStates(idle_w=400, decode_w=385, prefill_w=630, host_w_per_gpu=0)


def test_the_catalogue_h200_tdp_gives_the_seeds_power_states():
    s = PowerStates.from_tdp(find_gpu("H200").tdp_w)
    assert (round(s.idle_w), round(s.decode_w, 9), round(s.prefill_w, 9)) == (80, 385, 630)


# ---------------------------------------------------------------- every catalogued GPU has a TDP and a bill

def _catalogue():
    from servesize.model import hardware

    return list(hardware.load_gpus().values())


@pytest.mark.parametrize("gpu", _catalogue(), ids=lambda g: g.key)
def test_every_catalogued_gpu_has_a_positive_tdp_with_its_source(gpu):
    assert gpu.tdp_w is not None and gpu.tdp_w > 0
    assert gpu.tdp_source.strip(), f"{gpu.key}: tdp_w without tdp_source"


def test_a_tdp_without_its_source_is_a_catalogue_error():
    from servesize.model import hardware

    row = {"key": "X1", "name": "X1", "vendor": "NVIDIA", "memory_mib": 1024, "bandwidth_gbps": 100.0,
           "source": "s", "tdp_w": 300}
    with pytest.raises(ValueError, match="tdp_source"):
        hardware._row_to_gpu(row)
    assert hardware._row_to_gpu({**row, "tdp_source": "https://example.org/x1"}).tdp_w == 300


@pytest.mark.parametrize("gpu", _catalogue(), ids=lambda g: g.key)
def test_plan_on_every_catalogued_gpu_prints_power_and_the_bill(gpu, capsys):
    import json

    from servesize.cli import main

    # A10G: NVIDIA publishes no dense BF16 rate for it (the catalogue gives none), and the prefill duty needs
    # one, so the user gives it; the TDP is the catalogue's own on every GPU.
    flops = [] if gpu.bf16_dense_tflops else ["--gpu-flops", "70"]
    argv = ["plan", "llama-3.1-8b", "--gpus", f"1x{gpu.key}", "--max-model-len", "20k", "--fills", "20", *flops]
    assert main([*argv, "--json"]) == 0
    power = json.loads(capsys.readouterr().out)["power"]
    assert power is not None and power["kw_at_meter"] > 0 and power["cost_per_month"] > 0


def test_plan_on_the_h100_sxm_prints_its_power_line_from_the_700_w_tdp(capsys):
    from servesize.cli import main
    from servesize.model import hardware

    assert hardware.find_gpu("H100").tdp_w == 700
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--fills", "20"]) == 0
    out = capsys.readouterr().out
    assert "has no TDP" not in out
    assert any(line.startswith("power at ") and "kW at the meter" in line and "per month" in line
               for line in out.splitlines())
