"""The explorer as users run it: servesize built into a wheel and installed from it (an editable
install would hide package data that did not ship), `servesize serve --port 0` started from that
install, and Debian's Chromium (never a downloaded browser) driven by Playwright, with every request
that is not to 127.0.0.1 blocked and recorded."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from urllib.parse import urlparse

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
CHROMIUM = pathlib.Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = REPO / "out" / "screenshots"


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="session")
def wheel_site(tmp_path_factory) -> pathlib.Path:
    """servesize built into a wheel (without build isolation: the build tools come from this
    environment, `pip install -e ".[test]"` puts them there) and installed into a folder of its own."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = tmp_path_factory.mktemp("wheels")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if env.get("PYTHONPATH"):  # the build runs in another folder: keep this process's path, made absolute
        env["PYTHONPATH"] = os.pathsep.join(str(pathlib.Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", str(source),
          "-w", str(wheels)], env=env, cwd=source)
    (wheel,) = wheels.glob("servesize-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    static = REPO / "src" / "servesize" / "web" / "static"
    missing = [p.name for p in static.iterdir() if p.is_file() and f"servesize/web/static/{p.name}" not in shipped]
    assert not missing, f"the wheel does not ship {missing}: pyproject.toml [tool.setuptools.package-data]"
    site = tmp_path_factory.mktemp("site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], env=env)
    return site


@pytest.fixture(scope="session")
def installed_env(wheel_site) -> dict:
    """The environment of every servesize process these tests start: the wheel's install first on the
    path, and nothing of the source tree (its dependencies come from this interpreter's environment)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(wheel_site)
    where = _run([sys.executable, "-c", "import servesize; print(servesize.__file__)"], env=env,
                 cwd=tempfile.gettempdir()).stdout.strip()
    assert where.startswith(str(wheel_site)), f"servesize was imported from {where}, not from the wheel"
    return env


@pytest.fixture(scope="session")
def cli(installed_env):
    """Run the installed `servesize ... --json` and return its document."""

    def run(*args: str) -> dict:
        done = _run([sys.executable, "-m", "servesize", *args, "--json"], env=installed_env, cwd=tempfile.gettempdir())
        return json.loads(done.stdout)

    return run


@pytest.fixture(scope="session")
def server(installed_env):
    """`servesize serve --port 0` from the wheel; its printed address."""
    proc = subprocess.Popen([sys.executable, "-m", "servesize", "serve", "--port", "0"], env=installed_env,
                            cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", first[0] if first else "")
    if match is None:
        proc.kill()
        raise AssertionError(f"servesize serve printed no address: {first!r} {proc.stderr.read()[-2000:]}")
    yield match.group(0)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Network:
    """Every request the page made, and those it was stopped from making."""

    def __init__(self, origin: str):
        self.origin = origin
        self.seen: list[str] = []
        self.blocked: list[str] = []

    def route(self, route) -> None:
        url = route.request.url
        self.seen.append(url)
        if urlparse(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


@pytest.fixture(scope="module")
def browser(server, tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: the browser tests need Debian's chromium (scripts/browser-env.sh installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # an environment fault, not a reason to skip: the test extra installs it
        raise AssertionError("playwright is not installed: pip install -e '.[test]'") from exc
    network = Network(server)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=LAUNCH_ARGS, viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        context.route("**/*", network.route)
        context.network = network
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser):
    """A fresh page; after the test, no request outside 127.0.0.1 was attempted and no script failed."""
    network = browser.network
    before = len(network.blocked)
    errors: list[str] = []
    pg = browser.new_page()
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and "status of 400" not in msg.text else None)
    yield pg
    pg.close()
    assert network.blocked[before:] == [], f"the page tried to reach outside 127.0.0.1: {network.blocked[before:]}"
    assert errors == [], f"the page's script failed: {errors}"


@pytest.fixture(scope="session")
def shots() -> pathlib.Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
