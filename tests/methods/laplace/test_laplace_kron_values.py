"""KFAC's structure (``KroneckerHessian``) on factors built here from random layer Jacobians and
inputs, against dense references: the precision with a prior precision per tensor, its
log-determinant, the eigenvalues in float64, the draws as the documented transform of normal
draws, the GLM variance of a net with nested layer names, and every refusal's whole message."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn as nn

import bnn_pyro as bp
from bnn_pyro.methods.laplace.curvature import output_jacobians
from bnn_pyro.methods.laplace.kron import KroneckerHessian
from bnn_pyro.methods.laplace.structures import map_tensors

F64 = torch.float64
#: two linear layers, 2 -> 3 -> 1: a bias of one entry in the second
SHAPES = {
    "0.weight": torch.Size([3, 2]),
    "0.bias": torch.Size([3]),
    "1.weight": torch.Size([1, 3]),
    "1.bias": torch.Size([1]),
}


def _factors(rows: int = 6, outputs: int = 2):
    """The factors of ``rows`` random rows: ``δ (B, O, out)``, inputs ``(B, in)``, weights in
    ``(0.1, 1.1)``; and the same ``G = Σ δᵀ diag(w) δ``, ``A = Σ a aᵀ`` summed here by loops."""
    g = torch.Generator().manual_seed(0)
    deltas = {"0": torch.randn(rows, outputs, 3, generator=g, dtype=F64),
              "1": torch.randn(rows, outputs, 1, generator=g, dtype=F64)}  # fmt: skip
    inputs = {"0": torch.randn(rows, 2, generator=g, dtype=F64),
              "1": torch.randn(rows, 3, generator=g, dtype=F64)}  # fmt: skip
    weight = 0.1 + torch.rand(rows, outputs, generator=g, dtype=F64)
    s = KroneckerHessian()
    h = s.add_layer_ggn(s.start(SHAPES, torch.zeros(1, dtype=F64)), deltas, inputs, weight, False)
    ref = {}
    for layer in ("0", "1"):
        d, a = deltas[layer], inputs[layer]
        ref[layer + "|G"] = sum(d[b].T @ torch.diag(weight[b]) @ d[b] for b in range(rows))
        ref[layer + "|A"] = sum(torch.outer(a[b], a[b]) for b in range(rows))
    return s, h, ref


def _dense_blocks(ref, rows, lam):
    """``{name: G ⊗ A / N + λ I}`` (a bias: ``G + λ I``) from the loop-summed factors."""
    out = {}
    for name, value in zip(SHAPES, lam, strict=True):
        layer, kind = name.split(".")
        g = ref[layer + "|G"]
        block = torch.kron(g, ref[layer + "|A"]) / rows if kind == "weight" else g
        out[name] = block + value * torch.eye(len(block), dtype=F64)
    return out


def test_start_gives_square_zero_factors_and_refuses_other_shapes():
    """Per weight ``G (out, out)`` and ``A (in, in)``, per bias ``G`` only, all zero, no rows."""
    h = KroneckerHessian().start(SHAPES, torch.zeros(1, dtype=F64))
    shapes = {k: tuple(v.shape) for k, v in h.items()}
    assert shapes == {"n": (), "0.weight|G": (3, 3), "0.weight|A": (2, 2), "0.bias|G": (3, 3),
                      "1.weight|G": (1, 1), "1.weight|A": (3, 3), "1.bias|G": (1, 1)}  # fmt: skip
    assert all(float(v.abs().sum()) == 0.0 for v in h.values())
    message = "^hessian_structure='kron' covers linear layers, got 'c.weight' " + re.escape(
        str(torch.Size([2, 3, 4]))
    )
    with pytest.raises(ValueError, match=message + "$"):
        KroneckerHessian().start({"c.weight": torch.Size([2, 3, 4])}, torch.zeros(1))


def test_the_full_jacobian_entry_points_are_refused_by_name():
    s = KroneckerHessian()
    with pytest.raises(TypeError, match=r"^KroneckerHessian needs the parameters' shapes: call "
                                        r"start\(shapes, like\)$"):  # fmt: skip
        s.zeros(3, torch.zeros(1))
    with pytest.raises(ValueError, match=r"^hessian_structure='kron' is built from the GGN: use "
                                         r"hessian='ggn'$"):  # fmt: skip
        s.add_fisher({}, {})
    with pytest.raises(TypeError, match=r"^KroneckerHessian sums per-layer factors, not full "
                                        r"Jacobians: call add_layer_ggn$"):  # fmt: skip
        s.add_ggn({}, torch.zeros(1, 1, 1), torch.ones(1, 1), None)


@pytest.mark.parametrize("per_tensor", [False, True])
def test_the_precision_adds_each_tensors_prior_precision_to_its_block(per_tensor):
    """``G ⊗ A / N + λ I`` per weight, ``G + λ I`` per bias, against factors summed by loops;
    λ = 0.1 (not a float32 number: an identity of another precision would show, 1.5e-9 off)
    or one λ per tensor given as a ``(P,)`` vector (the one-entry bias included). float64: 1e-13
    is round-off."""
    s, h, ref = _factors()
    values = [0.1, 0.2, 0.3, 0.7] if per_tensor else [0.1] * 4
    blocks = [torch.full((math.prod(v),), x, dtype=F64)
              for v, x in zip(SHAPES.values(), values, strict=True)]  # fmt: skip
    lam = torch.cat(blocks) if per_tensor else 0.1
    got = s.precision(h, lam)
    for name, block in _dense_blocks(ref, 6, values).items():
        torch.testing.assert_close(got[name], block, rtol=1e-13, atol=1e-13)
    logdet = sum(torch.linalg.slogdet(b)[1] for b in _dense_blocks(ref, 6, values).values())
    assert abs(float(s.log_det(h, lam)) - float(logdet)) < 1e-10


def test_a_prior_precision_that_varies_inside_a_tensor_is_refused():
    s, h, _ = _factors()
    lam = torch.ones(13, dtype=F64)
    lam[7] = 2.0  # inside 0.bias's block (entries 6 to 8)
    message = r"^hessian_structure='kron' takes one prior precision per parameter$"
    for call in (s.precision, s.log_det, s.covariance):
        with pytest.raises(ValueError, match=message):
            call(h, lam)


def test_the_eigenvalues_of_float32_factors_are_computed_in_float64():
    """The evidence's eigenvalues ``Λ_G ⊗ Λ_A / N`` (a bias: ``Λ_G``), clipped at 0, from
    float32 factors: float64 numbers, those of the factors' float64 copies to 1e-12 relative
    (a float32 eigensolver is off by about 1e-7)."""
    s, h, _ = _factors()
    h32 = map_tensors(h, lambda t: t.float())
    got = s.eigenvalues(h32)
    assert got.dtype == F64
    expected = []
    for name, shape in SHAPES.items():
        l_g = torch.linalg.eigvalsh(h32[name + "|G"].double()).clamp_min(0)
        if len(shape) == 2:
            l_a = torch.linalg.eigvalsh(h32[name + "|A"].double()).clamp_min(0)
            l_g = torch.outer(l_g, l_a).flatten() / 6
        expected.append(l_g)
    torch.testing.assert_close(got, torch.cat(expected), rtol=1e-12, atol=1e-14)


def test_draws_are_the_mean_plus_the_whitened_normals_in_the_eigenbasis():
    """``θ = θ* + Q_G (Z / sqrt D) Q_Aᵀ`` per weight and ``θ* + Q_G (z / sqrt D)`` per bias,
    ``D = Λ_G ⊗ Λ_A / N + λ``, ``Z`` standard normal of the parameters' dtype: the same normal
    draws (same seed, drawn here in the parameters' order) give the same θ to round-off."""
    s, h, ref = _factors()
    mean = torch.linspace(-1.0, 1.0, 13, dtype=F64)
    torch.manual_seed(7)
    draws = s.sample(mean, h, 0.3, 4)
    torch.manual_seed(7)
    parts = []
    for name, shape in SHAPES.items():
        layer, kind = name.split(".")
        l_g, q_g = torch.linalg.eigh(ref[layer + "|G"])
        if kind == "weight":
            l_a, q_a = torch.linalg.eigh(ref[layer + "|A"])
            d = torch.outer(l_g.clamp_min(0), l_a.clamp_min(0)) / 6 + 0.3
            z = torch.randn(4, *shape, dtype=F64)
            parts.append((q_g @ (z / d.sqrt()) @ q_a.T).reshape(4, -1))
        else:
            z = torch.randn(4, *shape, dtype=F64)
            parts.append((z / (l_g.clamp_min(0) + 0.3).sqrt()) @ q_g.T)
    torch.testing.assert_close(draws, mean + torch.cat(parts, 1), rtol=1e-10, atol=1e-12)


def test_nested_layer_names_find_their_layers():
    """Layers inside a nested ``Sequential`` (``0.0.weight``: the layer is ``0.0``): the GLM
    variance is ``diag(J Σ Jᵀ)`` of the covariance the structure reports (float64, 1e-10)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.Tanh()), nn.Linear(3, 2)).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(20, 2, generator=g, dtype=F64), torch.randn(20, 2, generator=g, dtype=F64)
    la = bp.LaplaceApproximation(net, "regression", hessian_structure="kron", noise_scale=0.5)
    la.fit(x, y, epochs=0, progress=False)
    jac, _ = output_jacobians(net, {n: p.detach() for n, p in net.named_parameters()}, x[:5])
    flat = jac.flatten(0, 1)
    expected = (flat @ la.posterior_covariance() @ flat.T).diagonal().reshape(5, 2)
    torch.testing.assert_close(la.glm_variance(x[:5]), expected, rtol=1e-10, atol=1e-12)
