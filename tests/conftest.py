import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
# The traces are optional large data outside the clone (public sources: docs/simulate.md);
# this is where the project's workspace keeps them.
TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> pathlib.Path:
    """The published session traces in ../shared/traces: too large to carry in the repository, so the tests
    that replay them skip when they are absent. Every other published fact lives in tests/fixtures/."""
    if not TRACES.is_dir():
        pytest.skip(f"the session traces are absent ({TRACES} not found)")
    return TRACES


@pytest.fixture(scope="session")
def seed_checked():
    """`plan --engine-check` on the seed's deployment (Qwen 3.6 27B FP8, FP8 KV, one H200, the default workload): the
    plan with the engine simulator's users beside it (servesize.api.check_plan, what the CLI, the page and the web
    API run), made once: the README's figures and the page's and the web API's engine checks are each compared with
    it (one check is the engine simulator's users-at-SLO search, tens of seconds)."""
    from servesize.api import check_plan
    from servesize.scenario import Scenario

    return check_plan(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))


@pytest.fixture(autouse=True)
def _working_directory_kept():
    """No test leaves the working directory moved (a later test's relative paths would then depend on the order):
    monkeypatch.chdir restores it; an os.chdir that is not undone fails the test that made it."""
    import os

    before = os.getcwd()
    yield
    after = os.getcwd()
    if after != before:
        os.chdir(before)
        pytest.fail(f"the test moved the working directory to {after} and left it there (use monkeypatch.chdir)")


def pytest_configure(config):
    """The data tables' parsed copies (servesize.datafiles) go to a folder of this run's, never the user's cache;
    the commands the tests start inherit it."""
    import os
    import tempfile

    os.environ.setdefault("SERVESIZE_CACHE_DIR", tempfile.mkdtemp(prefix="servesize-cache-"))
