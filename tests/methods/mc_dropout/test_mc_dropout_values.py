"""``MCDropout`` pinned by value: its argument checks word for word, its defaults, how it
batches the S passes, the warning for a net without dropout, the progress bar's name, the
seeded noise refit after a regression fit, and ``predict_entropy``."""

from __future__ import annotations

import copy
import math
import os
import re
import warnings

import pytest
import torch
import torch.nn as nn

from bnn_pyro.methods.mc_dropout.dropout import MCDropout


def _net(outputs: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, outputs))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"model": 3}, TypeError, "model must be a torch.nn.Module, got int"),
        ({"num_samples": 0}, ValueError, "num_samples must be an int >= 1, got 0"),
        ({"dropout_rate": "a"}, TypeError, "dropout_rate must be a float or None, got str"),
        ({"dropout_rate": 1.0}, ValueError, r"dropout_rate must be in \[0, 1\), got 1.0"),
        ({"functional_dropout": "y"}, TypeError,
         r"functional_dropout must be a bool, got str \('y'\)"),
        ({"samples_per_pass": 0}, ValueError, "samples_per_pass must be an int >= 1, got 0"),
    ],
)  # fmt: skip
def test_every_argument_is_refused_by_name(options, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        MCDropout(**{"model": _net(), **options})


def test_the_defaults_and_the_settings_kept():
    """20 passes by default; a rate of 0 is allowed (a deterministic net) and set on every
    dropout module; the rate and the samples per pass are kept as given."""
    mc = MCDropout(_net())
    assert mc.num_samples == 20 and mc.dropout_rate is None and mc.samples_per_pass is None
    assert mc.predict(torch.randn(4, 2), return_samples=True)[2].shape == (20, 4, 3)
    zero = MCDropout(_net(), dropout_rate=0.0, samples_per_pass=3)
    assert zero.dropout_rate == 0.0 and zero.samples_per_pass == 3
    assert zero.model[2].p == 0.0
    _, var = zero.predict(torch.randn(4, 2))
    assert float(var.abs().max()) < 1e-12  # no dropout: every pass the same (up to round-off)


def _pass_sizes(mc: MCDropout, x: torch.Tensor, num_samples: int) -> list[int]:
    sizes: list[int] = []
    hook = mc.model[0].register_forward_hook(lambda m, i, o: sizes.append(len(i[0])))
    try:
        out = mc._sample_outputs(x, num_samples, seed=0)
    finally:
        hook.remove()
    assert out.shape[0] == num_samples
    return sizes


def test_the_passes_are_batched_by_samples_per_pass_or_by_rows():
    """``samples_per_pass=2`` over 5 samples: passes of 2, 2 and 1 copies of the 7 rows; left
    to choose, as many copies as 65,536 rows hold, but at least one: 40,000 rows go one copy
    per pass."""
    x = torch.randn(7, 2)
    assert _pass_sizes(MCDropout(_net(), samples_per_pass=2), x, 5) == [14, 14, 7]
    assert _pass_sizes(MCDropout(_net()), x, 5) == [35]
    big = torch.randn(40_000, 2)
    assert _pass_sizes(MCDropout(_net()), big, 3) == [40_000] * 3


def test_a_net_without_dropout_warns_where_it_was_made_and_one_with_dropout_does_not():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MCDropout(_net())  # a dropout module: silent
        MCDropout(nn.Linear(2, 1), functional_dropout=True)  # the net's own F.dropout: silent
    with pytest.warns(UserWarning) as caught:
        MCDropout(nn.Linear(2, 1))
    assert len(caught) == 1
    assert str(caught[0].message) == (
        "MCDropout: no dropout module (nn.Dropout, ...) found in the model: all samples will be "
        "identical (zero variance). Add nn.Dropout layers, or pass functional_dropout=True if "
        "the net calls F.dropout itself."
    )
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut's trampoline adds a frame of its own
        assert caught[0].filename == __file__  # stacklevel 2: the line that made it


def test_the_progress_bar_is_named_after_the_method(capsys):
    mc = MCDropout(_net(1), likelihood="regression")
    x = torch.randn(16, 2)
    mc.fit(x, x.sum(-1), epochs=1, progress=True, seed=0)
    assert re.search(r"(^|\r)MCDropout: ", capsys.readouterr().err)


def test_calling_the_method_is_one_pass_of_its_net():
    mc = MCDropout(_net()).eval()
    x = torch.randn(4, 2)
    assert torch.equal(mc(x), mc.model(x))


def test_the_noise_refit_after_a_regression_fit_follows_the_fits_seed():
    """Two fits of one net under ``seed=0`` from different global RNG states: the same noise
    (the residuals' MC mean is drawn under the fit's seed, not the global RNG)."""
    x = torch.linspace(-1, 1, 32).unsqueeze(-1)
    y = x.squeeze(-1) ** 2
    net = nn.Sequential(nn.Linear(1, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    noises = []
    for state in (1, 2):
        mc = MCDropout(copy.deepcopy(net), num_samples=4, likelihood="regression")
        torch.manual_seed(state)
        mc.fit(x, y, epochs=2, progress=False, seed=0)
        noises.append(torch.as_tensor(mc.noise_scale).clone())
    assert torch.equal(noises[0], noises[1])


def test_predict_entropy_of_two_or_more_classes_under_its_generator():
    """The entropy of the mean class probabilities, ``-Σ p log p`` per row (at most ``log C``),
    drawn with the given generator (the same seed, the same entropies; another, others); two
    classes are enough; one output is refused by name."""
    x = torch.randn(5, 2)
    mc = MCDropout(_net(2), num_samples=6, dropout_rate=0.5)
    first = mc.predict_entropy(x, generator=torch.Generator().manual_seed(3))
    again = mc.predict_entropy(x, generator=torch.Generator().manual_seed(3))
    other = mc.predict_entropy(x, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first, again) and not torch.equal(first, other)
    mean = mc.predict(x, generator=torch.Generator().manual_seed(3))[0]
    torch.testing.assert_close(first, -(mean * mean.log()).sum(-1))
    assert first.shape == (5,) and bool((first <= math.log(2) + 1e-6).all())
    one = MCDropout(_net(1), num_samples=4, likelihood="regression")
    with pytest.raises(ValueError, match=(
        r"^predict_entropy needs class logits of shape \(N, C\) with C > 1, got per-sample "
        r"outputs of shape \(5, 1\)$"
    )):  # fmt: skip
        one.predict_entropy(x)
