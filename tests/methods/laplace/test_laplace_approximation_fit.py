"""``LaplaceApproximation.fit``'s plumbing (``bnn_pyro/methods/laplace/laplace.py``): where the
net and the data go, which calls sum over a ``torch.distributed`` group, the MAP phase and its
history, and the mode the curvature is taken in.

A one-CPU machine has one real device, so the device a call receives is read off the call (a
net that records ``.to``, wrappers around the module's ``curvature`` and ``residual_sigma``
that record their arguments and then run them) or off ``"meta"`` (the second device
``check_device`` accepts everywhere). The summing over ranks is checked on a simulated group
of two ranks whose other rank holds a copy of this rank's part: a sum over the ranks is then
twice this rank's own.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro.methods.laplace.laplace as laplace_module
from bnn_pyro.methods import LaplaceApproximation
from bnn_pyro.training import History, distributed


class _RecordingNet(nn.Sequential):
    """A ``Sequential`` that records the arguments of each ``.to`` call on it."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__(*layers)
        self.moves: list[tuple] = []

    def to(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.moves.append(args)
        return super().to(*args, **kwargs)


def _net(d_out: int = 1, cls: type = nn.Sequential) -> nn.Module:
    torch.manual_seed(0)
    return cls(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, d_out)).double()


def _data(n: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x, torch.randn(n, 1, generator=g, dtype=torch.float64)


def _spy(monkeypatch, name: str) -> list[dict]:
    """Wrap ``laplace_module.<name>`` so each call's arguments are recorded (by name)."""
    original, calls = getattr(laplace_module, name), []
    keys = ("model", "batches", "device", "reduce")

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append({**dict(zip(keys, args, strict=False)), **kwargs, "n_args": len(args)})
        return original(*args, **kwargs)

    monkeypatch.setattr(laplace_module, name, wrapper)
    return calls


def test_a_loader_fit_sends_the_nets_device_and_no_reduction(monkeypatch):
    """``fit(loader)``: the noise estimate and the curvature receive the net's device (CPU here)
    and ``reduce=False`` (a loader is the whole data on every rank), whether ``device`` comes
    as a keyword, positionally (the seed API) or not at all."""
    x, y = _data()
    sigma_calls, curv_calls = _spy(monkeypatch, "residual_sigma"), _spy(monkeypatch, "curvature")
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    hessians = []
    for args, kwargs in [((), {}), ((), {"device": "cpu"}), (("cpu",), {})]:
        la = LaplaceApproximation(_net(), "regression")
        assert la.fit(loader, *args, **kwargs) == History()
        hessians.append(la._hessian)
    cpu = torch.device("cpu")
    assert [(c["device"], c["reduce"], c["n_args"]) for c in sigma_calls] == [(cpu, False, 4)] * 3
    assert [(c["device"], c["reduce"]) for c in curv_calls] == [(cpu, False)] * 3
    # the same data and net: the same H (bit for bit) whichever way the device came
    assert torch.equal(hessians[0], hessians[1]) and torch.equal(hessians[0], hessians[2])


def test_a_tensor_fit_sends_the_nets_device_and_reduces(monkeypatch):
    """``fit(x, y)`` (and ``after_training`` without a device, as the stacked fit calls it):
    the posterior is fitted on the net's device with ``reduce=True`` (the rows are this rank's
    part of the data)."""
    x, y = _data()
    sigma_calls, curv_calls = _spy(monkeypatch, "residual_sigma"), _spy(monkeypatch, "curvature")
    la = LaplaceApproximation(_net(), "regression")
    la.fit(x, y, epochs=0, progress=False)
    settings = type("S", (), {"batch_size": 32})()
    la.after_training(x, y, settings)
    cpu = torch.device("cpu")
    assert [(c["device"], c["reduce"], c["n_args"]) for c in sigma_calls] == [(cpu, True, 4)] * 2
    assert [(c["device"], c["reduce"]) for c in curv_calls] == [(cpu, True)] * 2


def test_the_device_argument_moves_the_net_once_by_name():
    """``fit(x, y, device=...)``, ``fit(loader, device=...)`` and ``fit(loader, device)`` move
    the net with ``.to(torch.device(device))``; without one the net is not moved."""
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=10)
    calls = [
        lambda la: la.fit(x, y, epochs=0, progress=False, device="cpu"),
        lambda la: la.fit(loader, device="cpu"),
        lambda la: la.fit(loader, "cpu"),
        lambda la: la.fit(x, y, epochs=0, progress=False),
        lambda la: la.fit(loader),
    ]
    moves = []
    for call in calls:
        net = _net(cls=_RecordingNet)
        call(LaplaceApproximation(net, "regression", noise_scale=0.5))
        moves.append(net.moves)
    cpu = (torch.device("cpu"),)
    assert moves == [[cpu], [cpu], [cpu], [], []]


def test_the_noise_reaches_the_curvature_on_the_parameters_device(monkeypatch):
    """The noise std goes to ``curvature`` as a tensor in the parameters' dtype and on their
    device: a net moved to ``"meta"`` gets a meta ``sigma`` (the curvature itself, which needs
    values, is replaced by a stand-in recording its arguments)."""
    seen = {}

    def fake_curvature(model, params, batches, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.update(kw)
        size = sum(p.numel() for p in params.values())
        return torch.zeros(size, dtype=torch.float64, device="meta"), -1.0, 7

    monkeypatch.setattr(laplace_module, "curvature", fake_curvature)
    x, y = _data()
    la = LaplaceApproximation(_net(), "regression", noise_scale=0.5)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10), device="meta")
    assert seen["sigma"].device.type == "meta" and seen["sigma"].dtype == torch.float64
    assert seen["device"] == torch.device("meta") and la._mean.device.type == "meta"
    assert (la._loglik, la._n_data) == (-1.0, 7)


def test_a_two_rank_group_sums_the_tensor_fit_and_not_the_loader_fit(monkeypatch):
    """Simulated rank 0 of 2, whose partner holds a copy of its rows: ``fit(x, y)`` takes this
    rank's rows (``distributed.partition``: the even ones) and sums ``H``, the log-likelihood
    and the count over the ranks (twice this rank's own); ``fit(loader)`` sums nothing.
    Reference: the same net fitted without a group on the even rows, and on all of them.
    Tolerance: the same sums in a different grouping, float64 rounding."""
    x, y = _data(24)
    ref_even = LaplaceApproximation(_net(), "regression")
    ref_even.fit(DataLoader(TensorDataset(x[::2], y[::2]), batch_size=100))
    ref_all = LaplaceApproximation(_net(), "regression")
    ref_all.fit(DataLoader(TensorDataset(x, y), batch_size=100))

    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "all_sum", lambda t: 2 * t)
    tensor_fit = LaplaceApproximation(_net(), "regression")
    tensor_fit.fit(x, y, epochs=0, progress=False)
    loader_fit = LaplaceApproximation(_net(), "regression")
    loader_fit.fit(DataLoader(TensorDataset(x, y), batch_size=100))

    torch.testing.assert_close(tensor_fit._hessian, 2 * ref_even._hessian)
    assert abs(tensor_fit._loglik - 2 * ref_even._loglik) < 1e-9 * abs(ref_even._loglik)
    assert tensor_fit._n_data == 24
    torch.testing.assert_close(loader_fit._hessian, ref_all._hessian)
    assert (loader_fit._loglik, loader_fit._n_data) == (ref_all._loglik, 24)


def test_the_curvature_is_taken_in_eval_mode():
    """Dropout is off while the noise and ``H`` are computed (and the flags are restored): a
    net with ``Dropout(0.5)`` gets the noise std and ``H`` of the same net without it, bit for
    bit (in train mode half the features would be dropped at random)."""
    x, y = _data(40)
    plain = _net()
    torch.manual_seed(0)
    dropped = nn.Sequential(plain[0], plain[1], nn.Dropout(0.5), plain[2])
    dropped.train()
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    ref = LaplaceApproximation(plain, "regression")
    ref.fit(loader)
    la = LaplaceApproximation(dropped, "regression")
    la.fit(loader)
    assert la.noise_scale == ref.noise_scale
    assert torch.equal(la._hessian, ref._hessian)
    assert all(m.training for m in dropped.modules())


def test_epochs_zero_trains_nothing_and_shows_no_bar(capsys):
    """``fit(x, y, epochs=0)``: an empty ``History`` (not None), the net's weights untouched,
    and no progress bar even with ``progress=True`` (nothing runs)."""
    x, y = _data()
    net = _net()
    before = [p.detach().clone() for p in net.parameters()]
    la = LaplaceApproximation(net, "regression")
    history = la.fit(x, y, epochs=0, progress=True)
    assert isinstance(history, History) and history == {}
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    assert capsys.readouterr().err == ""


def test_one_epoch_is_a_map_phase_with_its_bar_and_validation_loss(capsys):
    """``fit(x, y, epochs=1, validation_data=...)`` trains one epoch (the weights move and the
    posterior mean is the trained weights), the bar starts ``"Laplace (MAP): "``, and the
    history's ``val_loss`` is the squared error of the trained net on the validation rows
    (the mean squared error in eval mode; the one epoch's value, so the net's final one)."""
    x, y = _data(32)
    xv, yv = x[:8] + 1.0, y[:8]
    net = _net()
    before = [p.detach().clone() for p in net.parameters()]
    la = LaplaceApproximation(net, "regression")
    history = la.fit(x, y, epochs=1, lr=0.05, progress=True, validation_data=(xv, yv), seed=0)
    assert capsys.readouterr().err.lstrip("\r").startswith("Laplace (MAP): ")  # tqdm's "desc: "
    assert len(history["loss"]) == 1 and len(history["val_loss"]) == 1
    assert not any(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
    trained = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    assert torch.equal(la._mean, trained)
    with torch.no_grad():
        expected = float((net(xv) - yv.reshape(len(yv), -1)).pow(2).mean())
    # the same computation on the same trained net: float64 rounding only
    assert abs(history["val_loss"][0] - expected) <= 1e-12 * expected
