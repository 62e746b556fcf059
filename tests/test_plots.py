"""The figures carry the right data (line data, band polygons, bar heights), not pixels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bnn_pyro.plots import (  # noqa: E402
    plot_predictive_1d,
    plot_regression_calibration,
    plot_reliability_diagram,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _by_gid(ax, gid):
    found = [a for a in ax.get_children() if a.get_gid() == gid]
    assert len(found) == 1, f"expected one artist with gid {gid!r}, found {len(found)}"
    return found[0]


def _band_limits(band, xs):
    """Lowest and highest polygon vertex at each x: the band's lower and upper curves."""
    vertices = np.concatenate([p.vertices for p in band.get_paths()])
    lower = np.array([vertices[vertices[:, 0] == x, 1].min() for x in xs])
    upper = np.array([vertices[vertices[:, 0] == x, 1].max() for x in xs])
    return lower, upper


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(30, 1, generator=g) * 6 - 3  # unsorted on purpose
    mean = torch.sin(x)
    std = 0.1 + torch.rand(30, 1, generator=g)
    return x, mean, std


def test_predictive_1d_mean_bands_and_training_points():
    x, mean, std = _data()
    x_train, y_train = torch.tensor([-1.0, 0.5, 2.0]), torch.tensor([0.3, -0.2, 1.0])
    ax = plot_predictive_1d(x, mean, std, x_train=x_train, y_train=y_train, title="demo")
    order = np.argsort(x.squeeze(1).numpy())
    xs, mu, sd = (t.squeeze(1).double().numpy()[order] for t in (x, mean, std))
    line = _by_gid(ax, "predictive_mean")
    np.testing.assert_allclose(line.get_xdata(), xs)
    np.testing.assert_allclose(line.get_ydata(), mu)
    for k in (1, 2):
        lower, upper = _band_limits(_by_gid(ax, f"band_{k}sigma"), xs)
        np.testing.assert_allclose(lower, mu - k * sd, rtol=1e-12)
        np.testing.assert_allclose(upper, mu + k * sd, rtol=1e-12)
    np.testing.assert_allclose(_by_gid(ax, "train").get_offsets(), np.c_[x_train, y_train])
    assert ax.get_title() == "demo"
    assert {"predictive mean", "±1σ", "±2σ", "training data"} <= {
        t.get_text() for t in ax.get_legend().get_texts()
    }


def test_predictive_1d_with_noise_shows_total_bands_and_epistemic_lines():
    x, mean, std = _data()
    fig, ax = plt.subplots()
    out = plot_predictive_1d(x.squeeze(1), mean.squeeze(1), std.squeeze(1), ax=ax, noise_std=0.5)
    assert out is ax and out.figure is fig
    order = np.argsort(x.squeeze(1).numpy())
    xs, mu, sd = (t.squeeze(1).double().numpy()[order] for t in (x, mean, std))
    total = np.sqrt(sd**2 + 0.25)
    lower, upper = _band_limits(_by_gid(ax, "band_2sigma"), xs)
    np.testing.assert_allclose(lower, mu - 2 * total, rtol=1e-12)
    np.testing.assert_allclose(upper, mu + 2 * total, rtol=1e-12)
    np.testing.assert_allclose(_by_gid(ax, "epistemic_2sigma_upper").get_ydata(), mu + 2 * sd)
    np.testing.assert_allclose(_by_gid(ax, "epistemic_2sigma_lower").get_ydata(), mu - 2 * sd)


def test_reliability_diagram_bars_are_the_bin_accuracies():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(2 * torch.randn(300, 3, generator=g), dim=1)
    labels = torch.randint(0, 3, (300,), generator=g)
    ax = plot_reliability_diagram(probs, labels, n_bins=10)
    # Independent recomputation of the bins (right-closed, as documented).
    conf, pred = probs.max(1).values.numpy(), probs.argmax(1).numpy()
    bins = np.clip(np.ceil(conf * 10).astype(int) - 1, 0, 9)
    (bars,) = [c for c in ax.containers if c.get_label() == "accuracy"]
    filled = sorted(set(bins.tolist()))
    assert len(bars.patches) == len(filled)
    for rect, b in zip(bars.patches, filled, strict=True):
        assert rect.get_x() == pytest.approx(b / 10) and rect.get_width() == pytest.approx(0.1)
        assert rect.get_height() == pytest.approx((pred == labels.numpy())[bins == b].mean())
    dots = _by_gid(ax, "confidence")
    np.testing.assert_allclose(dots.get_ydata(), [conf[bins == b].mean() for b in filled], 1e-6)
    ece = sum((bins == b).mean() * abs(bars.patches[i].get_height() - dots.get_ydata()[i])
              for i, b in enumerate(filled))  # fmt: skip
    assert ax.get_title() == f"Reliability diagram (ECE = {ece:.4f})"


def test_regression_calibration_curve_carries_the_coverage():
    g = torch.Generator().manual_seed(2)
    y = torch.randn(500, generator=g, dtype=torch.float64)
    levels = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    ax = plot_regression_calibration(
        torch.zeros(1, 500, dtype=torch.float64), 0.5, y, levels=levels
    )
    line = _by_gid(ax, "coverage")
    np.testing.assert_allclose(line.get_xdata(), levels.numpy())
    # Coverage of +-0.5 z intervals for N(0, 1) data, counted directly.
    z = np.array([0.2533471, 0.6744898, 1.6448536])  # Phi^-1((1 + p) / 2), 7 digits
    expected = [(np.abs(y.numpy()) <= 0.5 * zi).mean() for zi in z]
    np.testing.assert_allclose(line.get_ydata(), expected)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"x": [0.0, 1.0]}, TypeError, "x must be a torch.Tensor or numpy array"),
        ({"x": torch.zeros(4, 2)}, ValueError, r"x must have shape \(N,\) or \(N, 1\)"),
        ({"mean": torch.zeros(3)}, ValueError, "mean must have 4 entries"),
        ({"std": -torch.ones(4)}, ValueError, "std must be >= 0"),
        ({"x_train": torch.zeros(2)}, ValueError, "both x_train and y_train"),
        ({"x_train": torch.zeros(2), "y_train": torch.zeros(3)}, ValueError, "y_train must have"),
        ({"noise_std": -0.1}, ValueError, "noise_std"),
        ({"ax": "not axes"}, TypeError, "ax must be a matplotlib Axes or None, got str"),
    ],
)
def test_predictive_1d_bad_arguments_raise(kwargs, error, match):
    args = {"x": torch.arange(4.0), "mean": torch.zeros(4), "std": torch.ones(4)} | kwargs
    with pytest.raises(error, match=match):
        plot_predictive_1d(**args)
    assert not plt.get_fignums()  # raised before a figure was made


def test_metric_plots_accept_tensors_that_require_grad():
    """Tensors in an autograd graph plot the numbers they hold, recomputed here from their
    detached values with numpy."""
    logits = torch.randn(20, 3, generator=torch.Generator().manual_seed(3), requires_grad=True)
    labels = torch.arange(20) % 3
    probs = torch.softmax(logits, dim=1)
    assert probs.requires_grad
    ax = plot_reliability_diagram(probs, labels, n_bins=4)
    p = probs.detach().double().numpy()
    conf, pred = p.max(1), p.argmax(1)
    bins = np.clip(np.ceil(conf * 4).astype(int) - 1, 0, 3)  # right-closed bins, as documented
    filled = sorted(set(bins.tolist()))
    (bars,) = [c for c in ax.containers if c.get_label() == "accuracy"]
    assert [round(r.get_x() * 4) for r in bars.patches] == filled
    heights = [r.get_height() for r in bars.patches]
    np.testing.assert_allclose(
        heights, [(pred == labels.numpy())[bins == b].mean() for b in filled]
    )
    dots = _by_gid(ax, "confidence").get_ydata()
    np.testing.assert_allclose(dots, [conf[bins == b].mean() for b in filled], rtol=1e-6)

    # one Gaussian per point, N(l, 1) with y = 0: inside the central level-p interval exactly
    # when |l| <= Phi^-1((1 + p) / 2)
    locs = logits[None, :, :1]  # (1, 20, 1), requires grad
    levels = torch.tensor([0.25, 0.5, 0.75, 0.95], dtype=torch.float64)
    ax = plot_regression_calibration(locs, 1.0, torch.zeros(20, 1), levels=levels)
    line = _by_gid(ax, "coverage")
    np.testing.assert_allclose(line.get_xdata(), levels.numpy())
    radius = torch.special.ndtri((1 + levels) / 2).numpy()
    l_abs = np.abs(logits.detach().double().numpy()[:, 0])
    np.testing.assert_allclose(line.get_ydata(), [(l_abs <= r).mean() for r in radius])
    assert 0 < line.get_ydata()[0] < line.get_ydata()[-1] < 1  # a curve, not a constant


def test_metric_plots_validate_through_the_metrics():
    with pytest.raises(ValueError, match="labels must lie"):
        plot_reliability_diagram(torch.tensor([[0.5, 0.5]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="scales must be positive"):
        plot_regression_calibration(torch.zeros(2, 3), 0.0, torch.zeros(3))
    assert not plt.get_fignums()
