"""``SVIModel.fit`` (``bnn_pyro.methods.vi.svi_model``): its refusals before any work (the data
not yet read, the model unchanged), its defaults, and what it hands each engine: the
optimizer, the particles, the progress bar; and the refusal to save an unfitted model."""

from __future__ import annotations

import pyro
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import bnn_pyro as bp
from tests.reliability.refusal import assert_refused

pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.PosteriorCollapseWarning")


class _Counting(Dataset):
    """Rows of a linear problem that count how often they are read."""

    def __init__(self, n: int = 16) -> None:
        g = torch.Generator().manual_seed(0)
        self.X = torch.randn(n, 2, generator=g)
        self.y = self.X.sum(-1)
        self.reads = 0

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        return self.X[i], self.y[i]


def _bnn() -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1))


# name -> (fit kwargs, the message's start)
BAD = {
    "epochs negative": ({"epochs": -1}, "epochs must be an int >= 0"),
    "lr negative": ({"lr": -0.1}, "lr must be a finite float > 0.0"),
    "kl_weight negative": ({"kl_weight": -1.0}, "kl_weight must be a finite float >= 0.0"),
    "kl_weight schedule bad at epoch 0": (
        {"kl_weight": lambda epoch: -1.0 if epoch == 0 else 1.0},
        "kl_weight must be a finite float >= 0, got -1.0 at epoch 0",
    ),
    "num_particles 0": ({"num_particles": 0}, "num_particles must be an int >= 1"),
    "lr_schedule unknown": ({"lr_schedule": "bogus"}, "lr_schedule must be one of"),
    "average above 1": ({"average": 1.5}, "average must be a fraction of the epochs"),
    "seed negative": ({"seed": -3}, "seed must be an int >= 0"),
    "init unknown": ({"init": "mle"}, "init must be None, 'prior' or 'map'"),
    "elbo unknown": ({"elbo": "bogus"}, "elbo must be one of"),
    "y beside a DataLoader": (
        {"y": torch.zeros(16)},
        "pass either a DataLoader or (X, y), not both",
    ),
}


@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
def test_a_bad_argument_is_refused_before_the_data_is_read(bad):
    kwargs, message = BAD[bad]
    data = _Counting()
    bnn = _bnn()
    call = {"epochs": 2, "progress": False, **kwargs}
    y = call.pop("y", None)
    info = assert_refused(lambda: bnn.fit(DataLoader(data, batch_size=8), y, **call), ValueError)
    assert str(info.value).startswith(message)
    assert data.reads == 0 and not bnn.is_fitted()


def test_tensors_without_targets_or_with_a_bad_batch_size_are_refused():
    bnn = _bnn()
    with pytest.raises(ValueError, match=r"^y is required when X is not a DataLoader$"):
        bnn.fit(torch.randn(8, 2), epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"^batch_size must be an int >= 1, got 0$"):
        bnn.fit(torch.randn(8, 2), torch.randn(8), batch_size=0, progress=False)
    assert not bnn.is_fitted()


def test_an_unfitted_model_is_not_saved(tmp_path):
    with pytest.raises(
        ValueError, match=r"^fit the model before saving it: its guide has no parameters yet$"
    ):
        _bnn().save(tmp_path / "m.pt")


class _CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        type(self).steps += 1
        return super().step(closure)


def test_the_defaults_are_100_epochs_of_minibatches_of_128_with_the_optimizer_given():
    """257 rows: three minibatches of at most 128 an epoch (two of at most 129), 100 epochs,
    every step taken by the optimizer class given (not the default Adam)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(257, 2, generator=g)
    _CountingSGD.steps = 0
    history = _bnn().fit(X, X.sum(-1), optimizer=_CountingSGD, lr=1e-9, progress=False, seed=0)
    assert len(history["loss"]) == 100
    assert _CountingSGD.steps == 300


def test_the_progress_bar_is_on_by_default(capsys):
    X = torch.randn(16, 2)
    _bnn().fit(X, X.sum(-1), epochs=2, seed=0)
    shown = capsys.readouterr().err
    assert "fit:" in shown and "epoch/s" in shown  # the bar, cleared when the fit ends
    _bnn().fit(X, X.sum(-1), epochs=2, seed=0, progress=False)
    assert capsys.readouterr().err == ""


def test_pyros_path_runs_the_particles_as_one_vectorized_call():
    """``num_particles=3`` through Pyro's ``SVI`` (a ``pyro.optim`` optimizer chooses it): one
    more epoch of one step adds one forward pass of the net, on all three particles' weights at
    once (Pyro's ``vectorize_particles``), not three."""
    X = torch.randn(16, 2)
    calls = {}
    for epochs in (1, 2):
        bnn = _bnn()
        seen = []
        bnn.net.register_forward_pre_hook(lambda module, args, seen=seen: seen.append(1))
        optimizer = pyro.optim.Adam({"lr": 0.01})
        bnn.fit(X, X.sum(-1), epochs=epochs, batch_size=None, num_particles=3,
                optimizer=optimizer, progress=False, seed=0)  # fmt: skip
        calls[epochs] = len(seen)
    assert calls[2] - calls[1] == 1


def test_the_alpha_energy_gets_the_particles_asked_for(monkeypatch):
    """``elbo="alpha"`` on the plain-torch path: the model's loss is asked for
    ``num_particles`` particles (10 is the default the energy falls back on)."""
    bnn = _bnn()
    asked = []
    own = bnn.fast_loss

    def spy(*args, **objective):
        asked.append(objective.get("particles"))
        return own(*args, **objective)

    monkeypatch.setattr(bnn, "fast_loss", spy)
    X = torch.randn(16, 2)
    bnn.fit(X, X.sum(-1), epochs=1, elbo="alpha", num_particles=20, progress=False, seed=0)
    assert asked == [20]


def test_a_model_without_a_plain_torch_loss_says_so():
    """The hooks' defaults, which ``HiddenLayerBNN`` keeps: no plain-torch loss (Pyro's path),
    and why."""
    model = bp.HiddenLayerBNN(2, [4], 1, bp.Gaussian(0.1))
    assert model.fast_loss() is None and model.fast_loss(True, alpha=0.5, particles=3) is None
    assert (
        model.why_no_fast_loss()
        == "HiddenLayerBNN has no plain-torch loss (only VariationalBNN has)"
    )
