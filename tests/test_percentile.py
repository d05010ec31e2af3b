"""servesize.percentile gives numpy's percentile, quantile and median bit for bit (the one home of those rules:
tests/test_one_home.py fails on a numpy percentile called anywhere else)."""

import math

import numpy as np
import pytest

from servesize.percentile import median, percentile50, percentiles, quantiles, weighted_percentile

QS = (0.0, 1.0, 5.0, 12.5, 50.0, 95.0, 99.0, 99.9, 100.0)


def _arrays():
    rng = np.random.default_rng(11)
    for n in (1, 2, 3, 4, 7, 10, 64, 1001, 4000):
        yield rng.lognormal(3.0, 1.2, n)                    # floats, heavy-tailed
        yield rng.integers(0, 50, n)                        # integers, many ties
        yield np.round(rng.uniform(0.0, 1.0, n), 2)         # floats with ties


@pytest.mark.parametrize("x", list(_arrays()), ids=lambda x: f"{x.dtype}-{x.size}")
def test_each_rule_is_numpys_bit_for_bit(x):
    assert percentiles(x, QS) == tuple(float(v) for v in np.percentile(x, QS))
    fractions = [q / 100 for q in QS] + [(k + 0.5) / 7 for k in range(7)]
    assert quantiles(x, fractions) == tuple(float(v) for v in np.quantile(x, fractions))
    assert median(x) == float(np.median(x))
    assert percentile50(x) == float(np.percentile(x, 50))


@pytest.mark.parametrize("x", [x for x in _arrays() if x.size <= 1001], ids=lambda x: f"list-{x.dtype}-{x.size}")
def test_a_list_of_numbers_is_read_without_numpy_and_gives_the_same(x, monkeypatch):
    """A measurement's workers summarise their requests from lists, and load no numpy for it."""
    expected = tuple(float(v) for v in np.percentile(x, QS))
    import servesize.percentile as module

    monkeypatch.setattr(module, "_at", None)  # the array path would fail: the list path alone answers
    assert percentiles(x.tolist(), QS) == expected


def test_a_nan_anywhere_gives_nan_as_numpy_does():
    assert all(math.isnan(v) for v in percentiles([1.0, float("nan"), 3.0], (5, 50)))
    x = np.array([1.0, np.nan, 3.0, 4.0])
    assert all(math.isnan(v) for v in percentiles(x, (5, 50)))
    assert math.isnan(median(x)) and math.isnan(float(np.median(x)))


def test_no_values_is_numpys_own_answer_or_refusal():
    with pytest.raises(IndexError):
        percentiles(np.array([]), (50,))
    with pytest.warns(RuntimeWarning):
        assert math.isnan(median(np.array([])))


@pytest.mark.parametrize("q", [0.0, 10.0, 50.0, 90.0, 99.0, 100.0])
def test_a_weighted_percentile_is_the_percentile_of_the_values_repeated(q):
    rng = np.random.default_rng(3)
    values = rng.uniform(5.0, 40.0, 30)
    weights = rng.integers(0, 9, 30)
    assert weighted_percentile(values, weights, q) == pytest.approx(float(np.percentile(np.repeat(values, weights), q)),
                                                                    rel=1e-12)
    assert weighted_percentile(values, np.zeros(30, dtype=int), q) == 0.0
