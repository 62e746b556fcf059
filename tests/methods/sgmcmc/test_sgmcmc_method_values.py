"""``SGMCMC`` itself, value by value: its constructor's checks (each message in full) and
defaults, the state it starts with and keeps after a run, what ``fit`` passes on to its chain
(read off the running :class:`ChainStep` by a callback), its validation score and its repr."""

from __future__ import annotations

import math
from collections import OrderedDict

import pyro.distributions as dist
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.method import SGMCMC
from bnn_pyro.training.callbacks import EarlyStopping


def _net(dtype=torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return bp.nn.mlp(2, [3], 1).to(dtype)


def _data(rows: int = 16):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(rows, 2, generator=g)
    return X, X[:, 0] - X[:, 1] + 0.1 * torch.randn(rows, generator=g)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sampler": "hmc"}, "sampler must be one of ('sghmc', 'sgld'), got 'hmc'"),
        ({"temperature": 0.0}, "temperature must be a finite float > 0.0, got 0.0"),
        ({"mdecay": 0.0}, "mdecay must be a finite float in (0.0, 1.0), got 0.0"),
        ({"mdecay": 1.5}, "mdecay must be a finite float in (0.0, 1.0), got 1.5"),
        ({"schedule": "linear"}, "schedule must be one of ('constant', 'cyclical'), got 'linear'"),
        ({"cycles": 0}, "cycles must be an int >= 1, got 0"),
        ({"explore": -0.1}, "explore must be a finite float in [0.0, 1.0), got -0.1"),
        ({"explore": 1.5}, "explore must be a finite float in [0.0, 1.0), got 1.5"),
        ({"burn_in": -1}, "burn_in must be an int >= 0, got -1"),
        ({"thinning": 0}, "thinning must be an int >= 1, got 0"),
        ({"max_samples": 0}, "max_samples must be an int >= 1, got 0"),
        ({"num_samples": 0}, "num_samples must be an int >= 1, got 0"),
    ],
)
def test_each_setting_is_checked_by_name(options, message):
    with pytest.raises(ValueError) as caught:
        SGMCMC(_net(), bp.Gaussian(0.3), **options)
    assert str(caught.value) == message


def test_settings_inside_their_ranges_are_kept():
    """The bounds' other sides: a tiny temperature and friction, ``explore=0`` and
    ``burn_in=0`` are taken as given."""
    m = SGMCMC(_net(), bp.Gaussian(0.3), temperature=0.5, mdecay=0.05, explore=0.0, burn_in=0,
               thinning=3, max_samples=7, num_samples=5, cycles=2)  # fmt: skip
    assert (m.temperature, m.mdecay, m.explore, m.burn_in, m.thinning) == (0.5, 0.05, 0.0, 0, 3)
    assert (m.max_samples, m.num_samples, m.bnn.num_samples, m.cycles) == (7, 5, 5, 2)


def test_the_documented_defaults_and_the_unfitted_state():
    """SGHMC at ``T = 1``, a constant schedule (4 cycles at ``explore=0.8`` if cyclical), the
    default friction and burn-in chosen per run, 1000 samples kept, 100 predicted; before
    any run: an empty position and sample buffer (saved with the model), nothing else."""
    prior = bp.IIDPrior(dist.Normal(0.0, 2.0))
    m = SGMCMC(_net(), bp.Gaussian(0.3), prior)
    assert (m.sampler, m.temperature, m.schedule, m.cycles, m.explore) == (
        "sghmc", 1.0, "constant", 4, 0.8
    )  # fmt: skip
    assert (m.mdecay, m.burn_in, m.thinning, m.max_samples, m.num_samples) == (
        None, None, None, 1000, 100
    )  # fmt: skip
    assert m.bnn.num_samples == 100 and m.prior is prior
    assert m.position.shape == (0,) and m.kept_samples.shape == (0, 0)
    state = m.state_dict()
    assert state["position"].shape == (0,) and state["kept_samples"].shape == (0, 0)
    assert (m.potential, m.dataset_size, m.input_shape, m.step_size) == (None,) * 4
    assert m.last_run == {}
    assert "sampler='sghmc', schedule='constant', temperature=1.0, not fitted" in repr(m)


def test_the_state_follows_the_nets_dtype_and_device():
    """A float64 net: float64 buffers; a net on the ``meta`` device: buffers there too."""
    m = SGMCMC(_net(torch.float64), bp.Gaussian(0.3))
    assert m.position.dtype == m.kept_samples.dtype == torch.float64
    m = SGMCMC(_net().to("meta"), bp.Gaussian(0.3))
    assert m.position.device.type == m.kept_samples.device.type == "meta"


def test_nets_the_prior_does_not_cover_are_refused_by_name():
    """A net without parameters is refused by the prior's own check; a prior that leaves out
    the biases, with the names of what it leaves out."""
    with pytest.raises(ValueError, match="selects no parameter of the net as Bayesian"):
        SGMCMC(nn.Identity(), bp.Gaussian(0.3))
    net = nn.Sequential(OrderedDict(lin=nn.Linear(2, 1)))
    with pytest.raises(ValueError) as caught:
        SGMCMC(net, bp.Gaussian(0.3), bp.IIDPrior(dist.Normal(0.0, 1.0), exclude="*.bias"))
    assert str(caught.value) == (
        "net has parameters the prior leaves out (['lin.bias']): SG-MCMC samples every "
        "parameter, so choose a prior that covers them all"
    )


def _run(m, X, y, **fit):
    """``m.fit`` with a callback that reads the running chain step after each epoch."""
    seen = []

    def read(method, epoch, history):
        step = method._step
        seen.append({"mdecay": step.mdecay, "total": step.plan.total, "target": step.target,
                     "lr": step.plan.lr, "kept": step.collector.kept})  # fmt: skip

    history = m.fit(X, y, callbacks=[read], **fit)
    return history, seen


def test_fit_passes_its_settings_to_the_chain():
    """Steps ``epochs * ceil(N / batch)``, the method's friction, the given step (no
    measuring target), and what the run keeps: its data's size and shape and its plan."""
    X, y = _data(rows=18)
    m = bp.make("sghmc", _net(), bp.Gaussian(0.3), mdecay=0.05, burn_in=3, thinning=2)
    _, seen = _run(m, X, y, epochs=3, batch_size=4, lr=0.01, progress=False, seed=0)
    total = 3 * math.ceil(18 / 4)
    assert [s["total"] for s in seen] == [total] * 3
    assert {s["mdecay"] for s in seen} == {0.05} and {s["target"] for s in seen} == {None}
    assert {s["lr"] for s in seen} == {0.01}
    # 12 sampling steps after the burn-in, every 2nd collected; a burn-in of 3 steps is too
    # short for the stability guard, so no kinetic temperature is measured
    assert m.last_run == {
        "steps": total,
        "burn_in": 3,
        "thinning": 2,
        "seen": 6,
        "kinetic_temperature": None,
    }
    assert (m.dataset_size, m.input_shape, m.bnn.input_shape) == (18, (2,), (2,))
    assert len(m.kept_samples) == 6 and m.step_size is None
    assert f"{len(m.kept_samples)} samples" in repr(m)
    assert m._step is None  # the run's step is let go


def test_fit_measures_the_step_by_default():
    """No ``lr`` on the whole data set: the step is measured towards the sampler's
    ``fit_defaults`` target (plan step factor 1) and kept as a float ``step_size``."""
    X, y = _data()
    m = bp.make("sgld", _net(), bp.Gaussian(0.3))
    _, seen = _run(m, X, y, epochs=4, progress=False, seed=0)
    assert {s["target"] for s in seen} == {SGMCMC.fit_defaults["sgld"]} == {0.1}
    assert {s["lr"] for s in seen} == {1.0}
    assert {s["mdecay"] for s in seen} == {0.25}  # MDECAY: the method leaves it unset
    assert isinstance(m.step_size, float) and m.step_size > 0
    assert m.last_run["steps"] == 4


def test_fit_defaults_are_100_epochs_shuffled_with_a_progress_bar(capsys):
    """``epochs=100``, ``shuffle=True``, ``progress=True``: the default run is the one with
    these given, and its bar is labelled with the sampler."""
    X, y = _data()
    m = bp.make("sgld", _net(), bp.Gaussian(0.3))
    m.fit(X, y, batch_size=8, lr=1e-3, seed=0)
    assert m.last_run["steps"] == 200
    assert "SGLD" in capsys.readouterr().err
    given = bp.make("sgld", _net(), bp.Gaussian(0.3))
    given.fit(X, y, epochs=100, batch_size=8, lr=1e-3, seed=0, shuffle=True, progress=False)
    assert torch.equal(m.kept_samples, given.kept_samples)
    assert "SGLD" not in capsys.readouterr().err  # progress=False: no bar
    unshuffled = bp.make("sgld", _net(), bp.Gaussian(0.3))
    unshuffled.fit(X, y, epochs=100, batch_size=8, lr=1e-3, seed=0, shuffle=False,
                   progress=False)  # fmt: skip
    assert not torch.equal(m.kept_samples, unshuffled.kept_samples)


def test_a_seeded_run_does_not_depend_on_the_global_generator():
    X, y = _data()
    runs = []
    for state in (1, 2):
        torch.manual_seed(state)
        m = bp.make("sghmc", _net(), bp.Gaussian(0.3))
        torch.manual_seed(state)  # the global stream differs between the two runs
        m.fit(X, y, epochs=3, batch_size=8, lr=0.01, progress=False, seed=4)
        runs.append(m.kept_samples)
    assert torch.equal(runs[0], runs[1])


def test_fit_checks_its_arguments_by_name():
    X, y = _data()
    m = bp.make("sgld", _net(), bp.Gaussian(0.3))
    cases = [
        ({"y": None}, "y is required when X is not a DataLoader"),
        ({"epochs": 0}, "epochs must be an int >= 1, got 0"),
        ({"lr": 0.0}, "lr must be a finite float > 0.0, got 0.0"),
        ({"seed": -1}, "seed must be an int >= 0, got -1"),
        ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        (
            {"validation_data": (X[:3], y[:2])},
            "X and y_val must have the same number of rows, got 3 and 2",
        ),
        (
            {"callbacks": [EarlyStopping("val_nll")]},
            "validation_data is required: EarlyStopping monitors 'val_nll', which only "
            "fit(..., validation_data=(X_val, y_val)) records",
        ),
    ]
    for options, message in cases:
        options = {"y": y, "progress": False, **options}
        with pytest.raises(ValueError) as caught:
            m.fit(X, options.pop("y"), **options)
        assert str(caught.value) == message
    loader = DataLoader(TensorDataset(X.reshape(16, 1, 2), y), batch_size=8)
    with pytest.raises(ValueError) as caught:
        m.fit(loader, progress=False)
    assert str(caught.value) == (
        "x of batch 0 must have 2 feature(s) per row (shape (N, 2)), got shape (8, 1, 2)"
    )
    with pytest.raises(TypeError) as caught:  # the loader yields y: a y beside it is refused
        m.fit(DataLoader(TensorDataset(X, y), batch_size=8), y, progress=False)
    assert str(caught.value) == "y must be None when x is a DataLoader (it yields (x, y))"


def test_a_data_loader_gives_the_run_of_its_rows():
    """A ``DataLoader`` of ``(x, y)`` batches is gathered: the same chain as its rows."""
    X, y = _data()
    fit = {"epochs": 2, "batch_size": 8, "lr": 1e-3, "progress": False, "seed": 0}
    a, b = bp.make("sgld", _net(), bp.Gaussian(0.3)), bp.make("sgld", _net(), bp.Gaussian(0.3))
    a.fit(X, y, **fit)
    b.fit(DataLoader(TensorDataset(X, y), batch_size=5), **fit)
    assert torch.equal(a.kept_samples, b.kept_samples)


def test_early_stopping_on_val_nll_runs_with_validation_data():
    X, y = _data()
    m = bp.make("sgld", _net(), bp.Gaussian(0.3))
    stop = EarlyStopping("val_nll")
    history = m.fit(X, y, epochs=2, lr=1e-3, progress=False, seed=0,
                    validation_data=(X[:4], y[:4]), callbacks=[stop])  # fmt: skip
    assert len(history["val_nll"]) >= 1  # it ran (without validation it is refused up front)


def test_the_net_keeps_its_mode():
    """``fit`` runs the net in eval mode and gives it back in the mode it had."""
    X, y = _data()
    for training in (True, False):
        m = bp.make("sgld", _net(), bp.Gaussian(0.3))
        m.bnn.train(training)
        modes = []
        m.fit(
            X,
            y,
            epochs=2,
            lr=1e-3,
            progress=False,
            seed=0,
            callbacks=[lambda method, e, h, modes=modes: modes.append(method.bnn.training)],
        )
        assert modes == [False, False] and m.bnn.training is training


def test_val_nll_is_that_of_the_last_20_samples_or_of_the_position():
    """Each epoch's ``val_nll`` is ``-log_predictive_density`` of the validation rows under the
    last 20 samples kept so far, or under the chain's position while none is kept (8 steps an
    epoch, 10 of burn-in: none after epoch 1, then 6, 14, 22, 30)."""
    X, y = _data(rows=32)
    xv, yv = X[:6] + 0.5, y[:6]
    m = bp.make("sgld", _net(), bp.Gaussian(0.3), burn_in=10, thinning=1)
    expected, kept = [], []

    def score(method, epoch, history):
        step = method._step
        kept.append(step.collector.kept)
        flat = (
            step.collector.samples[-20:]
            if step.collector.kept
            else step.potential.constrain(step.theta).unsqueeze(0)
        )
        samples = step.potential.unflatten(flat)
        expected.append(-method.bnn.log_predictive_density(xv, yv, posterior_samples=samples))

    history = m.fit(X, y, epochs=5, batch_size=4, lr=1e-3, progress=False, seed=0,
                    validation_data=(xv, yv), callbacks=[score])  # fmt: skip
    assert kept == [0, 6, 14, 22, 30]
    # the same samples through the same density: equal up to float32 round-off
    assert history["val_nll"] == pytest.approx(expected, rel=1e-6)


def test_start_run_draws_two_seeds_from_the_global_generator(monkeypatch):
    """After the potential and the start, two seeds from the global generator, each uniform on
    ``[0, 2^62)``: the collector's, then the injected noise's (what a seeded ``fit`` and the
    stacked fit replay). Checked against the same two draws replayed from the generator's
    state before the first."""
    X, y = _data()
    m = bp.make("sgld", _net(), bp.Gaussian(0.3))
    states = []
    real = torch.randint

    def randint(*args, **kwargs):
        states.append(torch.get_rng_state())
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "randint", randint)
    step = m.start_run(X, y.reshape(-1, 1), steps=8, lr=0.01)
    torch.set_rng_state(states[0])
    collector, noise = (int(real(0, 2**62, (1,))) for _ in range(2))
    assert step.collector.generator.initial_seed() == collector
    assert step.generator.initial_seed() == noise


def test_start_run_starts_at_the_nets_weights_and_the_datas_noise_then_goes_on():
    """The first run starts at the net's initial weights and the likelihood's initial noise
    (from the data); a later run starts where the last one stopped."""
    X, y = _data()
    y = y.reshape(-1, 1)
    m = bp.make("sgld", _net(), bp.Gaussian(scale="learned"))
    step = m.start_run(X, y, steps=8, lr=0.01)
    start = step.potential.unflatten(step.potential.constrain(step.theta).unsqueeze(0))
    for name, value in m.bnn.guide.init_loc.items():
        torch.testing.assert_close(start[name][0], value, rtol=1e-6, atol=1e-7)
    noise = bp.Gaussian(scale="learned").initial_latents(X, y)["likelihood.scale"]
    torch.testing.assert_close(start["likelihood.scale"][0], noise, rtol=1e-5, atol=1e-7)
    assert step.theta is m.position
    m.fit(X, y, epochs=2, lr=0.01, progress=False, seed=0)
    stopped = m.position.clone()
    assert not torch.equal(stopped, step.potential.flat(start | {}))  # the chain moved
    again = m.start_run(X, y, steps=8, lr=0.01)
    assert torch.equal(again.theta, stopped) and again.theta is m.position


@pytest.mark.parametrize(("own", "given", "expected"), [
    (None, None, 0.25), (0.05, None, 0.05), (0.05, 0.1, 0.1), (None, 0.1, 0.1),
])  # fmt: skip
def test_start_run_friction_is_the_given_else_the_methods_else_the_default(own, given, expected):
    X, y = _data()
    m = bp.make("sghmc", _net(), bp.Gaussian(0.3), mdecay=own)
    assert m.start_run(X, y.reshape(-1, 1), steps=8, lr=0.01, mdecay=given).mdecay == expected


def test_minibatches_step_with_the_minibatch_friction_by_default():
    """No ``lr`` and no ``mdecay`` on minibatches: the fixed minibatch step and the friction it
    was tuned with (``MINIBATCH_LR``, ``MINIBATCH_MDECAY``), not the full-batch ``MDECAY``."""
    from bnn_pyro.methods.sgmcmc.step_sizes import MINIBATCH_LR, MINIBATCH_MDECAY

    X, y = _data()
    m = bp.make("sghmc", _net(), bp.Gaussian(0.3))
    _, seen = _run(m, X, y, epochs=2, batch_size=8, progress=False, seed=0)
    assert {s["mdecay"] for s in seen} == {MINIBATCH_MDECAY} == {0.2}
    assert {s["lr"] for s in seen} == {MINIBATCH_LR["sghmc"]}
