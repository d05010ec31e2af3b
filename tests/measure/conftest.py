"""The measure tests' shared set-up."""

import gc

import pytest


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """The harness pauses the cyclic garbage collector while requests are in flight and runs a full collection
    between probes and rungs (``servesize.measure.client.collect_between``). A full collection walks every object
    the process holds, and this one holds pytest, hypothesis, Ray and the other test modules: about 60 ms a
    collection here, against a few ms in a ``servesize measure`` process, and the measure tests run over a
    thousand of them (most of their CPU time). So each module's tests start with what is alive then moved out of
    the collector's way (``gc.freeze``): a collection walks only the objects made since, as in the command."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
