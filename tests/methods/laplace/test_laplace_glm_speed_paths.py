"""The diagonal Laplace's per-layer path against its full-Jacobian path: where every Bayesian
parameter is a plain ``nn.Linear``'s weight or bias, ``fit``'s ``diag(H)`` and the GLM variance
come from each layer's output Jacobians ``δ`` and inputs ``a`` (a weight's Jacobian is
``δ ⊗ a``), never the ``(N, O, P)`` Jacobians; elsewhere (a conv, a layer run twice or on a
sequence, tied or overridden layers) the full Jacobians, as before.

Tolerances: both paths sum the same terms in another order and grouping (per unit and layer
instead of over all ``P`` at once): the variance's terms ``J² / (h + λ)`` are all non-negative,
so the two agree to a few ulps per entry; ``diag(H)`` of a categorical subtracts
``(Σ_o p_o J_o)²`` from ``Σ_o p_o J_o²``, whose cancellation can leave an entry far below the
others, so ``H`` is compared against its largest entry. Observed: ~5e-7 in float32, ~6e-16 in
float64; the bounds, 1e-5 and 1e-10, leave two orders of magnitude and more, while a wrong term
(a layer missed, a bias counted twice, another row's inputs) is off by O(1)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import bnn_pyro.methods.laplace.predictive as predictive
from bnn_pyro.methods import LaplaceApproximation
from bnn_pyro.methods.laplace import curvature

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
OUTS = {"classification": 3, "regression": 2}


class _Twice(nn.Module):
    """One linear layer run twice: its Jacobian is a sum of two ``δ ⊗ a``."""

    def __init__(self, d_out: int) -> None:
        super().__init__()
        self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.inner(torch.tanh(self.inner(x)))))


class _Tied(nn.Module):
    """Two layers sharing one weight (``named_parameters`` lists it once)."""

    def __init__(self, d_out: int) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, d_out)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))


class _Scaled(nn.Linear):
    """An ``nn.Linear`` with a forward of its own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


def _mlp(d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, d))


def _no_bias(d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 10, bias=False), nn.Tanh(), nn.Linear(10, d))


def _conv(d: int) -> nn.Module:
    return nn.Sequential(
        nn.Unflatten(1, (1, 4)), nn.Conv1d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4, d)
    )


def _sequence(d: int) -> nn.Module:
    """The first linear layer on ``(1, 2, 2)``: two positions of one row."""
    return nn.Sequential(
        nn.Unflatten(1, (2, 2)), nn.Linear(2, 5), nn.Tanh(), nn.Flatten(), nn.Linear(10, d)
    )


def _own_forward(d: int) -> nn.Module:
    return nn.Sequential(_Scaled(4, 6), nn.Tanh(), nn.Linear(6, d))


#: name: (net of its outputs, subset, whether the per-layer path applies)
CASES = {
    "mlp": (_mlp, "all", True),
    "no bias": (_no_bias, "all", True),
    "last layer": (_mlp, "last_layer", True),
    "conv": (_conv, "all", False),
    "conv, last layer": (_conv, "last_layer", True),
    "sequence": (_sequence, "all", False),
    "run twice": (_Twice, "all", False),
    "tied": (_Tied, "all", False),
    "own forward": (_own_forward, "all", False),
}


def _problem(task: str, dtype: torch.dtype, n: int = 50):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g, dtype=dtype)
    if task == "classification":
        return x, torch.randint(0, OUTS[task], (n,), generator=g)
    return x, torch.randn(n, OUTS[task], generator=g, dtype=dtype)


def _fitted(net: nn.Module, task: str, x, y, **kw) -> LaplaceApproximation:
    noise = {"noise_scale": 0.4} if task == "regression" else {}
    la = LaplaceApproximation(copy.deepcopy(net), task, hessian_structure="diag", **noise, **kw)
    la.fit(x, y, epochs=0, progress=False, batch_size=16)
    return la


def _forbid_full_jacobians(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the per-layer path took the full Jacobians")

    monkeypatch.setattr(curvature, "output_jacobians", refuse)
    monkeypatch.setattr(predictive, "output_jacobians", refuse)


def _both(monkeypatch, net, task, x, y, per_layer: bool, **kw):
    """The posterior fitted and read through the full Jacobians, then the default path (with the
    full Jacobians refused where the per-layer path is to apply)."""
    x_new = 2 * _problem(task, x.dtype, 30)[0]
    with monkeypatch.context() as m:
        m.setattr(curvature, "PER_LAYER", False)
        ref = _fitted(net, task, x, y, **kw)
        ref_out = (ref._hessian, ref.glm_variance(x_new), *ref.predict(x_new))
    with monkeypatch.context() as m:
        if per_layer:
            _forbid_full_jacobians(m)
        fast = _fitted(net, task, x, y, **kw)
        fast_out = (fast._hessian, fast.glm_variance(x_new, chunk_size=7), *fast.predict(x_new))
    return fast, ref_out, fast_out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_per_layer_path_equals_the_full_jacobians(monkeypatch, case, task, dtype):
    make, subset, per_layer = CASES[case]
    torch.manual_seed(0)
    net = make(OUTS[task]).to(dtype)
    x, y = _problem(task, dtype)
    fast, ref_out, fast_out = _both(monkeypatch, net, task, x, y, per_layer, subset=subset)
    params = {n: p.detach() for n, p in fast.model.named_parameters() if n in fast._shapes}
    rows = curvature.layer_rows(fast.structure, fast.model, params, x)
    assert (rows is not None) == per_layer
    tol = TOL[dtype]
    h_ref, h = ref_out[0], fast_out[0]
    assert (h - h_ref).abs().max() <= tol * h_ref.abs().max(), (h - h_ref).abs().max()
    for got, want in zip(fast_out[1:], ref_out[1:], strict=True):  # variance, mean, variance
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()))
    torch.testing.assert_close(fast_out[1], ref_out[1], rtol=tol, atol=0)  # positive: per entry


@pytest.mark.parametrize("prior", ["layerwise", "diagonal"])
def test_a_prior_per_tensor_or_per_coordinate_takes_the_per_layer_path_too(monkeypatch, prior):
    torch.manual_seed(0)
    net = _mlp(3).double()
    x, y = _problem("classification", torch.float64)
    sizes = [p.numel() for p in net.parameters()]
    if prior == "layerwise":
        lam = tuple(0.5 + i for i in range(len(sizes)))
    else:
        lam = tuple((0.1 + torch.rand(sum(sizes), dtype=torch.float64)).tolist())
    _, ref_out, fast_out = _both(monkeypatch, net, "classification", x, y, True,
                                 prior_precision=lam)  # fmt: skip
    for got, want in zip(fast_out[1:], ref_out[1:], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=0)


def test_the_per_layer_blocks_keep_under_the_bound(monkeypatch):
    """``rows x O x Σ out`` numbers of ``δ`` per pass at most (one row at the least), with the
    same numbers as in one pass."""
    torch.manual_seed(0)
    net = _mlp(3).double()
    x, y = _problem("classification", torch.float64)
    whole = _fitted(net, "classification", x, y)
    per_row = 3 * (12 + 8 + 3) * 8  # O x Σ out x 8 bytes
    seen = []

    def spy(*args, **kwargs):
        deltas, inputs, out = real(*args, **kwargs)
        seen.append((len(out), sum(d.numel() * d.element_size() for d in deltas.values())))
        return deltas, inputs, out

    real = curvature.layer_jacobians
    monkeypatch.setattr(curvature, "JACOBIAN_BLOCK_BYTES", 3 * per_row)
    monkeypatch.setattr(curvature, "layer_jacobians", spy)
    monkeypatch.setattr(predictive, "layer_jacobians", spy)
    _forbid_full_jacobians(monkeypatch)
    blocked = _fitted(net, "classification", x, y)
    variance = blocked.glm_variance(x)
    assert seen and max(size for _, size in seen) <= 3 * per_row
    assert {rows for rows, _ in seen} == {3, 2}  # 16-row batches, 50 rows: 3s and the rest
    torch.testing.assert_close(blocked._hessian, whole._hessian, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(variance, whole.glm_variance(x), rtol=1e-12, atol=0)


def test_full_and_kron_do_not_depend_on_the_switch(monkeypatch):
    torch.manual_seed(0)
    net = _mlp(3).double()
    x, y = _problem("classification", torch.float64)
    for structure in ("full", "kron"):
        la = LaplaceApproximation(copy.deepcopy(net), hessian_structure=structure)
        la.fit(x, y, epochs=0, progress=False)
        on = la.glm_variance(x)
        with monkeypatch.context() as m:
            m.setattr(curvature, "PER_LAYER", False)
            assert torch.equal(la.glm_variance(x), on)


def test_glm_variance_and_covariance_run_on_the_librarys_threads(monkeypatch):
    """One thread inside (the library's default) whatever torch's own setting outside."""
    torch.manual_seed(0)
    la = _fitted(_mlp(3).double(), "classification", *_problem("classification", torch.float64))
    counts = []

    def spy(real):
        def counted(*args, **kwargs):
            counts.append(torch.get_num_threads())
            return real(*args, **kwargs)

        return counted

    for name in ("layer_jacobians", "output_jacobians"):  # the variance's, the covariance's
        monkeypatch.setattr(predictive, name, spy(getattr(curvature, name)))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        la.glm_variance(torch.randn(3, 4, dtype=torch.float64))
        la.glm_covariance(torch.randn(3, 4, dtype=torch.float64))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert counts == [1, 1]
