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
