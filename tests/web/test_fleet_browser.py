"""The explorer's fleet view end to end in headless Chromium, against servesize installed from its wheel:
the verdict, the ranked fleets, the frontier, the teams and the recipe are the ones `servesize fleet --json`
prints for the same inputs; the winner opens in the plan view as the plan its confirm command prints; a
share link comes back to the same fleet; a bad value is refused beside its control."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile

import pytest
from test_explorer_browser import assert_same_plan, open_plan, settle, shown, type_into

pytestmark = pytest.mark.browser

FLEET_SETTLED = """() => {
  const v = document.querySelector('#fleetVerdict'), app = window.servesize;
  return app && v.dataset.pending === 'false' && +v.dataset.seq === app.fleetSeq && v.dataset.state !== 'empty';
}"""
GPUS = ("H100-SXM", "H200-SXM", "L40S")


def fleet_settle(page, state: str = "full") -> None:
    page.wait_for_function(FLEET_SETTLED, timeout=120_000)
    got = page.get_attribute("#fleetVerdict", "data-state")
    errors = [e.text_content() for e in page.query_selector_all("#view-fleet .err:not(:empty)")]
    assert got == state, f"the fleet verdict is {got!r}: {page.text_content('#banner')!r} {errors}"


def open_fleet(page, server: str, hash_: str = "", state: str = "full") -> None:
    page.goto(server + "#view=fleet" + hash_)
    page.wait_for_selector("#fleetVerdict[data-seq]:not([data-seq='0'])", timeout=120_000)
    fleet_settle(page, state)


def tick(page, field: str, values) -> None:
    for value in values:
        page.check(f"#view-fleet [data-field='{field}'] input[value='{value}']")


def fleet_shown(page) -> dict:
    """What the fleet view drew, from the data-* attributes it set from the JSON."""
    return page.evaluate("""() => {
      const v = document.querySelector('#fleetVerdict'), rows = s => [...document.querySelectorAll(s)].map(r => ({...r.dataset}));
      return {state: v.dataset.state, users: Number(v.dataset.users), gpus: v.dataset.gpus, cost: Number(v.dataset.cost),
              per_user: Number(v.dataset.perUser), binding: v.dataset.binding,
              options: rows('#fleetOptionRows tbody tr'), frontier: rows('#fleetFrontierRows tbody tr'),
              teams: rows('#fleetTeamRows tbody tr'), partition: rows('#fleetPartitionRows tbody tr'),
              prices: rows('#fleetPriceRows tbody tr'), recipe: document.querySelector('#fleetRecipe').textContent,
              confirm: document.querySelector('#fleetConfirm').textContent,
              verdict: document.querySelector('#teamsVerdict').textContent};
    }""")


def assert_same_fleet(got: dict, doc: dict) -> None:
    w = doc["winner"]
    assert got["users"] == doc["users"]
    assert (got["gpus"], got["cost"], got["per_user"], got["binding"]) == (
        w["gpus"], w["cost_per_month"], w["cost_per_user_month"], w["binding"])
    assert [(r["gpus"], int(r["tp"]), int(r["dp"]), r["model"], r["precision"], r["kv"], float(r["cost"]),
             float(r["users"]), r["binding"]) for r in got["options"]] == [
        (o["gpus"], o["tp"], o["dp"], o["model"], o["precision"], o["kv_cache_dtype"], o["cost_per_month"],
         o["users_served"], o["binding"]) for o in doc["options"]]
    assert [(r["gpus"], float(r["users"]), float(r["cost"])) for r in got["frontier"]] == [
        (o["gpus"], o["users_served"], o["cost_per_month"]) for o in doc["frontier"]]
    assert [(r["gpu"], float(r["price"])) for r in got["prices"]] == [(p["gpu"], p["per_hour"]) for p in doc["prices"]]
    assert got["recipe"] == doc["recipe"]


def test_the_fleet_view_gives_the_fleet_servesize_fleet_prints(page, server, cli, shots):
    open_fleet(page, server)
    tick(page, "gpus_from", GPUS)
    type_into(page, "max_gpus", "24", "fl-")
    type_into(page, "users", "120", "fl-")
    type_into(page, "users", "300", "fl-")  # at once: the newer search supersedes the one still running
    fleet_settle(page)
    ticked = page.evaluate("() => window.servesize.fleet.gpus_from")  # in the catalogue's order, as the boxes are
    assert sorted(ticked.split(",")) == sorted(GPUS)
    doc = cli("fleet", "--users", "300", "--models", "qwen3.6-27b", "--gpus-from", ticked, "--max-gpus", "24")
    got = fleet_shown(page)
    assert_same_fleet(got, doc)
    assert got["confirm"] == doc["plan_command"] and got["teams"] == []
    assert page.locator("#chartFleet svg path.series").count() >= 1
    assert doc["winner"]["gpus"] in page.text_content("#fleetHead")
    assert page.get_attribute("#fleetVerdict", "data-seq") == str(page.evaluate("() => window.servesize.fleetSeq"))
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(shots / "fleet.png"))
    page.evaluate("() => document.documentElement.classList.add('capture')")
    page.screenshot(path=str(shots / "fleet-full.png"), full_page=True)
    page.evaluate("() => document.documentElement.classList.remove('capture')")
    # the winner in the plan view: the plan its confirm command prints
    page.click("#fleetOpenPlan")
    page.wait_for_selector("#view-plan:not([hidden])")
    settle(page)
    confirm = shlex.split(doc["plan_command"])
    assert confirm[:2] == ["servesize", "plan"]
    plan = cli("plan", *confirm[2:])
    assert_same_plan(page, plan)
    assert all(v >= doc["users"] for v in shown(page)["ceilings"].values())


def add_team(page, name: str, users: int, preset: str = "", priority: str = "", pfx: str = "fl-") -> None:
    page.click(f"#{pfx}team-add")
    row = page.locator(f"#{pfx}teams .team-row").last
    row.locator(".team-name").fill(name)
    row.locator(".team-users").fill(str(users))
    if priority:
        row.locator(".team-priority").fill(priority)
    if preset:
        row.locator(".team-preset").select_option(preset)
    else:
        row.locator(".team-users").press("Enter")


def test_teams_share_a_fleet_or_partition_it_as_servesize_fleet_says(page, browser, server, cli, shots):
    open_fleet(page, server)
    tick(page, "gpus_from", ("H200-SXM", "L40S"))
    add_team(page, "agents", 120, "coding-agent")
    add_team(page, "support", 300, "chat", priority="1")
    fleet_settle(page)
    assert page.is_disabled("#fl-users")  # teams replace the one workload's users
    doc = cli("fleet", "--models", "qwen3.6-27b", "--gpus-from", page.evaluate("() => window.servesize.fleet.gpus_from"),
              "--team", "agents=120:coding-agent",
              "--team", "support=300:chat", "--priority", "support=1")
    got = fleet_shown(page)
    assert_same_fleet(got, doc)
    pool = doc["shared_pool"]["teams"]
    assert [(r["team"], int(r["users"]), float(r["warm"]), float(r["alone"]), r["binding"], float(r["ttft"]))
            for r in got["teams"]] == [
        (t["name"], t["users"], t["warm_users"]["p5"], t["warm_users_alone"]["p5"], t["binding"], t["miss_ttft_s"])
        for t in pool]
    assert [(r["team"], r["gpus"]) for r in got["partition"]] == [
        (x["team"], x["option"]["gpus"]) for x in doc["partition"]["cheapest"]]
    assert got["verdict"] == "Verdict: " + doc["verdict"]["text"]
    assert page.get_attribute("#teamsVerdict", "data-choice") == doc["verdict"]["choice"]
    assert page.is_hidden("#fleetOpenPlan")
    page.locator("#fleetTeamsCard").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "fleet-teams.png"))
    # the share link carries the teams, one entry each, and comes back to the same fleet
    page.click("#shareBtn")
    link = page.input_value("#shareLink")
    assert "view=fleet" in link and link.count("team=") == 2 and "priority=support%3D1" in link
    other = browser.new_page()
    try:
        other.goto(link)
        other.wait_for_selector("#fleetVerdict[data-seq]:not([data-seq='0'])", timeout=120_000)
        fleet_settle(other)
        assert fleet_shown(other) == got
        assert other.locator("#fl-teams .team-row").count() == 2
        assert other.input_value("#fl-teams .team-row >> nth=1 >> .team-priority") == "1"
    finally:
        other.close()


def test_a_bad_fleet_value_is_refused_beside_its_control(page, server):
    open_fleet(page, server)
    before = fleet_shown(page)
    type_into(page, "users", "0", "fl-")
    fleet_settle(page, "error")
    assert "--users 0 is out of range" in page.text_content("#view-fleet [data-err-for='users']")
    assert "refused" in page.text_content("#fleetStale")
    type_into(page, "max_gpus", "1000", "fl-")
    type_into(page, "users", "400", "fl-")
    fleet_settle(page, "error")
    assert "more than the explorer searches" in page.text_content("#view-fleet [data-err-for='max_gpus']")
    assert page.text_content("#view-fleet [data-err-for='users']") == ""
    type_into(page, "max_gpus", "", "fl-")
    fleet_settle(page)
    assert fleet_shown(page) == before


TEAMS_SETTLED = """() => {
  const o = document.querySelector('#planTeamsOut'), app = window.servesize;
  return app && o.dataset.pending === 'false' && +o.dataset.seq === app.teamsSeq && o.dataset.state !== 'empty';
}"""
DEPLOYMENT = {"model": "qwen3.6-27b", "gpus": "2xH200-SXM", "data_parallel_size": 2, "quantization": "fp8",
              "kv_cache_dtype": "fp8"}
TEAMS = ["agents=100:coding-agent", "support=200:chat"]


def library_teams(env: dict, scenario: dict, team: list[str], priority: list[str]) -> dict:
    """``servesize.teams(...)`` of the installed wheel (the library call the panel makes; no command prints it)."""
    code = ("import json, sys, servesize as s; a = json.loads(sys.argv[1]); "
            "print(json.dumps(s.teams(s.Scenario(**a['scenario']), a['team'], a['priority']).to_dict()))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps({"scenario": scenario, "team": team, "priority": priority})],
                          env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def plan_teams_shown(page) -> dict:
    return page.evaluate("""() => {
      const v = document.querySelector('#planTeamsVerdict');
      return {rows: [...document.querySelectorAll('#planTeamRows tbody tr')].map(r => ({...r.dataset})),
              choice: v.dataset.choice, shared: v.dataset.shared, partitioned: v.dataset.partitioned, text: v.textContent};
    }""")


def test_the_plan_views_teams_panel_is_servesize_teams_of_the_deployment(page, browser, server, installed_env, shots):
    open_plan(page, server, "#view=plan&" + "&".join(f"{k}={v}" for k, v in DEPLOYMENT.items()))
    add_team(page, "agents", 100, "coding-agent", pfx="pt-")
    add_team(page, "support", 200, "chat", priority="1", pfx="pt-")
    page.locator("#pt-teams .team-row").last.locator(".team-priority").press("Enter")
    page.wait_for_function(TEAMS_SETTLED, timeout=120_000)
    assert page.get_attribute("#planTeamsOut", "data-state") == "full", page.text_content("#planTeamsCard")
    doc = library_teams(installed_env, DEPLOYMENT, TEAMS, ["support=1"])
    got = plan_teams_shown(page)
    assert [(r["team"], int(r["users"]), float(r["warm"]), float(r["alone"]), r["binding"], float(r["ttft"]),
             r["meets"] == "true") for r in got["rows"]] == [
        (t["name"], t["users"], t["warm_users"]["p5"], t["warm_users_alone"]["p5"], t["binding"], t["miss_ttft_s"],
         t["meets_target"]) for t in doc["shared"]["teams"]]
    split = doc["split"]
    assert (got["shared"], got["partitioned"]) == (str(split["shared_replicas"]), str(split["partitioned_replicas"]))
    expected = "share" if split["shared_replicas"] < split["partitioned_replicas"] else \
        "partition" if split["partitioned_replicas"] < split["shared_replicas"] else "either"
    assert got["choice"] == expected
    page.locator("#planTeamsCard").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "plan-teams.png"))
    # a share link carries the teams; a bad priority is refused beside the teams
    page.click("#shareBtn")
    link = page.input_value("#shareLink")
    assert link.count("team=") == 2
    other = browser.new_page()
    try:
        other.goto(link)
        other.wait_for_function(TEAMS_SETTLED, timeout=120_000)
        assert plan_teams_shown(other) == got
    finally:
        other.close()
    page.locator("#pt-teams .team-row").last.locator(".team-name").fill("helpdesk")
    page.locator("#pt-teams .team-row").last.locator(".team-name").press("Enter")
    page.wait_for_function(TEAMS_SETTLED, timeout=120_000)
    assert page.get_attribute("#planTeamsOut", "data-state") == "full"  # the priority follows the renamed team
    page.locator("#pt-teams .team-row").last.locator(".team-users").fill("lots")
    page.locator("#pt-teams .team-row").last.locator(".team-users").press("Enter")
    page.wait_for_function(TEAMS_SETTLED, timeout=120_000)
    assert page.get_attribute("#planTeamsOut", "data-state") == "error"
    assert "not a whole number of users" in page.text_content("#planTeamsCard [data-err-for='team']")


def test_a_long_search_shows_the_servers_stage_and_can_be_cancelled(page, server, shots):
    """Three teams over three GPU types: while it runs, the status line carries the stage the library reported
    (read from GET /api/progress), and Cancel ends it: no spinner left, the page ready for the next search."""
    page.goto(server + "#view=fleet&models=qwen3.6-27b&gpus_from=H100-SXM%2CH200-SXM%2CL40S&team=agents%3D120%3Acoding-agent"
                       "&team=support%3D300%3Achat&team=rag%3D200%3Arag")   # one search, started by the link
    page.wait_for_function("() => (document.querySelector('#fleetProgress').dataset.stages || '0') !== '0'",
                           timeout=120_000)
    line = page.text_content("#fleetProgress")
    assert "fleet:" in line and "s in all" in line, line   # the library's own stage line, then the server's seconds
    page.locator("#fleetProgress").screenshot(path=str(shots / "fleet-progress.png"))
    page.click("#fleetProgress .cancel")
    page.wait_for_function("() => document.querySelector('#fleetVerdict').dataset.pending === 'false'")
    assert page.text_content("#fleetProgress").startswith("cancelled")
    assert page.locator("#fleetProgress .spinner").count() == 0 and page.locator("#fleetProgress .cancel").count() == 0
    page.click("#fl-teams .team-row >> nth=-1 >> .team-remove")   # the next change searches again, to the end
    fleet_settle(page)
    assert page.is_hidden("#fleetProgress")
