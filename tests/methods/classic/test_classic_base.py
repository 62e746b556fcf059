"""What every classic method's ``fit`` shares (``methods/classic/base.py``): the likelihood's
refusal naming the method, a ``DataLoader`` gathered and checked batch by batch, the input
shape remembered for ``predict`` (single and stacked fits), the default progress bar, a
finished resumable run extended to more epochs, the probe's refusal of a net that does not
output ``(N, O)``, and the checkpoint settings."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from bnn_pyro.likelihoods import Bernoulli, HeteroscedasticGaussian


class Unreadable(nn.Module):
    """A net whose first layer sits inside an attribute ``input_spec`` cannot read: only the
    rows a fit saw fix the inputs ``predict`` accepts."""

    def __init__(self, inputs: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(inputs, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class ThreeDim(nn.Module):
    """A net that outputs ``(N, O, 1)``, not ``(N, O)``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 2)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.layer(x)).unsqueeze(-1)


def data(n: int = 16, d: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(-1)


@pytest.mark.parametrize(
    ("name", "likelihood", "message"),
    [
        (
            "swag",
            HeteroscedasticGaussian(),
            "SWAG supports a Gaussian or Categorical likelihood, got "
            "HeteroscedasticGaussian(min_scale=0.001)",
        ),
        (
            "dropout",
            Bernoulli(),
            "MCDropout supports a Gaussian or Categorical likelihood, got Bernoulli()",
        ),  # fmt: skip
        # DKL is regression only: its refusal names the Gaussian alone
        (
            "dkl",
            HeteroscedasticGaussian(),
            "DKL supports a Gaussian likelihood, got HeteroscedasticGaussian(min_scale=0.001)",
        ),
        # the ensemble's variance heads make the heteroscedastic Gaussian one of its own
        (
            "ensemble",
            Bernoulli(),
            "DeepEnsemble supports a Gaussian or Categorical or HeteroscedasticGaussian "
            "likelihood, got Bernoulli()",
        ),
    ],
)
def test_a_likelihood_the_method_cannot_use_is_refused_naming_the_method(name, likelihood, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        bp.make(name, bp.nn.mlp(2, [4], 1), likelihood)


def test_a_heteroscedastic_gaussian_is_taken_by_the_ensemble_alone():
    """The ensemble passes ``heteroscedastic=True``; every other classic method keeps the
    default (``False``) and refuses it (above)."""
    ens = bp.make("ensemble", bp.nn.mlp(2, [4], 2), HeteroscedasticGaussian(), num_models=2)
    assert isinstance(ens.likelihood, HeteroscedasticGaussian)


# ---------------------------------------------------------------------- DataLoader
def test_a_dataloader_fits_as_its_tensors_do():
    x, y = data()
    loader = DataLoader(TensorDataset(x, y), batch_size=5)  # batches of 5, 5, 5, 1
    runs = []
    for args in ((loader,), (x, y)):
        torch.manual_seed(0)
        m = bp.make("dropout", bp.nn.mlp(3, [8], 1, dropout=0.1), bp.Gaussian(0.5))
        runs.append((m.fit(*args, epochs=3, batch_size=4, seed=0, progress=False), m))
    (h_loader, m_loader), (h_tensors, m_tensors) = runs
    assert h_loader["loss"] == h_tensors["loss"]
    probe = torch.randn(4, 3)
    torch.testing.assert_close(
        m_loader.predict(probe, seed=1)[0], m_tensors.predict(probe, seed=1)[0], rtol=0, atol=0
    )


def test_a_dataloader_of_indices_fits_a_net_that_starts_with_an_embedding():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 10, (12, 2), generator=g)
    y = idx.sum(-1).float()
    net = nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Dropout(0.1), nn.Linear(6, 1))
    m = bp.make("dropout", net, bp.Gaussian(0.5))
    history = m.fit(DataLoader(TensorDataset(idx, y), batch_size=5), epochs=2, progress=False)
    assert len(history["loss"]) == 2
    assert m.predict(idx[:3])[0].shape == (3, 1)


def test_a_dataloader_of_indices_is_refused_for_a_net_without_an_embedding():
    """Each batch's ``x`` is checked by name as it is gathered, before any training."""
    idx = torch.randint(0, 10, (6, 3))
    m = bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(0.5))
    loader = DataLoader(TensorDataset(idx, idx.sum(-1).float()), batch_size=4)
    message = (
        "x of batch 0 must have a floating dtype, got torch.int64 (integer indices only for a "
        "net with an nn.Embedding)"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        m.fit(loader, epochs=1, progress=False)


def test_a_dataloader_with_a_separate_y_is_refused():
    x, y = data()
    m = bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(0.5))
    with pytest.raises(TypeError, match=r"^y must be None when x is a DataLoader"):
        m.fit(DataLoader(TensorDataset(x, y), batch_size=4), y, epochs=1, progress=False)


# ---------------------------------------------------------------------- the input shape
def test_predict_checks_the_inputs_against_the_rows_the_fit_saw():
    """The net's first layer is out of ``input_spec``'s sight: the fitted rows decide."""
    x, y = data()
    m = bp.make("dropout", Unreadable(), bp.Gaussian(0.5))
    m.fit(x, y, epochs=1, progress=False)
    assert m.predict(x[:2])[0].shape == (2, 1)  # the fitted width passes
    message = "x must have 3 feature(s) per row (shape (N, 3)), got shape (5, 4)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        m.predict(torch.randn(5, 4))


def test_a_stacked_fit_remembers_each_members_input_rows():
    x, y = data()
    members = [bp.make("dropout", Unreadable(), bp.Gaussian(0.5)) for _ in range(2)]
    bp.fit_stacked(members, x, y, epochs=1, progress=False, seeds=[0, 1])
    message = "x must have 3 feature(s) per row (shape (N, 3)), got shape (5, 4)"
    for m in members:
        assert m.predict(x[:2])[0].shape == (2, 1)
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            m.predict(torch.randn(5, 4))


@pytest.mark.parametrize(
    ("name", "options", "what"),
    [("dropout", {}, "model"), ("ensemble", {"num_models": 2}, "member")],
)
def test_a_net_that_does_not_output_rows_of_outputs_is_refused_naming_it(name, options, what):
    x, y = data()
    m = bp.make(name, ThreeDim(), bp.Gaussian(0.5), **options)
    message = f"{what} output must have shape (N, O), got (2, 2, 1)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        m.fit(x, y, epochs=1, progress=False)


# ---------------------------------------------------------------------- progress, resume
def test_fit_shows_a_progress_bar_unless_told_not_to(capsys):
    x, y = data()
    bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(0.5)).fit(x, y, epochs=1)
    assert "MCDropout" in capsys.readouterr().err  # tqdm writes to stderr, its desc first
    bp.make("dropout", bp.nn.mlp(3, [4], 1, dropout=0.1), bp.Gaussian(0.5)).fit(
        x, y, epochs=1, progress=False
    )
    assert capsys.readouterr().err == ""


def test_a_finished_resumable_run_goes_on_to_more_epochs(tmp_path):
    """A constant learning rate and no averaging: the file's 2 epochs continue to 4, the run
    a 4-epoch fit gives uninterrupted."""
    x, y = data()
    path = tmp_path / "run.pt"

    def fit(epochs: int, resume: object) -> tuple[dict, bp.BaseBayesianMethod]:
        torch.manual_seed(0)
        m = bp.make("dropout", bp.nn.mlp(3, [8], 1, dropout=0.1), bp.Gaussian(0.5))
        return m.fit(x, y, epochs=epochs, seed=0, progress=False, resume=resume), m

    fit(2, path)
    extended, m_extended = fit(4, path)
    straight, m_straight = fit(4, None)
    assert extended["loss"] == straight["loss"]
    for a, b in zip(m_extended.parameters(), m_straight.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------------- checkpoints
def test_the_checkpoint_settings_hold_the_likelihood_and_rebuild_the_method():
    m = bp.make("swag", bp.nn.mlp(2, [4], 1), bp.Gaussian(0.3), max_num_models=7, num_samples=9)
    config = m.checkpoint_config()
    assert config["likelihood"] == bp.Gaussian(0.3).config()
    assert (config["max_num_models"], config["num_samples"]) == (7, 9)
    rebuilt = type(m).from_checkpoint_config(bp.nn.mlp(2, [4], 1), config)
    assert type(rebuilt) is type(m)
    assert repr(rebuilt.likelihood) == "Gaussian(scale=0.3)"
    assert (rebuilt.max_num_models, rebuilt.num_samples) == (7, 9)  # the options passed on
    assert rebuilt.checkpoint_config() == config
