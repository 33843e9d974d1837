import pytest
import statkit


def test_mean():
    assert statkit.mean([1, 2, 3, 4]) == pytest.approx(2.5)
    assert statkit.mean([7]) == pytest.approx(7)


def test_variance():
    assert statkit.variance([1, 2, 3, 4]) == pytest.approx(1.25)
    assert statkit.variance([5, 5, 5]) == pytest.approx(0)


def test_empty():
    with pytest.raises(ValueError):
        statkit.mean([])
    with pytest.raises(ValueError):
        statkit.variance([])


def test_installed_from_app():
    assert statkit.__file__.startswith("/app/statkit/")
