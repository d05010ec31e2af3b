"""The explorer as a new visitor meets it, in headless Chromium against the installed wheel: every text
box beside a slider takes what the command line takes ('45k', '16K', '0.02m') and the thumb lands on the
value servesize reads from it; a share link that is refused ends in an error verdict naming the field; the
page fits a phone and a wide screen; a keyboard and a screen reader can use it, and axe-core (vendored,
injected by the test, never loaded by the page) finds no serious or critical violation on any view."""

from __future__ import annotations

import math
import pathlib

import pytest
from test_explorer_browser import PANELS, open_plan, settle, type_into
from test_fleet_browser import FLEET_SETTLED

from servesize.fleet_query import FLEET_PARAMS
from servesize.scenario import FIT_PARAMS, PARAMS
from servesize.web.form import VIEW_PARAMS, form

pytestmark = pytest.mark.browser

AXE = pathlib.Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
FIT_SETTLED = ("() => { const t = document.querySelector('#fitTable'); "
               "return t.dataset.state && t.dataset.pending !== 'true' && +t.dataset.seq === window.servesize.fitSeq; }")
SMALL_FLEET = "#view=fleet&models=qwen3.6-27b&users=50&max_gpus=2&gpus_from=H100-SXM"  # each search is quick
VIEWS = {  # view -> (the link that opens it, the id prefix of its controls, the fields it parses with)
    "plan": ("", "f-", {**PARAMS, **VIEW_PARAMS}),
    "fit": ("#view=fit&gpus=1xH100", "fit-", FIT_PARAMS),
    "fleet": (SMALL_FLEET, "fl-", FLEET_PARAMS),
}
PHONE, DESKTOP = (390, 844), (1920, 1080)


def open_view(page, server: str, view: str) -> None:
    if view == "plan":
        open_plan(page, server)
        return
    page.goto(server + VIEWS[view][0])
    if view == "fit":
        page.wait_for_function(FIT_SETTLED, timeout=60_000)
    else:
        page.wait_for_selector("#fleetVerdict[data-seq]:not([data-seq='0'])", timeout=120_000)
        page.wait_for_function(FLEET_SETTLED, timeout=120_000)


# -- 1. a text box and its slider read a value as the command line does --------------------------------

# texts with each suffix the command line takes; the other fields get a value inside their slider's span
SPELLED = {("plan", "median"): "45k", ("plan", "prefix"): "16K", ("plan", "subagent_median"): "0.02m",
           ("fit", "max_model_len"): "256K", ("fleet", "median"): "2.77m", ("fleet", "prefix"): "8K"}


def cli_text(view: str, spec: dict) -> str:
    if (view, spec["name"]) in SPELLED:
        return SPELLED[(view, spec["name"])]
    s = spec["slider"]
    v = math.sqrt(s["min"] * s["max"]) if s["scale"] == "log" else (s["min"] + s["max"]) / 2
    if spec["kind"] == "tokens":
        return f"{round(v / 1000)}k" if v >= 2000 else str(round(v))
    return str(round(v)) if spec["kind"] == "int" else f"{v:.3g}"


def thumb(slider: dict, value: float) -> int:
    """Where the page puts a value on its 0..1000 track (log or linear over the slider's span, clamped)."""
    lo, hi = slider["min"], slider["max"]
    t = math.log(max(value, lo) / lo) / math.log(hi / lo) if slider["scale"] == "log" else (value - lo) / (hi - lo)
    return math.floor(min(1.0, max(0.0, t)) * 1000 + 0.5)


@pytest.mark.parametrize("view", list(VIEWS))
def test_every_text_box_puts_its_slider_where_the_command_line_reads_the_text(page, server, view):
    link, pfx, params = VIEWS[view]
    fields = form(["H100-SXM"])[view]["fields"]
    pairs = [spec for spec in fields.values() if spec.get("widget") == "slider"]
    assert len(pairs) >= (2 if view == "fit" else 15), [s["name"] for s in pairs]
    open_view(page, server, view)
    page.evaluate(f"() => document.querySelectorAll('#view-{view} details').forEach(d => d.open = true)")
    range_id = "r-" if pfx == "f-" else pfx[:-1] + "r-"
    landed = {}
    for spec in pairs:
        text = cli_text(view, spec)
        expected = params[spec["name"]].parse(text)  # the declaration's own reading: '45k' = 45,000, '16K' = 16,384
        type_into(page, spec["name"], text, pfx)
        slider = f"#{range_id}{spec['name']}"
        page.wait_for_function("([sel, v]) => Number(document.querySelector(sel).dataset.value) === v", arg=[slider, expected],
                               timeout=30_000)
        landed[spec["name"]] = (text, int(page.input_value(slider)), thumb(spec["slider"], expected))
    assert {n: got for n, (_, got, _) in landed.items()} == {n: want for n, (_, _, want) in landed.items()}, landed
    if view == "plan":
        assert landed["median"][:2] == ("45k", thumb(fields["median"]["slider"], 45_000)) and landed["median"][1] > 0
    # the GPU count: its text box and its slider
    if view in ("plan", "fit"):
        type_into(page, "gpus-count", "4", pfx)
        assert page.input_value(f"#{pfx}gpus-range") == "4"


# -- 2. a share link that is refused -----------------------------------------------------------------------

def test_a_refused_share_link_ends_in_an_error_verdict_that_names_the_field(page, server):
    page.goto(server + "#view=plan&model=qwen3.6-27b&gpus=1xH200&sigma=9")
    page.wait_for_selector("#verdict[data-seq]:not([data-seq='0'])", timeout=60_000)
    settle(page, "error")
    verdict = page.text_content("#verdict")
    assert "Computing the verdict" not in verdict
    assert "(sigma)" in page.text_content("#verdictHead") and "--sigma 9 is out of range" in page.text_content("#verdictError")
    assert page.get_attribute("#verdict", "data-field") == "sigma"
    page.click("#verdictGoTo")  # it leads to the control to change
    assert page.evaluate("() => document.activeElement.closest('[data-field]').dataset.field") == "sigma"
    type_into(page, "sigma", "0.7")
    settle(page, "full")
    assert "refused" not in page.text_content("#verdict")


@pytest.mark.parametrize("view, link, box, field, says", [
    ("fleet", "#view=fleet&models=qwen3.6-27b&users=0", "#fleetVerdict", "users", "--users 0 is out of range"),
    ("fit", "#view=fit&gpus=1xH200&max_model_len=0", "#fitTable", "max_model_len", "out of range"),
])
def test_a_refused_share_link_on_the_other_views_ends_in_an_error_never_a_placeholder(page, server, view, link, box,
                                                                                       field, says):
    """The fleet view's "Searching…" and the fit view's empty table are what a link refused on opening once left."""
    page.goto(server + link)
    page.wait_for_function(f"() => document.querySelector('{box}').dataset.state === 'error'", timeout=120_000)
    text = page.text_content(box)
    assert "Searching" not in text and text.startswith("Refused: ") and says in text
    assert page.get_attribute(f"{box} .v-stale", "data-field") == field
    assert says in page.text_content(f"#view-{view} [data-err-for='{field}']")


# -- 3. a phone and a wide screen -------------------------------------------------------------------------

OVERFLOW = """() => {
  const W = document.documentElement.clientWidth, out = [];
  const scrolls = e => { for (let p = e.parentElement; p; p = p.parentElement)
    if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true; return false; };
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (!r.width || e.closest('.sr-only, .skip-link')) continue;
    if ((r.right > W + 0.5 || r.left < -0.5) && !scrolls(e))
      out.push(`${e.tagName}#${e.id}.${e.className} ${Math.round(r.left)}..${Math.round(r.right)}`);
  }
  return {page: document.documentElement.scrollWidth, W, wider: out.slice(0, 20)};
}"""
TOP = "sel => { const r = document.querySelector(sel).getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY]; }"


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["390x844", "1920x1080"])
def test_no_view_is_wider_than_the_screen_and_a_phone_reaches_the_controls_at_once(page, server, shots, size):
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    open_plan(page, server)
    page.wait_for_function(PANELS, timeout=120_000)
    page.evaluate("() => window.scrollTo(0, 0)")
    name = "phone" if size == PHONE else "desktop"
    page.screenshot(path=str(shots / f"plan-{name}.png"))
    if size == PHONE:
        verdict, median = page.evaluate(TOP, "#verdict"), page.evaluate(TOP, "#view-plan [data-field='median']")
        assert verdict[1] <= 1.5 * height and median[1] <= 1.5 * height, (verdict, median)
        for field in ("model", "gpus", "split", "kv_cache_dtype"):  # the controls changed most follow the verdict
            assert page.evaluate(TOP, f"#view-plan [data-field='{field}']")[1] <= 1.5 * height, field
        for tab in ("fit", "plan", "fleet"):   # all three view tabs whole on the screen, none clipped (#29)
            box = page.evaluate(f"() => {{ const r = document.querySelector('#tab-{tab}').getBoundingClientRect(); "
                                "return [r.left, r.right]; }")
            assert 0 <= box[0] and box[1] <= width, (tab, box)
    for view in VIEWS:
        if view != "plan":
            open_view(page, server, view)
            page.screenshot(path=str(shots / f"{view}-{name}.png"))
        got = page.evaluate(OVERFLOW)
        assert got["page"] <= got["W"] and got["wider"] == [], (view, got)
        if view == "fit" and size == PHONE:   # the fit table's model and sequences columns within the screen
            cols = page.evaluate("""() => ['model', 'concurrent_per_replica'].map(k => {
              const r = document.querySelector(`#fitRows tbody tr td[data-col="${k}"]`).getBoundingClientRect();
              return [k, r.left, r.right]; })""")
            assert all(0 <= left and right <= width for _k, left, right in cols), cols


# -- 4. a keyboard, a screen reader, and axe-core ------------------------------------------------------------

def test_a_keyboard_skips_to_the_verdict_and_moves_along_the_tabs(page, server):
    open_plan(page, server)
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "skipLink"
    assert page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle") != "none"  # a visible focus
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "verdict"
    # named controls: the GPU type and count are found by their names, as a screen reader announces them
    assert page.get_by_role("combobox", name="GPUs").get_attribute("id") == "f-gpus-type"
    assert page.get_by_role("textbox", name="GPU count (text)").get_attribute("id") == "f-gpus-count"
    page.focus("#tab-plan")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => document.activeElement.id") == "tab-fleet"
    assert page.is_visible("#view-fleet") and page.get_attribute("#tab-fleet", "aria-selected") == "true"
    assert page.get_attribute("#tab-plan", "tabindex") == "-1" and page.get_attribute("#tab-fleet", "tabindex") == "0"
    page.keyboard.press("ArrowRight")  # wraps to the first
    assert page.evaluate("() => document.activeElement.id") == "tab-fit" and page.is_visible("#view-fit")
    page.keyboard.press("End")
    assert page.evaluate("() => document.activeElement.id") == "tab-fleet"
    page.keyboard.press("Home")
    assert page.evaluate("() => document.activeElement.id") == "tab-fit"
    assert page.get_attribute("#skipLink", "href") == "#fitCaption"
    page.wait_for_function(FIT_SETTLED, timeout=60_000)


AUDIT = """async () => {
  const r = await axe.run(document, { resultTypes: ['violations'] });
  return r.violations.filter(v => ['serious', 'critical'].includes(v.impact))
    .map(v => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', ')}`);
}"""


@pytest.mark.parametrize("view", list(VIEWS))
def test_axe_core_finds_no_serious_or_critical_violation(page, server, view):
    assert AXE.stat().st_size > 100_000, f"{AXE} is missing: tests/web/vendor/axe-core/README.md says where it comes from"
    for (width, height), scheme in ((DESKTOP, "light"), (PHONE, "dark")):
        page.set_viewport_size({"width": width, "height": height})
        page.emulate_media(color_scheme=scheme)
        open_view(page, server, view)
        if view == "plan":
            page.wait_for_function(PANELS, timeout=120_000)
        page.evaluate(AXE.read_text() + "\n;void 0")  # the test injects it (the page's policy allows no inline script)
        assert page.evaluate(AUDIT) == [], (view, width, scheme)


# -- 5. every control reachable by keyboard, and named ------------------------------------------------------

TABBABLE = """() => {
  const sel = 'a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), select:not([disabled]), '
    + 'textarea:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';
  const seen = new Set(), out = [];
  for (const e of document.querySelectorAll(sel)) {
    if (!e.checkVisibility() || e.closest('[inert]') || e.tabIndex < 0) continue;
    if (e.type === 'radio' && !e.checked) continue;   // a radio group is one tab stop
    e.dataset.kw = out.length; out.push(e.id || e.textContent.trim().slice(0, 40) || e.outerHTML.slice(0, 60));
  }
  return out;
}"""
POINTER_ONLY = """() => {
  const focusable = 'a[href], button, input, select, textarea, summary, label, [tabindex]';
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    if (!e.checkVisibility() || getComputedStyle(e).cursor !== 'pointer') continue;
    if (e.matches(focusable) || e.closest(focusable) || e.querySelector(focusable)) continue;
    if (e.parentElement && getComputedStyle(e.parentElement).cursor === 'pointer') continue;   // its parent is judged
    out.push(e.tagName + '#' + e.id + '.' + e.className);
  }
  return out;
}"""
CONTROL_ROLES = {"button", "link", "textbox", "combobox", "checkbox", "slider", "spinbutton", "tab", "radio",
                 "switch", "DisclosureTriangle", "searchbox", "listbox"}


def walk(page, stops: int) -> set:
    """Tab from the top of the page ``stops`` + 5 times; the marked elements the focus reached."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    reached = set()
    for _ in range(stops + 5):
        page.keyboard.press("Tab")
        kw = page.evaluate("() => document.activeElement ? document.activeElement.dataset.kw : undefined")
        if kw is not None:
            reached.add(int(kw))
    return reached


def named_controls(page) -> list[tuple[str, str]]:
    """(role, accessible name) of every control the browser's accessibility tree shows: Chromium's own names."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    finally:
        cdp.detach()
    return [(n["role"]["value"], (n.get("name") or {}).get("value", "").strip()) for n in nodes
            if not n.get("ignored") and n.get("role", {}).get("value") in CONTROL_ROLES]


@pytest.mark.parametrize("view", list(VIEWS))
def test_every_control_is_reached_by_the_keyboard_and_named_once(page, server, view):
    """Every visible control of the view is a tab stop the keyboard reaches; nothing answers a pointer alone; and no
    two controls share an accessible name (as Chromium computes it), so a screen reader says which "why" or which
    model a button acts on (#29)."""
    page.set_viewport_size({"width": DESKTOP[0], "height": DESKTOP[1]})
    open_view(page, server, view)
    if view == "plan":
        page.wait_for_function(PANELS, timeout=120_000)
    stops = page.evaluate(TABBABLE)
    missed = sorted(set(range(len(stops))) - walk(page, len(stops)))
    assert missed == [], (view, [stops[i] for i in missed][:20])
    assert page.evaluate(POINTER_ONLY) == [], view
    controls = named_controls(page)
    unnamed = [c for c in controls if not c[1]]
    assert unnamed == [], (view, unnamed[:10])
    names = [name for _role, name in controls]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert twice == [], (view, twice[:20])
