"""``load_state_dict`` into a fresh SVI model (``LazyGuideLoading``): when a load makes the
model count as fitted and when not (a partial load, a failed one), the input shape it sets the
guide up from, and the refusal where it knows none."""

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from tests.methods.vi.test_predict_from_samples import X2, Y2, _fitted

G = torch.Generator().manual_seed(0)
X = torch.randn(20, 2, generator=G)
Y = X.sum(-1)


def _model(guide: str = "normal", hidden=(8,)) -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(2, list(hidden), 1), bp.Gaussian(0.1), guide=guide)


def _trained(model, epochs: int = 2, seed: int = 0):
    model.fit(X, Y, epochs=epochs, progress=False, seed=seed)
    return model


@pytest.fixture(scope="module")
def fitted() -> bp.VariationalBNN:
    return _trained(_model(), epochs=3)


def test_a_whole_load_makes_a_fresh_model_fitted(fitted):
    fresh = _model()
    assert not fresh.is_fitted() and fresh.loaded_state is False
    fresh.load_state_dict(fitted.state_dict())
    assert fresh.is_fitted() and fresh.loaded_state is True


def _hidden(width: int = 4) -> bp.HiddenLayerBNN:
    torch.manual_seed(0)
    return bp.HiddenLayerBNN(2, [width], 1, bp.Gaussian(0.1))


@pytest.fixture(scope="module")
def hidden() -> bp.HiddenLayerBNN:
    return _trained(_hidden())


def test_a_whole_load_makes_a_fresh_hidden_layer_model_fitted(hidden):
    """A ``HiddenLayerBNN`` counts as fitted after a fit or a whole load (its guide is set up
    for the load all the same)."""
    fresh = _hidden()
    fresh.load_state_dict(hidden.state_dict())
    assert fresh.is_fitted()


def test_a_partial_load_leaves_a_fresh_model_unfitted(hidden):
    """``strict=False`` with a key of its own missing: the load runs, the model does not
    count as fitted (a value it holds was not given)."""
    state = hidden.state_dict()
    dropped = next(iter(state))
    fresh = _hidden()
    result = fresh.load_state_dict({k: v for k, v in state.items() if k != dropped}, strict=False)
    assert result.missing_keys == [dropped]
    assert not fresh.is_fitted()


def test_a_failed_load_leaves_a_fresh_model_unfitted():
    """A state of another size: torch refuses it after loading what it could; the model does
    not count as fitted."""
    other = _hidden(width=3)
    other.fit(X, Y, epochs=1, progress=False, seed=0)
    fresh = _hidden()
    with pytest.raises(RuntimeError, match="size mismatch"):
        fresh.load_state_dict(other.state_dict(), strict=False)
    assert not fresh.is_fitted()


def test_a_load_into_a_fitted_model_changes_nothing_of_its_standing(hidden):
    """A fitted model stays fitted through any load; ``loaded_state`` marks only a load that
    made an unfitted model fitted."""
    model = _hidden()
    model.fit(X, Y, epochs=1, progress=False, seed=1)
    model.load_state_dict(hidden.state_dict())
    assert model.is_fitted() and not model.loaded_state


class _ConvNet(nn.Module):
    """A net whose first layer does not fix its input's shape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.head = nn.Linear(2 * 4 * 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


def test_the_guide_is_set_up_from_the_input_shape_the_model_knows():
    """Where the net does not fix the input's shape, the one the model was told (a fit's, as a
    checkpoint restores it) is used; where it knows none, the load is refused with the fixes."""
    x, y = torch.randn(6, 1, 4, 4, generator=G), torch.randn(6, generator=G)
    fitted = bp.VariationalBNN(_ConvNet(), bp.Gaussian(0.1), guide="normal")
    fitted.fit(x, y, epochs=1, progress=False, seed=0)
    fresh = bp.VariationalBNN(_ConvNet(), bp.Gaussian(0.1), guide="normal")
    with pytest.raises(ValueError) as caught:
        fresh.load_state_dict(fitted.state_dict())
    assert str(caught.value) == (
        "load_state_dict: this VariationalBNN's guide has no parameters yet (Pyro makes them on "
        "its first call) and its input shape is unknown (the net does not fix it): call "
        "setup_guide(x, y) on a row of the training data first, or save with .save(path) and "
        "reload with bp.load(path, net=...)"
    )
    fresh.input_shape = (1, 4, 4)  # the first fix: the shape told
    fresh.load_state_dict(fitted.state_dict())
    assert torch.equal(fresh.predict(x, seed=0)[0], fitted.predict(x, seed=0)[0])
    other = bp.VariationalBNN(_ConvNet(), bp.Gaussian(0.1), guide="normal")
    other.setup_guide(x[:1], y[:1])  # the other: the guide set up on a row
    other.load_state_dict(fitted.state_dict())
    assert torch.equal(other.predict(x, seed=0)[0], fitted.predict(x, seed=0)[0])


# ------------------------------------------------------------------ fitted models' states
@pytest.mark.parametrize("guide", ["meanfield", "normal", "diagonal", "delta"])
def test_load_state_dict_into_a_fresh_model_sets_its_guide_up(guide):
    fitted = _fitted(guide)
    fresh = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(scale="learned"), guide=guide)
    rng = torch.get_rng_state()
    result = fresh.load_state_dict(fitted.state_dict())
    assert torch.equal(torch.get_rng_state(), rng)  # the set-up drew nothing from the global RNG
    assert not result.missing_keys and not result.unexpected_keys
    assert fresh.is_fitted()
    for a, b in zip(fresh.predict(X2, True, seed=3), fitted.predict(X2, True, seed=3), strict=True):
        assert torch.equal(a, b)


def test_load_state_dict_of_a_model_held_in_another_module():
    fitted = _fitted()
    outer, fresh = nn.ModuleDict({"bnn": fitted}), nn.ModuleDict({"bnn": _fitted_like()})
    fresh.load_state_dict(outer.state_dict())
    assert torch.equal(fresh["bnn"].predict(X2, seed=0)[0], fitted.predict(X2, seed=0)[0])


def _fitted_like() -> bp.VariationalBNN:
    return bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(scale="learned"))


@pytest.mark.parametrize("likelihood", [bp.Gaussian(0.1), bp.Gaussian(scale="learned")])
def test_load_state_dict_makes_a_hidden_layer_bnn_fitted(likelihood):
    fitted = bp.HiddenLayerBNN(2, [4], 1, likelihood)
    fitted.fit(X2, Y2, epochs=3, progress=False, seed=0)
    fresh = bp.HiddenLayerBNN(2, [4], 1, likelihood)
    fresh.load_state_dict(fitted.state_dict())
    assert torch.equal(fresh.predict(X2, seed=1)[0], fitted.predict(X2, seed=1)[0])


def test_a_fits_own_restore_of_its_state_does_not_make_a_model_fitted():
    bnn = bp.HiddenLayerBNN(2, [4], 1, bp.Gaussian(scale="learned"))

    def fail(model, epoch, history):
        raise RuntimeError("user callback failed")

    with pytest.raises(RuntimeError, match="user callback failed"):  # fit puts its state back
        bnn.fit(X2, Y2, epochs=2, progress=False, seed=0, callbacks=[fail])
    assert not bnn.is_fitted()
