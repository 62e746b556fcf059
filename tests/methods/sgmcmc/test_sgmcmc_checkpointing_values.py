"""The checkpoint hooks of ``SGMCMC`` (``SGMCMCCheckpoint``) checked value by value: the config
holds every constructor setting under its name (hand-written below, non-default values so that a
swapped or dropped one shows), a model made from it has those settings and the saved dtype, the
fitted state is the data's size and input shape, the kept samples' shape and the potential's
size, and restoring it rebuilds a potential and zero buffers of those shapes, which
``bp.save`` / ``bp.load`` then fill with the same samples."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.checkpointing import SGMCMCCheckpoint
from bnn_pyro.methods.sgmcmc.potential import PyroPotential
from bnn_pyro.priors import LayerwiseNormalPrior

SETTINGS = dict(
    sampler="sgld",
    temperature=0.5,
    mdecay=0.1,
    schedule="cyclical",
    cycles=3,
    explore=0.6,
    preconditioner="none",
    burn_in=5,
    thinning=2,
    max_samples=7,
    num_samples=11,
)


def _method(dtype: torch.dtype = torch.float64, **settings):
    net = bp.nn.mlp(3, [4], 2).to(dtype)
    prior = LayerwiseNormalPrior("xavier", gain=2.0)
    return bp.make("sgld", net, bp.Gaussian(scale=0.3), prior=prior, **{**SETTINGS, **settings})


def _fitted(dtype: torch.dtype = torch.float64):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(20, 3, generator=g, dtype=dtype)
    y = torch.randn(20, 2, generator=g, dtype=dtype)
    torch.manual_seed(0)
    m = _method(dtype, burn_in=10, thinning=1, schedule="constant")
    m.fit(X, y, epochs=30, batch_size=10, progress=False, seed=0)
    return m, X


def test_the_config_holds_every_setting_under_its_name():
    """The config is exactly the hand-written dict: the likelihood's and the prior's own configs,
    each constructor setting, and the dtype's name without ``torch.``."""
    m = _method()
    assert isinstance(m, SGMCMCCheckpoint)
    assert m.checkpoint_config() == {
        "likelihood": {"type": "Gaussian", "scale": 0.3},
        "prior": {
            "type": "LayerwiseNormalPrior",
            "include": ["*"],
            "exclude": [],
            "types": None,
            "method": "xavier",
            "gain": 2.0,
        },
        **SETTINGS,
        "dtype": "float64",
    }
    assert _method(torch.float32).checkpoint_config()["dtype"] == "float32"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_model_made_from_the_config_has_its_settings_and_dtype(dtype):
    """``from_checkpoint_config`` around a fresh float32 net gives a model of the saved class
    whose config is the saved one (so every setting, the likelihood and the prior came back),
    whose net is in the saved dtype, and which is unfitted."""
    config = _method(dtype).checkpoint_config()
    net = bp.nn.mlp(3, [4], 2)
    loaded = type(_method()).from_checkpoint_config(net, config)
    assert type(loaded) is type(_method())
    assert loaded.checkpoint_config() == config
    assert loaded.dtype == dtype
    assert {p.dtype for p in loaded.bnn.net.parameters()} | {b.dtype for b in loaded.buffers()} == {
        dtype
    }
    assert loaded.potential is None and loaded.kept_samples.shape == (0, 0)


def test_a_model_needs_a_net():
    """Without ``net`` the hook refuses, naming the class."""
    config = _method().checkpoint_config()
    with pytest.raises(
        ValueError,
        match=r"^loading a SGMCMC needs net=: a fresh instance of the saved architecture$",
    ):
        type(_method()).from_checkpoint_config(None, config)


def test_the_fitted_state_is_the_data_size_shapes_and_potential_size():
    """After a fit on 20 points of 3 features: ``dataset_size`` 20, ``input_shape`` [3], the kept
    samples' shape [K, P] and the potential's size P = 3·4 + 4 + 4·2 + 2 = 26 coordinates (the
    weights and biases of the 3-4-2 net). An unfitted model refuses."""
    with pytest.raises(
        ValueError, match=r"^fit the model before saving it: it has no samples yet$"
    ):
        _method().fitted_state()
    m, _ = _fitted()
    kept = len(m.kept_samples)
    assert 1 <= kept <= 7
    assert m.fitted_state() == {
        "dataset_size": 20,
        "input_shape": [3],
        "kept": [kept, 26],
        "size": 26,
    }


def test_restoring_the_fitted_state_rebuilds_the_potential_and_zero_buffers():
    """``restore_fitted_state`` on a fresh model: the data's size and input shape (a tuple, also
    the inner model's), a potential with the fitted one's sites (names, shapes, slices) and size
    whose observation site is the likelihood's, a zero position ``(P,)`` and zero kept samples
    ``(K, P)`` in the model's dtype."""
    m, _ = _fitted()
    fresh = type(m).from_checkpoint_config(bp.nn.mlp(3, [4], 2), m.checkpoint_config())
    fresh.restore_fitted_state(m.fitted_state())
    assert fresh.dataset_size == 20
    assert fresh.input_shape == (3,) and fresh.bnn.input_shape == (3,)
    assert isinstance(fresh.potential, PyroPotential)
    assert type(fresh.potential) is type(m.potential)  # chosen by the same rule as fit's
    assert fresh.potential.size == 26 and fresh.potential.observed == m.likelihood.name
    assert [(s.name, s.shape, s.start) for s in fresh.potential.sites] == [
        (s.name, s.shape, s.start) for s in m.potential.sites
    ]
    assert torch.equal(fresh.position, torch.zeros(26, dtype=torch.float64))
    assert fresh.position.dtype == fresh.kept_samples.dtype == torch.float64
    assert torch.equal(
        fresh.kept_samples, torch.zeros(len(m.kept_samples), 26, dtype=torch.float64)
    )


def test_restoring_an_image_input_shape():
    """An input shape of several axes comes back as that tuple and the potential is traced on
    an input of that shape (a net that flattens ``(2, 3)`` images into 6 features: 7 weights)."""
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 1))
    fresh = bp.make("sgld", net, bp.Gaussian(scale=0.3))
    fresh.restore_fitted_state(
        {"dataset_size": 8, "input_shape": [2, 3], "kept": [3, 7], "size": 7}
    )
    assert fresh.dataset_size == 8
    assert fresh.input_shape == (2, 3) and fresh.bnn.input_shape == (2, 3)
    assert fresh.potential.size == 7 and fresh.kept_samples.shape == (3, 7)
    assert fresh.position.shape == (7,)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_save_and_load_give_the_same_samples_and_predictions(dtype, tmp_path):
    """Through ``bp.save`` and ``bp.load``: the same kept samples and position (bitwise), the
    same fitted state and config, and the same per-sample predictions at the training inputs
    (under one seed: the predictive draws its samples from the kept ones)."""
    m, X = _fitted(dtype)
    path = tmp_path / "m.pt"
    m.save(path)
    loaded = bp.load(path, net=bp.nn.mlp(3, [4], 2))
    assert torch.equal(loaded.kept_samples, m.kept_samples) and torch.equal(
        loaded.position, m.position
    )
    assert loaded.kept_samples.dtype == dtype
    assert loaded.fitted_state() == m.fitted_state()
    assert loaded.checkpoint_config() == m.checkpoint_config()
    _, _, expected = m.predict(X, return_samples=True, seed=5)
    _, _, got = loaded.predict(X, return_samples=True, seed=5)
    assert torch.equal(got, expected)


def test_restoring_on_the_model_device():
    """A model whose tensors live on another device restores there: the potential is traced on
    an input on the model's device (one on the CPU would meet meta weights in the net and fail)
    and the buffers stay on it. The ``meta`` device (shapes only, no data) stands in for a GPU
    on a machine without one."""
    net = bp.nn.mlp(3, [4], 2).to("meta")
    fresh = bp.make("sgld", net, bp.Gaussian(scale=0.3))
    fresh.restore_fitted_state({"dataset_size": 8, "input_shape": [3], "kept": [3, 26], "size": 26})
    assert fresh.potential.size == 26
    assert fresh.position.device.type == fresh.kept_samples.device.type == "meta"
    assert fresh.position.shape == (26,) and fresh.kept_samples.shape == (3, 26)


class _TargetGaussian(bp.Gaussian):
    """A Gaussian whose observation site is named ``target``, not ``obs``."""

    name = "target"


def test_the_restored_potential_leaves_out_the_likelihood_site_by_its_name():
    """The potential is traced without targets, so the observation is sampled; it is told the
    likelihood's site name, here ``target``, and keeps only the net's 26 weights (taken for a
    latent, the sampled observation would sit in the data plate and be refused)."""
    fresh = bp.make("sgld", bp.nn.mlp(3, [4], 2), _TargetGaussian(scale=0.3))
    fresh.restore_fitted_state({"dataset_size": 8, "input_shape": [3], "kept": [3, 26], "size": 26})
    assert fresh.potential.observed == "target" and fresh.potential.size == 26
    assert "target" not in [s.name for s in fresh.potential.sites]
