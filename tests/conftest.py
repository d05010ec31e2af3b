import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    """../shared reference data (model configs, published logs, traces); skip when absent."""
    if not SHARED.is_dir():
        pytest.skip("../shared reference data not present")
    return SHARED
