"""The explorer end to end in a real headless Chromium, against servesize installed from its wheel:
moving the controls gives the numbers `servesize plan --json` / `servesize fit --json` print for the
same inputs; a share link comes back to the same numbers; a bad value is refused beside its control;
an uploaded config.json, a pasted vLLM log and a measure record all work; no request leaves 127.0.0.1
(the `page` fixture checks that after every test)."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
from dataclasses import dataclass, field

import pytest

pytestmark = pytest.mark.browser

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
QWEN3_8B = FIXTURES / "model-configs" / "Qwen--Qwen3-8B" / "config.json"
TINY_TRACE = pathlib.Path(__file__).resolve().parents[1] / "data" / "claude-code-tiny.jsonl"  # four Claude Code sessions

SETTLED = """() => {
  const v = document.querySelector('#verdict'), app = window.servesize;
  return app && v.dataset.pending === 'false' && +v.dataset.seq === app.planSeq && v.dataset.state !== 'draft'
    && v.dataset.state !== 'empty';
}"""
FIT_SETTLED = """() => {
  const t = document.querySelector('#fitTable'), app = window.servesize;
  return app && t.dataset.state && t.dataset.pending !== 'true' && +t.dataset.seq === app.fitSeq;
}"""  # pending: a change whose fit has not started yet (its timer) would otherwise read as settled on the old table
PANELS = "() => document.querySelector('#verdict').dataset.panels === String(window.servesize.planSeq)"


def settle(page, state: str = "full") -> None:
    page.wait_for_function(SETTLED, timeout=60_000)
    got = page.get_attribute("#verdict", "data-state")
    errors = [e.text_content() for e in page.query_selector_all("#view-plan .err:not(:empty)")]
    assert got == state, f"the verdict is {got!r}: {page.text_content('#banner')!r} {errors}"


def open_plan(page, server: str, hash_: str = "", state: str = "full") -> None:
    page.goto(server + hash_)
    page.wait_for_selector("#verdict[data-seq]:not([data-seq='0'])", timeout=60_000)
    settle(page, state)


# -- the controls --------------------------------------------------------------------------------------

def type_into(page, field_name: str, value: str, pfx: str = "f-") -> None:
    box = page.locator(f"#{pfx}{field_name}")
    box.fill(value)
    box.press("Enter")


def move_slider(page, field_name: str, key: str, presses: int) -> str:
    """Press an arrow key on the slider, as a person does; the value it lands on, as its text box shows it."""
    slider = page.locator(f"#r-{field_name}")
    slider.focus()
    for _ in range(presses):
        slider.press(key)
    page.wait_for_function(SETTLED, timeout=60_000)
    return page.input_value(f"#f-{field_name}")


def choose(page, field_name: str, value: str, pfx: str = "f-") -> None:
    page.select_option(f"#{pfx}{field_name}", value)


def set_gpus(page, gpu: str, count: int, pfx: str = "f-") -> None:
    page.select_option(f"#{pfx}gpus-type", gpu)
    type_into(page, "gpus-count", str(count), pfx)


def split(page, dp: int, tp: int) -> None:
    page.wait_for_function(SETTLED, timeout=60_000)
    page.click(f"#seg-split button[data-dp='{dp}'][data-tp='{tp}']")


# -- what the page shows ---------------------------------------------------------------------------------

def shown(page) -> dict:
    """The numbers the page drew (each element carries the exact value it was sent)."""
    return page.evaluate("""() => {
      const num = s => { const e = document.querySelector(s); return e ? Number(e.dataset.value) : null; };
      const out = {binding: document.querySelector('#verdict').dataset.binding,
                   users: Number(document.querySelector('#verdict').dataset.users), ceilings: {}, tiles: {}, memory: {}};
      for (const c of document.querySelectorAll('#ceilingBars [data-ceiling]')) out.ceilings[c.dataset.ceiling] = Number(c.dataset.value);
      for (const t of document.querySelectorAll('#tiles [data-tile]'))
        out.tiles[t.dataset.tile] = t.dataset.value === 'null' ? null : Number(t.dataset.value);
      for (const m of document.querySelectorAll('#memoryBar [data-seg]')) out.memory[m.dataset.seg] = Number(m.dataset.bytes);
      out.recipe = document.querySelector('#recipe').textContent;
      out.bill = num('#bill [data-value]');
      out.headline = document.querySelector('#verdictHead').textContent;
      return out;
    }""")


def assert_same_plan(page, doc: dict, *, model_named: bool = True) -> None:
    """``model_named``: False for an uploaded config.json, which the recipe can only call 'uploaded config.json'
    (the command line names it after its folder)."""
    got = shown(page)
    if not model_named:
        got["recipe"] = got["recipe"].replace("uploaded config.json", doc["recipe"].split()[2], 1)
    assert got["binding"] == doc["binding"]
    assert got["users"] == doc["ceilings"][doc["binding"]]
    assert got["ceilings"] == doc["ceilings"]
    assert got["tiles"]["warm"] == doc["warm_users"]["p5"]
    assert got["tiles"]["pool"] == doc["pool_tokens"]
    assert got["tiles"]["ttft_miss"] == doc["latency"]["miss_ttft_s"]
    assert got["tiles"]["burst"] == doc["latency"]["burst_tolerance"]
    assert got["recipe"] == doc["recipe"]
    assert got["memory"]["weights"] == doc["memory"]["weights_bytes_per_gpu"]
    assert got["memory"]["kv_pool"] == doc["memory"]["available_kv_bytes_per_gpu"]
    if doc["power"] is not None:
        assert got["bill"] == doc["power"]["cost_per_month"]
    assert doc["binding"] in got["headline"]


# -- five configurations, set with the controls ---------------------------------------------------------------

@dataclass
class Config:
    name: str
    model: str
    gpu: str
    count: int
    cli: list[str]
    split: tuple[int, int] | None = None
    selects: dict = field(default_factory=dict)
    texts: dict = field(default_factory=dict)
    slider: tuple[str, str, int, str] | None = None  # field, key, presses, flag


CONFIGS = [
    Config("dense", "llama-3.1-8b", "H100-SXM", 1, ["--gpus", "1xH100-SXM"],
           selects={"quantization": "", "kv_cache_dtype": ""}, slider=("median", "ArrowRight", 6, "--median")),
    Config("moe", "qwen3-30b-a3b", "H100-SXM", 1, ["--gpus", "1xH100-SXM", "-q", "fp8", "--kv-cache-dtype", "fp8",
                                                  "--invalidation", "0.05"],
           texts={"invalidation": "0.05"}, slider=("think_time", "ArrowLeft", 40, "--think-time")),
    Config("hybrid-gdn", "qwen3.6-27b", "H200-SXM", 1, ["--gpus", "1xH200-SXM", "-q", "fp8", "--kv-cache-dtype", "fp8",
                                                       "--prefix", "20k", "--mamba-ssm-cache-dtype", "float32"],
           selects={"mamba_ssm_cache_dtype": "float32"}, texts={"prefix": "20k"},
           slider=("sigma", "ArrowLeft", 30, "--sigma")),
    Config("tp2", "llama-3.1-70b", "H100-SXM", 2, ["--gpus", "2xH100-SXM", "-tp", "2", "-q", "fp8", "--max-model-len", "64k"],
           split=(1, 2), texts={"max_model_len": "64k"}, selects={"kv_cache_dtype": ""}),
    Config("dp2-offload", "qwen3-8b", "H100-SXM", 2, ["--gpus", "2xH100-SXM", "-dp", "2", "-q", "fp8",
                                                     "--kv-cache-dtype", "fp8", "--cpu-offload-gib", "64"],
           split=(2, 1), texts={"cpu_offload_gib": "64"}, slider=("ttft_limit", "ArrowRight", 30, "--ttft-limit")),
    # the GPU count alone, no split picked: the page plans the split the command line chooses (TP 2 x DP 4 here)
    Config("8-gpus-split-chosen", "qwen3.6-27b", "H100-SXM", 8, ["--gpus", "8xH100-SXM", "-q", "fp8",
                                                                 "--kv-cache-dtype", "fp8"]),
]


def drive(page, config: Config) -> list[str]:
    """Set ``config`` with the controls; the CLI arguments of the same inputs."""
    type_into(page, "model", config.model)
    set_gpus(page, config.gpu, config.count)
    for name, value in config.selects.items():
        choose(page, name, value)
    for name, value in config.texts.items():
        type_into(page, name, value)
    if config.split:
        split(page, *config.split)
    args = [config.model, *config.cli]
    if config.slider:
        name, key, presses, flag = config.slider
        args += [flag, move_slider(page, name, key, presses)]
    settle(page)
    return args


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_the_controls_give_the_numbers_servesize_plan_prints(page, server, cli, config):
    open_plan(page, server)
    args = drive(page, config)
    assert_same_plan(page, cli("plan", *args))


def test_the_panels_after_the_verdict_are_the_plans_own(page, server, cli, shots):
    open_plan(page, server)
    page.wait_for_function(PANELS, timeout=120_000)
    doc = cli("plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8")
    flips = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#sensRows [data-sens]')]"
                          ".map(r => [r.dataset.sens, r.dataset.flip === '' ? null : Number(r.dataset.flip)]))")
    assert flips == {name: row.get("flip_at") for name, row in doc["sensitivity"].items()}
    frontier = page.locator("#frontierTable tr.current")
    assert frontier.count() == 1 and frontier.get_attribute("data-model") == "qwen3.6-27b"
    assert float(frontier.get_attribute("data-users")) > 0
    page.click("#tiles [data-tile=warm] details.why summary")  # a number's derivation, fetched when opened
    page.wait_for_function("() => document.querySelector('#tiles [data-tile=warm] details.why').dataset.filled")
    assert "warm_users" in page.text_content("#tiles [data-tile=warm] pre.steps")
    page.click("#verdict details.why summary")
    page.wait_for_function("() => document.querySelector('#verdict details.why').dataset.filled")
    assert f"binding = {doc['binding']}" in page.text_content("#explainSteps")
    for chart in "ABCDEFGM":  # M: decode tok/s per user and the effective MFU (charts.py)
        assert page.locator(f"#chart{chart} svg path.series").count() >= 1, f"chart {chart} has no series"
        described = page.get_attribute(f"#chart{chart} svg", "aria-label")   # its values in words, not its axis title
        assert described.endswith(".") and len(re.findall(r"\d[\d,.]*", described)) >= 3, (chart, described)
    # the method section: the engine's derivation steps, a formula then its figures; the FAQ's figures from the plan
    assert page.locator("#method [data-section]").count() >= 6 and page.locator("#faq details").count() >= 3
    decode = page.text_content("#method [data-section=decode]")
    assert "per_user_tok_s_p50 = spec_speedup / (step_s_p50 + step_overhead_s)" in decode
    assert "step_s_p50 = max(weights_s_p50, gemm_s_p50) + max(memory_s_p50 - weights_s_p50, compute_s_p50 - gemm_s_p50)" \
        in decode
    ceiling = page.text_content("#method [data-section=decode] [data-name=decode_ceiling] .figures")
    assert ceiling.endswith(f"= {doc['decode']['ceiling_per_replica']:,}")
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(shots / "plan.png"))
    page.evaluate("() => document.documentElement.classList.add('capture')")
    page.screenshot(path=str(shots / "plan-full.png"), full_page=True)
    page.evaluate("() => document.documentElement.classList.remove('capture')")
    page.click("#themeBtn")
    assert page.evaluate("() => document.documentElement.dataset.theme") in ("dark", "light")
    if page.evaluate("() => document.documentElement.dataset.theme") != "dark":
        page.click("#themeBtn")
    page.screenshot(path=str(shots / "plan-dark.png"))


OVER = """() => ({tiles: [...document.querySelectorAll('#tiles .tile.st-over')].map(t => t.dataset.tile),
  limits: [...document.querySelectorAll('#verdict .v-limit')].map(p => [p.dataset.limit, p.textContent])})"""


@pytest.mark.parametrize("load", [{}, {"load_users": "120"}], ids=["binding-load", "120-users"])
def test_no_tile_is_over_its_limit_while_the_verdict_is_silent(page, server, cli, load):
    """At medians 31k, 60k, 140k and 250k (and 250k under a 9 s budget, where a miss is over it): every tile marked
    over has the verdict's sentence for its limit, and the verdict names no limit a tile does not show over. At 250k
    a lone cold request is over the default 10 s budget too (its prefill at the H200's measured FP8 share)."""
    extra = "".join(f"&{k}={v}" for k, v in load.items())
    for median, budget, over_expected in (("31k", None, False), ("60k", None, False), ("140k", None, False),
                                          ("250k", None, True), ("250k", "9", True)):
        tight = "" if budget is None else f"&ttft_limit={budget}"
        open_plan(page, server, f"#view=plan&model=qwen3.6-27b&gpus=1xH200&quantization=fp8&kv_cache_dtype=fp8"
                                f"&median={median}{tight}{extra}")
        got = page.evaluate(OVER)
        limit_of = {"decode": "decode", "aggregate": "decode", "ttft_miss": "ttft_miss", "burst": "burst"}
        assert {limit_of[t] for t in got["tiles"]} == {name for name, _ in got["limits"]}, (median, got)
        if not load:
            doc = cli("plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--median", median,
                      *(() if budget is None else ("--ttft-limit", budget)))
            over = [t for t in ("ttft_miss", "burst") if t in got["tiles"]]
            assert bool(over) == over_expected, (median, budget, got)   # the seed's deployment, as planned today
            assert len(doc["limits_over"]) == len(got["limits"])


def test_the_engine_check_gives_the_users_plan_engine_check_prints_and_can_be_cancelled(page, server, seed_checked, shots):
    """The engine check runs the simulator on the page's settings: its users are those `servesize plan
    --engine-check` prints, with the command beside them; a long one shows the simulator's stage and Cancel ends it."""
    open_plan(page, server)
    page.click("#engineCheckRun")
    page.wait_for_function("() => document.querySelector('#engineCheckResult').dataset.agree", timeout=300_000)
    check = seed_checked.engine_check  # what `plan --engine-check` runs (tests/conftest.py)
    result = page.locator("#engineCheckResult")
    assert int(result.get_attribute("data-engine-users")) == check["engine_users"]
    assert result.get_attribute("data-agree") == str(check["agree"]).lower()
    assert result.text_content().startswith(seed_checked.engine_check_text())
    assert page.text_content("#engineCheckCommand").endswith("--engine-check")
    assert page.is_enabled("#engineCheckRun") and page.is_hidden("#engineCheckProgress")
    page.locator("#engineCheck").screenshot(path=str(shots / "engine-check.png"))
    # a MoE model on a chat workload holds hundreds of users: a check long enough to cancel
    open_plan(page, server, "#view=plan&model=qwen3.6-35b-a3b&gpus=1xH200&preset=chat")
    assert page.text_content("#engineCheckResult") == ""   # a new plan's verdict carries no old check
    page.click("#engineCheckRun")
    page.wait_for_function("() => (document.querySelector('#engineCheckProgress').dataset.stages || '0') !== '0'",
                           timeout=120_000)
    assert "engine simulator: " in page.text_content("#engineCheckProgress")
    page.click("#engineCheckProgress .cancel")
    assert page.text_content("#engineCheckProgress").startswith("cancelled")
    page.wait_for_function("() => !document.querySelector('#engineCheckRun').disabled")
    assert page.text_content("#engineCheckResult") == ""


def test_the_ranking_flags_a_model_whose_context_is_shorter_than_the_median(page, server):
    open_plan(page, server)
    page.wait_for_function(PANELS, timeout=120_000)
    phi = page.locator("#frontierTable tr[data-model='phi-4']")
    assert phi.count() >= 1 and phi.first.get_attribute("data-short") == "true"
    assert "16.4k" in phi.first.text_content() and "cannot hold this workload" in phi.first.text_content()
    flags = page.evaluate("() => [...document.querySelectorAll('#frontierTable tbody tr')].map(r => r.dataset.short)")
    assert flags == sorted(flags), "rows that can hold the workload first, the flagged ones after them"


def test_cpu_offload_shows_the_users_in_gpu_kv_and_in_host_ram_and_the_restore_per_turn(page, server, cli, shots):
    doc = cli("plan", "llama-3.1-8b", "--gpus", "2xH100-SXM", "-tp", "2", "--cpu-offload-gib", "256")
    o = doc["offload"]
    open_plan(page, server, "#view=plan&model=llama-3.1-8b&gpus=2xH100-SXM&tensor_parallel_size=2&cpu_offload_gib=256")
    line = page.text_content("#verdictOffload")
    assert line == "CPU offload: " + o["text"]
    ram, gpu = (f"{o[k]['p5']:,.0f}" for k in ("users_in_host_ram", "users_in_gpu_kv"))
    users = f"{o['users_in_host_ram']['p5'] + o['users_in_gpu_kv']['p5']:,.0f}"
    assert f"{gpu} have their session in GPU KV and {ram} in host RAM only" in line
    restore = f"{o['restore_s_per_turn']:.3f} s"
    assert f"{restore} for the median session" in line and "2 x PCIe Gen5 x16" in line
    split_tile = page.locator("#tiles [data-tile='offload_split']")
    assert float(split_tile.get_attribute("data-value")) == o["users_in_host_ram"]["p5"]
    assert split_tile.locator(".tv").text_content() == f"{ram} of {users}"
    assert f"{gpu} in GPU KV" in split_tile.locator(".ts").text_content()
    restore_tile = page.locator("#tiles [data-tile='restore']")
    assert float(restore_tile.get_attribute("data-value")) == o["restore_s_per_turn"]
    assert restore_tile.locator(".tv").text_content() == restore
    page.locator("#verdict").screenshot(path=str(shots / "plan-offload.png"))


def test_the_glossary_is_drawn_and_on_this_page_moves_to_a_section_without_touching_the_share_link(page, server):
    open_plan(page, server, "#view=plan&model=qwen3-8b&gpus=1xH100-SXM")
    terms = page.evaluate("() => [...document.querySelectorAll('#glossaryList dt')].map(d => d.textContent)")
    assert "Model FLOP utilisation (MFU)" in terms and "Cold-burst tolerance (B*)" in terms
    hash_before = page.evaluate("() => location.hash")
    page.click("#onThisPage a[href='#glossary']")
    assert page.evaluate("() => document.activeElement.id") == "glossary"
    assert page.evaluate("() => location.hash") == hash_before   # the hash is the share link's state
    assert page.get_attribute("#verdict", "data-state") == "full"
    links = page.evaluate("() => [...document.querySelectorAll('#onThisPage a')].map(a => a.getAttribute('href'))")
    assert all(page.locator(href).count() == 1 for href in links)


def test_a_dragged_slider_gets_a_draft_then_the_full_answer(page, server):
    open_plan(page, server)
    page.evaluate("""() => { const r = document.querySelector('#r-median'); r.value = String(+r.value + 40);
                              r.dispatchEvent(new Event('input')); }""")
    page.wait_for_function("() => document.querySelector('#verdict').dataset.state === 'draft'", timeout=60_000)
    assert "draft" in page.text_content("#verdict .v-title")
    page.evaluate("() => document.querySelector('#r-median').dispatchEvent(new Event('change'))")
    settle(page, "full")


def test_a_change_shows_the_old_and_new_headline_and_the_ceilings_that_moved(page, server, cli):
    open_plan(page, server)
    assert page.query_selector("#verdictBefore") is None   # nothing changed yet: no before/after line
    before = shown(page)
    doc = cli("plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "auto")
    choose(page, "kv_cache_dtype", "auto")
    settle(page)
    line = page.locator("#verdictBefore")
    old_head = f"{before['users']:,.0f} users, {before['binding']} binds first"
    new_head = f"{doc['ceilings'][doc['binding']]:,.0f} users, {doc['binding']} binds first"
    assert line.text_content().startswith(f"Before this change: {old_head}. Now: {new_head}. ")
    moved = [c for c in before["ceilings"] if f"{before['ceilings'][c]:,.0f}" != f"{doc['ceilings'][c]:,.0f}"]
    assert moved, "fp16 KV halves the pool: the cache ceiling at least moves"
    assert line.get_attribute("data-moved") == ",".join(moved)
    for c in moved:
        assert f"{c} {before['ceilings'][c]:,.0f} → {doc['ceilings'][c]:,.0f} users" in line.text_content()
    page.wait_for_function(PANELS, timeout=120_000)   # the sensitivity panel brings the seed's answer, on its own line
    seed = page.text_content("#verdictSeed")   # "If ..., as the warm-capacity study assumes: N users (X binds)."
    assert doc["verdict"] == page.text_content("#verdictSentence") + "; " + seed[0].lower() + seed[1:-1]
    assert page.locator("#verdictBefore").count() == 1   # the before/after line stays until the next change


def test_the_seed_values_preset_reproduces_the_seeds_headline(page, server):
    open_plan(page, server)
    page.evaluate("() => document.querySelectorAll('details.fold').forEach(d => { d.open = true; })")
    page.click("button:text-is(\"the warm-capacity seed's values\")")
    settle(page)
    warm = page.get_attribute("#tiles [data-tile='warm']", "data-value")
    assert float(warm) == pytest.approx(69, abs=2)   # seed 000: 69 warm users p5 (86 p50) at the 31k median


def test_a_share_link_comes_back_to_the_same_numbers(page, browser, server):
    open_plan(page, server)
    drive(page, CONFIGS[3])
    type_into(page, "load_users", "90")
    settle(page)
    before = shown(page)
    page.click("#shareBtn")
    link = page.input_value("#shareLink")
    assert link.startswith(server) and "model=llama-3.1-70b" in link and "load_users=90" in link
    assert "ttft_limit" not in link  # only what differs from the defaults
    other = browser.new_page()
    try:
        other.goto(link)
        other.wait_for_selector("#verdict[data-seq]:not([data-seq='0'])", timeout=60_000)
        settle(other)
        assert shown(other) == before
        assert other.input_value("#f-max_model_len") == "64k" and other.input_value("#f-load_users") == "90"
    finally:
        other.close()


def test_a_bad_value_is_refused_beside_its_control(page, server, shots):
    open_plan(page, server)
    type_into(page, "max_model_len", "0")
    settle(page, "error")
    assert "--max-model-len 0 is out of range" in page.text_content("#view-plan [data-err-for='max_model_len']")
    page.screenshot(path=str(shots / "plan-error.png"))
    type_into(page, "max_model_len", "")
    settle(page, "full")
    assert page.text_content("#view-plan [data-err-for='max_model_len']") == ""
    type_into(page, "median", "lots")
    settle(page, "error")
    assert "--median 'lots' is not a token count" in page.text_content("#view-plan [data-err-for='median']")
    type_into(page, "median", "")
    type_into(page, "max_model_len", "16K")  # bf16 70B on 2xH100 starts at 16K, not at its own 131k context
    type_into(page, "model", "llama-3.1-70b")
    choose(page, "quantization", "")
    set_gpus(page, "H100-SXM", 1)
    settle(page, "error")
    assert "does not fit" in page.text_content("#view-plan [data-err-for='split']")
    assert page.locator("#seg-split button.nofit").count() == 1
    split(page, 1, 1)   # a split the visitor picks is sent as it is: DP 1 x TP 1 on one GPU does not fit
    settle(page, "error")
    # two GPUs and no split picked: the server chooses, as plan --gpus 2xH100 does, the one that fits (TP 2);
    # DP 2 x TP 1 does not fit either, and is disabled
    set_gpus(page, "H100-SXM", 2)
    settle(page, "full")
    assert page.get_attribute("#seg-split button[data-dp='1'][data-tp='2']", "aria-pressed") == "true"
    assert page.is_disabled("#seg-split button[data-dp='2'][data-tp='1']")


def test_a_share_link_is_validated_when_it_is_opened(page, server):
    page.goto(server + "#view=plan&model=qwen3.6-27b&gpus=1xH200&sigma=9")
    page.wait_for_selector("#verdict[data-seq]:not([data-seq='0'])", timeout=60_000)
    settle(page, "error")
    assert "--sigma 9 is out of range" in page.text_content("#view-plan [data-err-for='sigma']")
    page.goto(server + "#view=plan&model=qwen3.6-27b&gpus=1xH200&sigma=0.7")  # a link pasted into the same tab
    settle(page, "full")
    assert page.input_value("#f-sigma") == "0.7" and page.text_content("#view-plan [data-err-for='sigma']") == ""


def test_an_uploaded_config_json_is_planned(page, server, cli, tmp_path):
    open_plan(page, server)
    set_gpus(page, "H100-SXM", 1)
    choose(page, "quantization", "")
    choose(page, "kv_cache_dtype", "")
    page.set_input_files("#f-model-file", str(QWEN3_8B))
    # the page reads the file asynchronously: until it has, the previous plan is the settled one
    page.wait_for_function("() => document.querySelector('#model-about').textContent.includes('uploaded config.json')",
                           timeout=60_000)
    settle(page)
    assert_same_plan(page, cli("plan", str(QWEN3_8B), "--gpus", "1xH100-SXM"), model_named=False)
    tested = cli("plan", *predicted_by_the_test_command(page, tmp_path))  # the command names the config it saves
    assert tested["ceilings"] == shown(page)["ceilings"]
    page.click("#shareBtn")
    assert "not in the link" in page.text_content("#shareNote")


def test_an_uploaded_workload_with_its_replies_spread_is_planned_as_the_command_line_plans_it(page, server, cli, tmp_path):
    """A workload fitted from a trace carries its replies' spread (Workload.output_spread), which the decode floor is
    judged over; uploaded on the page it gives the plan `plan --workload` gives."""
    path = tmp_path / "tiny.json"
    cli("workload", "fit", str(TINY_TRACE), "--out", str(path))
    spread = json.loads(path.read_text())["output_spread"]
    assert spread and len(spread) == 10
    open_plan(page, server, "#view=plan&model=llama-3.1-8b&gpus=1xH100-SXM")
    page.set_input_files("#f-workload-file", str(path))
    page.wait_for_function("() => document.querySelector('#view-plan').textContent.includes('an uploaded workload')",
                           timeout=60_000)
    settle(page)
    doc = cli("plan", "llama-3.1-8b", "--gpus", "1xH100-SXM", "--workload", str(path))
    assert_same_plan(page, doc)
    # the spread reached the page: without it the decode ceiling differs
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "output_spread"}))
    assert cli("plan", "llama-3.1-8b", "--gpus", "1xH100-SXM", "--workload", str(bare))["ceilings"] != doc["ceilings"]


def predicted_by_the_test_command(page, folder: pathlib.Path) -> list[str]:
    """The `servesize plan` arguments of the prediction the page's measure command makes: its --predict
    words and its --workload, with every file it names downloaded from the page into ``folder``."""
    command = shlex.split(page.text_content("#testCommand"))
    assert command[:3] == ["servesize", "measure", "server"]
    args = [*shlex.split(command[command.index("--predict") + 1]), "--workload", command[command.index("--workload") + 1]]
    for i, word in enumerate(args):
        if page.query_selector(f"button[data-file='{word}']") is not None:
            with page.expect_download() as download:
                page.click(f"button[data-file='{word}']")
            download.value.save_as(folder / word)
            args[i] = str(folder / word)
    return args


def test_the_predictions_come_with_the_command_that_tests_them(page, server, cli, tmp_path):
    open_plan(page, server)
    type_into(page, "median", "45k")
    settle(page)
    doc = cli("plan", *predicted_by_the_test_command(page, tmp_path))
    assert_same_plan(page, doc)
    with page.expect_download() as download:
        page.click("button[data-file='servesize-test.json']")
    test_file = json.loads(pathlib.Path(download.value.path()).read_text())
    assert test_file["command"] == page.text_content("#testCommand")
    claims = {h["id"]: h for h in test_file["hypotheses"]}
    assert claims["pool"]["predicted"] == doc["pool_tokens"] and claims["binding"]["predicted"] == doc["ceilings"][doc["binding"]]
    assert all(h["refuted_if"] and h["measured_by"] for h in test_file["hypotheses"])


def test_a_pasted_vllm_log_recalibrates_the_pool(page, server, cli, tmp_path):
    entry = next(x for x in json.loads((FIXTURES / "vllm-logs-public.json").read_text())
                 if x["id"] == "vllm-17327-qwen3-30b-a3b-4xa10")
    log = tmp_path / "server.log"
    log.write_text("\n".join(entry["quotes"]) + "\n")
    page.goto(server + "#view=plan&model=qwen3-30b-a3b&gpus=4xA10&tensor_parallel_size=4&max_model_len=8192"
                       "&vllm_version=0.8.5&median=3000&prefix=1500&subagent_median=2000&subagent_prefix=500")
    page.wait_for_selector("#verdict[data-seq]:not([data-seq='0'])", timeout=60_000)
    settle(page)
    page.fill("#logText", log.read_text())
    page.click("#calibrateBtn")
    page.wait_for_selector("#calibrateTable")
    page.wait_for_function("() => document.querySelector('#tiles [data-tile=pool] .ts').textContent.length > 0")
    settle(page)
    calibration = tmp_path / "calibration.json"
    cli("calibrate", "--vllm-log", str(log), "--model", "qwen3-30b-a3b", "--out", str(calibration))  # the page's model
    doc = cli("plan", "qwen3-30b-a3b", "--gpus", "4xA10", "-tp", "4", "--max-model-len", "8192", "--vllm-version", "0.8.5",
              "--median", "3000", "--prefix", "1500", "--subagent-median", "2000", "--subagent-prefix", "500",
              "--calibration", str(calibration))
    assert shown(page)["tiles"]["pool"] == doc["pool_tokens"]
    assert shown(page)["ceilings"] == doc["ceilings"]
    # the command that tests these predictions carries the calibration too, as the file calibrate --out writes
    args = predicted_by_the_test_command(page, tmp_path)
    assert "--calibration" in args
    assert cli("plan", *args)["ceilings"] == doc["ceilings"]


def test_a_pasted_hybrid_log_is_applied_and_the_verdict_moves(page, server, cli, tmp_path, shots):
    """vllm#40691 (Qwen3.5-27B on an H20, vLLM 0.19.0, before the 0.20.1 token line): the page gives the KV-cache
    groups and block size its own flags make, applies the calibration, and plans what calibrate with those
    flags and plan --calibration print; the compared figures are in the units people read."""
    entry = next(x for x in json.loads((FIXTURES / "vllm-logs-public.json").read_text())
                 if x["id"] == "vllm-40691-qwen35-27b-h20")
    log = tmp_path / "server.log"
    log.write_text("\n".join(entry["quotes"]) + "\n")
    flags = ["--gpus", "1xH20", "--max-model-len", "32768", "--max-num-batched-tokens", "16384", "--max-num-seqs", "16",
             "--vllm-version", "0.19.0"]
    open_plan(page, server, "#view=plan&model=qwen3.5-27b&gpus=1xH20&max_model_len=32768&max_num_batched_tokens=16384"
                            "&max_num_seqs=16&vllm_version=0.19.0")
    before = shown(page)
    page.fill("#logText", log.read_text())
    page.click("#calibrateBtn")
    page.wait_for_selector("#calibrateApplied")
    page.wait_for_function("v => document.querySelector('#tiles [data-tile=pool]').dataset.value !== v",
                           arg=str(before["tiles"]["pool"]), timeout=60_000)
    settle(page)
    memory = cli("memory", "qwen3.5-27b", *flags)
    calibration = tmp_path / "calibration.json"
    cli("calibrate", "--vllm-log", str(log), "--model", "qwen3.5-27b", "--block-size", str(memory["pool"]["block_size"]),
        "--kv-cache-groups", str(len(memory["pool"]["groups"])), "--out", str(calibration))
    doc = cli("plan", "qwen3.5-27b", *flags, "--calibration", str(calibration))
    after = shown(page)
    assert after["tiles"]["pool"] == doc["pool_tokens"] != before["tiles"]["pool"]
    assert after["ceilings"] == doc["ceilings"] and after["ceilings"]["cache"] > before["ceilings"]["cache"]
    assert "cache" in page.get_attribute("#verdictBefore", "data-moved").split(",")   # the verdict says it moved
    assert page.text_content("#calibrateApplied").startswith("applied")
    assert page.input_value("#hint-kv_cache_groups") == str(len(memory["pool"]["groups"]))
    table = page.text_content("#calibrateTable")
    assert " B " not in table and "blocks" in table
    page.locator("#calibrateOut").screenshot(path=str(shots / "plan-calibrate.png"))
    # a control changed by hand wins over the page's flags: one KV-cache group is another model's, so nothing is applied
    page.click("#logHints summary")
    page.fill("#hint-kv_cache_groups", "1")
    page.dispatch_event("#hint-kv_cache_groups", "change")
    page.click("#recalibrateBtn")
    page.wait_for_function("() => document.querySelector('#calibrateApplied').textContent.startsWith('not applied')")
    page.wait_for_function("v => document.querySelector('#tiles [data-tile=pool]').dataset.value === v",
                           arg=str(before["tiles"]["pool"]), timeout=60_000)
    settle(page)
    assert page.input_value("#hint-kv_cache_groups") == "1"
    assert "as you gave it" in page.text_content("#logHints") and "--" not in page.text_content("#calibrateApplied")
    assert shown(page)["ceilings"] == before["ceilings"]
    # the calibrate controls, the method section and the FAQ open: axe-core finds nothing serious there either
    from test_explorer_visitor import AUDIT, AXE

    page.wait_for_function(PANELS, timeout=120_000)
    assert page.locator("#method details").count() >= 6
    for section in page.locator("#method details, #faq details").all():
        section.evaluate("d => { d.open = true; }")
    page.evaluate(AXE.read_text() + "\n;void 0")
    assert page.evaluate(AUDIT) == []


def test_a_measure_record_brings_the_measured_pool_back(page, server, cli, tmp_path):
    record = tmp_path / "pool.jsonl"
    record.write_text("\n".join(json.dumps(x) for x in (
        {"type": "header", "kind": "pool", "version": 1, "params": {"prompt_tokens": 4097}},
        {"type": "end", "result": {"pool_tokens": {"low": 2_400_000, "high": 2_500_000, "measured": 2_450_000}}})) + "\n")
    open_plan(page, server)
    page.set_input_files("#recordFile", str(record))
    page.wait_for_selector("#recordVerdict")
    assert "KV pool tokens" in page.text_content("#recordVerdict")
    page.click("#applyRecord")
    page.wait_for_function("() => Number(document.querySelector('#tiles [data-tile=pool]').dataset.value) === 2450000")
    settle(page)
    doc = cli("plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--pool-tokens", "2450000")
    assert shown(page)["ceilings"] == doc["ceilings"]


def fit_rows(page) -> set:
    return {tuple(r) for r in page.evaluate("""() => [...document.querySelectorAll('#fitRows tbody tr')].map(r =>
        [r.dataset.model, r.dataset.precision, Number(r.dataset.tp), Number(r.dataset.replicas), Number(r.dataset.concurrent)])""")}


def cli_rows(doc: dict) -> set:
    return {(p["model"], p["precision"], p["tp"], p["replicas"], p["concurrent_per_replica"]) for p in doc["placements"]}


def test_the_fit_view_gives_the_rows_servesize_fit_prints(page, server, cli, shots):
    page.goto(server + "#view=fit")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    set_gpus(page, "H100-SXM", 4, "fit-")
    type_into(page, "max_model_len", "32768", "fit-")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    assert page.get_attribute("#fitTable", "data-state") == "full"
    assert fit_rows(page) == cli_rows(cli("fit", "--gpus", "4xH100-SXM", "--max-model-len", "32768"))
    page.screenshot(path=str(shots / "fit.png"))
    page.screenshot(path=str(shots / "fit-full.png"), full_page=True)
    page.click("#fitRows th[data-sort='concurrent_total']")
    totals = page.evaluate("() => [...document.querySelectorAll('#fitRows tbody tr')].map(r => Number(r.dataset.total))")
    assert totals == sorted(totals, reverse=True)
    row = page.locator("#fitRows tbody tr[data-model='llama-3.1-70b']").first
    row.locator("button", has_text="why").click()
    page.wait_for_selector("#fitCellSteps")
    assert "max_concurrency" in page.text_content("#fitCellSteps")
    assert f"→ {row.get_attribute('data-concurrent')} sequences" in page.text_content("#fitCellTitle")
    tp, replicas, weights = (row.get_attribute(f"data-{k}") for k in ("tp", "replicas", "quantization"))
    row.locator("button", has_text="plan it").click()
    settle(page)
    opened = ["llama-3.1-70b", "--gpus", "4xH100-SXM", "-q", weights, "-tp", tp, "-dp", replicas]
    assert_same_plan(page, cli("plan", *opened))
    type_into(page, "median", "45k")  # the plan's controls drive the deployment the row opened
    settle(page)
    assert_same_plan(page, cli("plan", *opened, "--median", "45k"))


def test_the_fit_view_says_what_the_calculator_page_reads_differently_and_switches_to_it(page, server, cli):
    """gpt-oss-120b on 4 x H100: 64 sequences at its own MXFP4 on one GPU per replica here, 241 on TP 4 on the
    calculator page (bf16, simple budget); the fit says which assumption differs and switches in one click (#29)."""
    page.goto(server + "#view=fit&gpus=4xH100-SXM")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    assert "each model at its checkpoint's own precision" in page.text_content("#fitAssumes")
    page.click("#fitCalculator")
    page.wait_for_function("() => document.querySelector('#fitAssumes').textContent.includes('weights at bf16')",
                           timeout=60_000)
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    doc = cli("fit", "--gpus", "4xH100-SXM", "--precision", "bf16", "--budget", "simple")
    (ref,) = [p for p in doc["placements"] if p["model"] == "gpt-oss-120b"]
    row = page.locator("#fitRows tbody tr[data-model='gpt-oss-120b']").first
    assert (row.get_attribute("data-precision"), int(row.get_attribute("data-total"))) == ("bf16", ref["concurrent_total"])
    assert "budget=simple" in page.url and "precision=bf16" in page.url   # the switch is in the share link too
    page.click("#fitCalculator")   # and back
    page.wait_for_function("() => document.querySelector('#fitAssumes').textContent.includes(\"checkpoint's own\")",
                           timeout=60_000)


def test_the_fit_view_labels_per_gpu_columns_and_shows_the_whole_models_weights(page, server, cli):
    page.goto(server + "#view=fit&gpus=4xH100-SXM&max_model_len=32768")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    heads = page.evaluate("() => [...document.querySelectorAll('#fitRows thead th[data-sort]')].map(t => t.textContent)")
    assert {"weights, whole model", "weights per GPU", "KV per sequence, per GPU",
            "sequences of 32,768 tokens, per replica"} <= set(heads)   # the unit: sequences at the fit's context
    assert heads[:2] == ["model", "sequences of 32,768 tokens, per replica"]   # the answer first
    doc = cli("fit", "--gpus", "4xH100-SXM", "--max-model-len", "32768")
    (ref,) = [p for p in doc["placements"] if p["model"] == "llama-3.3-70b"]
    row = page.locator("#fitRows tbody tr[data-model='llama-3.3-70b']").first
    whole = row.locator("td[data-col='weights_bytes']").text_content()
    per_gpu = row.locator("td[data-col='weights_bytes_per_gpu']").text_content()
    assert whole == f"{ref['weights_bytes'] / 2**30:,.2f} GiB" and per_gpu == f"{ref['weights_bytes_per_gpu'] / 2**30:,.2f} GiB"
    assert float(whole.split()[0]) == pytest.approx(131.4, abs=0.1)   # seed 002's Llama 3.3 70B: 131.4 GiB of weights


def test_under_the_simple_budget_the_fit_states_the_utilisation_its_figures_use(page, server):
    page.goto(server + "#view=fit&gpus=1xH100-SXM&budget=simple")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    assert page.text_content("#fitv-gpu_memory_utilization") == "now 0.9"
    page.goto(server + "#view=fit&gpus=1xH100-SXM")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    assert page.text_content("#fitv-gpu_memory_utilization") == "now 0.92"   # the engine's default for the release


def test_a_checkpoint_served_as_it_is_opens_as_native(page, server, cli):
    page.goto(server + "#view=fit&gpus=1xH100")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    row = page.locator("#fitRows tbody tr[data-model='gpt-oss-20b']").first
    assert row.get_attribute("data-precision").startswith("native")
    row.locator("button", has_text="why").click()
    page.wait_for_selector("#fitCellSteps")
    assert f"→ {row.get_attribute('data-concurrent')} sequences" in page.text_content("#fitCellTitle")
    row.locator("button", has_text="plan it").click()
    settle(page)
    assert_same_plan(page, cli("plan", "gpt-oss-20b", "--gpus", "1xH100", "-tp", row.get_attribute("data-tp")))


def test_the_fit_view_filters_by_precision_and_kv_dtype(page, server, cli):
    page.goto(server + "#view=fit&gpus=1xH200")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    for precision in ("fp8", "int4"):
        page.check(f"[data-field='precision'] input[value='{precision}']")
    choose(page, "kv_cache_dtype", "fp8", "fit-")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    assert fit_rows(page) == cli_rows(cli("fit", "--gpus", "1xH200", "--precision", "fp8,int4", "--kv-cache-dtype", "fp8"))
    page.reload()
    page.wait_for_function(FIT_SETTLED, timeout=60_000)  # the share link keeps the filters
    assert page.is_checked("[data-field='precision'] input[value='int4']")


def test_nothing_is_requested_outside_the_servers_origin(page, browser, server):
    open_plan(page, server)
    page.wait_for_function(PANELS, timeout=120_000)
    page.click("#tab-fit")
    page.wait_for_function(FIT_SETTLED, timeout=60_000)
    seen = browser.network.seen
    assert seen and all(url.startswith(server) for url in seen), [u for u in seen if not u.startswith(server)]
    assert browser.network.blocked == []


# -- every control, once: the page's Scenario is the command line's ------------------------------------------

TEXTS = {  # a value each text box (and slider's text box) takes, as the command line writes it
    "gpu_memory": "141GiB", "gpu_bandwidth": "4800", "gpu_flops": "990", "gpu_tdp": "700", "users": "20",
    "tensor_parallel_size": "1", "data_parallel_size": "1", "pipeline_parallel_size": "1",
    "gpu_memory_utilization": "0.85", "max_model_len": "64k", "max_num_seqs": "64", "max_num_batched_tokens": "4096",
    "block_size": "32", "kv_cache_memory_bytes": "40GiB", "num_gpu_blocks_override": "1000",
    "speculative_config": '{"method":"mtp","num_speculative_tokens":2}', "num_speculative_tokens": "2",
    "max_loras": "2", "max_lora_rank": "32", "limit_mm_per_prompt": '{"image":0}', "vllm_version": "0.32.0",
    "median": "45k", "sigma": "0.7", "prefix": "10k", "subagent_ratio": "0.2", "subagent_median": "10k",
    "subagent_sigma": "0.8", "subagent_prefix": "2k", "invalidation": "0.02", "think_time": "20",
    "output_tokens": "800", "warm_turn_tokens": "1500", "bandwidth_efficiency": "0.7", "tp_efficiency": "0.9",
    "mtp_speedup": "1.5", "spec_acceptance": "0.6", "decode_floor": "30", "comfortable_floor": "45", "mfu": "0.5",
    "decode_compute_efficiency": "0.4", "ttft_limit": "8", "electricity_price": "0.25", "currency": "USD", "pue": "1.3",
    "cpu_offload_gib": "64", "pool_tokens": "2m", "fills": "300", "draws": "1000", "seed": "3",
}
CHOICES = {"dtype": "bfloat16", "quantization": "fp8", "kv_cache_dtype": "auto", "mamba_ssm_cache_dtype": "float32",
           "mamba_cache_mode": "align", "device": "cpu", "cpu_avx512_bf16": "no", "cpu_amx": "no", "budget": "simple",
           "preset": "chat", "assumptions": "seed", "moe_backend": "marlin"}
# each has a test of its own (TP and DP are set by the split control)
NOT_HERE = {"model", "gpus", "workload", "split", "vllm_serve", "calibration", "tensor_parallel_size",
            "data_parallel_size"}


@pytest.fixture
def sent(page):
    bodies: list[dict] = []
    page.on("request", lambda r: bodies.append(json.loads(r.post_data)) if r.url.endswith("/api/plan")
            and r.method == "POST" else None)
    return bodies


def test_every_control_once_gives_the_scenario_the_command_line_reads(page, server, sent):
    """Each plan control set in turn on one page, cumulatively; after each, the Scenario the server reads from the
    page's request is the one `servesize plan` reads from the same flags: the browser sends only what the visitor
    set, under the declared names, and one declaration reads both (#29)."""
    from servesize.flags import scenario_from_flags
    from servesize.model.hardware import load_gpus
    from servesize.scenario import PARAMS
    from servesize.web.form import form
    from servesize.web.requests import scenario_of

    fields = form(list(load_gpus()))["plan"]["fields"]
    assert {n for n, f in fields.items() if f["widget"] in ("text", "slider")} - NOT_HERE <= set(TEXTS) | {"load_users", "burst"}
    assert {n for n, f in fields.items() if f["widget"] == "select"} == set(CHOICES)
    open_plan(page, server)
    page.evaluate("() => document.querySelectorAll('details.fold').forEach(d => { d.open = true; })")
    flags = ["qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8"]
    checked = 0
    for name, spec in fields.items():
        if name in NOT_HERE:
            continue
        widget = spec["widget"]
        if widget in ("text", "slider"):
            type_into(page, name, TEXTS.get(name) or {"load_users": "30", "burst": "4"}[name])
            value = TEXTS.get(name)
        elif widget == "select":
            choose(page, name, CHOICES[name])
            value = CHOICES[name]
        elif widget == "toggle":
            page.locator(f"#f-{name}").click(force=True)
            value = page.is_checked(f"#f-{name}")
        else:
            raise AssertionError(f"a control the test does not drive: {name} ({widget})")
        page.wait_for_function(SETTLED, timeout=60_000)
        body = {k: v for k, v in sent[-1].items() if k != "draft"}
        if name in PARAMS:   # the page's own load fields (users at load, burst) are not the command line's
            flags += [spec["flag"], value] if widget != "toggle" else [spec["flag"] if value else
                                                                       "--no-" + spec["flag"][2:]]
        scenario, _ = scenario_of({k: v for k, v in body.items() if k in PARAMS})
        assert scenario == scenario_from_flags(shlex.join(flags)), (name, body, flags)
        checked += 1
    assert checked >= 60


def test_prefill_and_decode_apart_shows_every_layout_beside_the_aggregated_plan_as_the_command_line_does(page, server,
                                                                                                          cli, shots):
    """The comparison panel on the seed's deployment over 4 H200s: its rows are every xPyD layout's users and binding
    as `servesize plan --prefill-instances X --decode-instances Y` prints them, beside the aggregated plan."""
    open_plan(page, server, "#view=plan&model=qwen3.6-27b&gpus=4xH200&quantization=fp8&kv_cache_dtype=fp8")
    page.click("#disaggRun")
    page.wait_for_function("() => document.querySelector('#disaggResult').dataset.more", timeout=300_000)
    rows = page.evaluate("() => [...document.querySelectorAll('#disaggTable tbody tr')].map(r => "
                         "[r.dataset.layout, r.dataset.users, r.dataset.aggregated])")
    assert rows[0][2] == "true" and {r[0] for r in rows[1:]} == {"1P3D", "2P2D", "3P1D"}
    for layout, users, _ in rows[1:]:
        x, y = layout[0], layout[2]
        doc = cli("plan", "qwen3.6-27b", "--gpus", "4xH200", "-q", "fp8", "--kv-cache-dtype", "fp8",
                  "--prefill-instances", x, "--decode-instances", y)
        assert users == f"{doc['users']:,.0f}", layout
        if layout == rows[1][0]:  # the best: its line is the CLI's
            assert page.text_content("#disaggComparison") == doc["comparison"]
            assert f"{doc['aggregated']['users']:,.0f}" == rows[0][1]
    assert "--prefill-instances" in page.text_content("#disaggCommand")
    page.locator("#disagg").screenshot(path=str(shots / "disaggregated.png"))


def test_the_moe_backend_select_plans_as_the_command_line_plans_it(page, server, cli):
    """--moe-backend marlin reads gpt-oss-120b's FP4 experts at Marlin's measured rate: chosen on the page, the plan
    is `plan --moe-backend marlin`'s, and not the default kernel's."""
    deployment = ["gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp", "2"]
    open_plan(page, server, "#view=plan&model=gpt-oss-120b&gpus=2xH100-SXM&tensor_parallel_size=2&moe_backend=marlin")
    settle(page)
    doc = cli("plan", *deployment, "--moe-backend", "marlin")
    assert_same_plan(page, doc)
    assert cli("plan", *deployment)["ceilings"] != doc["ceilings"]
