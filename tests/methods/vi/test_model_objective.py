"""``VariationalBNN(elbo=...)``: the objective a model's ``fit`` uses when not told, and the
``bb_alpha`` method (``make("bb_alpha")``: ``VariationalBNN(elbo="alpha")``).

Each test compares the model-level default with the same objective passed to ``fit`` (or to
``fit_stacked``, the Lightning module) under the same seed: the two must be the same numbers,
and different from the ELBO's, so a default that is silently ignored fails.
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.stacking import fit_stacked

FIT = dict(epochs=3, batch_size=16, lr=1e-2, progress=False, seed=0)


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(48, 2, generator=g)
    return X, X.sum(-1, keepdim=True) + 0.1 * torch.randn(48, 1, generator=g)


def _model(**kwargs):
    torch.manual_seed(0)  # the same initial weights, hence the same guide means, for each
    return bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(scale=0.3), **kwargs)


def _locs(bnn):
    return torch.cat([p.detach().flatten() for p in bnn.guide.locs.values()])


def test_the_models_objective_is_fits_default():
    X, y = _data()
    own = _model(elbo="alpha")
    own.fit(X, y, **FIT)
    told = _model()
    told.fit(X, y, elbo="alpha", **FIT)
    torch.testing.assert_close(_locs(own), _locs(told), rtol=0, atol=0)
    plain = _model()
    plain.fit(X, y, **FIT)  # the ELBO: another end, so the comparison above can fail
    assert (_locs(plain) - _locs(own)).abs().max() > 1e-4
    overridden = _model(elbo="alpha")
    overridden.fit(X, y, elbo="trace", **FIT)  # a fit's own elbo wins
    torch.testing.assert_close(_locs(overridden), _locs(plain), rtol=0, atol=0)


def test_bb_alpha_is_variational_bnn_with_the_alpha_energy(tmp_path):
    X, y = _data()
    torch.manual_seed(0)
    bnn = bp.make("bb_alpha", bp.nn.mlp(2, [8], 1), bp.Gaussian(scale=0.3))
    assert isinstance(bnn, bp.VariationalBNN) and bnn.default_elbo == "alpha"
    assert "elbo='alpha'" in repr(bnn)
    bnn.fit(X, y, **FIT)
    told = _model()
    told.fit(X, y, elbo="alpha", **FIT)
    torch.testing.assert_close(_locs(bnn), _locs(told), rtol=0, atol=0)
    path = tmp_path / "bb_alpha.pt"
    bnn.save(path)
    loaded = bp.load(path, net=bp.nn.mlp(2, [8], 1))
    assert loaded.default_elbo == "alpha"  # a further fit of the loaded model keeps it
    torch.testing.assert_close(loaded.predict(X, seed=1)[0], bnn.predict(X, seed=1)[0])


def test_a_file_saved_before_the_option_loads_with_the_elbo(tmp_path):
    X, y = _data()
    bnn = _model()
    bnn.fit(X, y, **FIT)
    config = bnn.checkpoint_config()
    del config["elbo"]  # what a file written before the option holds
    rebuilt = bp.VariationalBNN.from_checkpoint_config(bp.nn.mlp(2, [8], 1), config)
    assert rebuilt.default_elbo == "trace"


@pytest.mark.parametrize("bad", ["alpha0.5", "ELBO", 3])
def test_an_unknown_objective_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="elbo must be one of"):
        _model(elbo=bad)


def test_fit_stacked_uses_the_members_objective():
    X, y = _data()
    stacked = [_model(elbo="alpha") for _ in range(2)]
    fit_stacked(stacked, X, y, seeds=[0, 1], epochs=2, batch_size=16, progress=False)
    told = [_model() for _ in range(2)]
    fit_stacked(told, X, y, seeds=[0, 1], epochs=2, batch_size=16, progress=False, elbo="alpha")
    # the stacked sums differ from a member's own in float rounding only (test_stacked_vi)
    torch.testing.assert_close(_locs(stacked[1]), _locs(told[1]), rtol=1e-5, atol=1e-6)
    mixed = [_model(elbo="alpha"), _model()]
    with pytest.raises(ValueError, match=r"objectives \(elbo=\) differ"):
        fit_stacked(mixed, X, y, seeds=[0, 1], epochs=1, progress=False)


def test_the_lightning_module_takes_the_models_objective():
    pytest.importorskip("lightning")
    from bnn_pyro.elbos.alpha import AlphaELBO
    from bnn_pyro.methods.vi.lightning import BNNLightningModule

    X, y = _data()
    module = BNNLightningModule(_model(elbo="alpha"), dataset_size=48, example=(X[:4], y[:4]))
    assert isinstance(module.elbo, AlphaELBO)
    plain = BNNLightningModule(_model(elbo="alpha"), 48, (X[:4], y[:4]), elbo="trace")
    assert not isinstance(plain.elbo, AlphaELBO)
