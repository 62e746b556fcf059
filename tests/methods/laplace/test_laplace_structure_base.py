"""What the structures inherit from :class:`HessianStructure`: the empty curvature sized from
the parameters' shapes, no per-tensor eigenvalues, the variance function as the functional
variance, the per-layer calls' refusals by their whole message, and :func:`map_tensors`."""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.methods.laplace.kron import KroneckerHessian
from bnn_pyro.methods.laplace.structure_base import HessianStructure, map_tensors
from bnn_pyro.methods.laplace.structures import DiagonalHessian, FullHessian

F64 = torch.float64
SHAPES = {"w": torch.Size([2, 3]), "b": torch.Size([2]), "s": torch.Size([])}  # 6 + 2 + 1


def test_the_empty_curvature_has_one_entry_per_coordinate_of_the_shapes():
    like = torch.zeros(1, dtype=F64)
    d, f = DiagonalHessian().start(SHAPES, like), FullHessian().start(SHAPES, like)
    assert d.shape == (9,) and f.shape == (9, 9)
    assert d.dtype == f.dtype == F64 and not d.any() and not f.any()


def test_a_structure_that_couples_the_tensors_has_no_per_tensor_eigenvalues():
    assert FullHessian().group_eigenvalues(torch.eye(3, dtype=F64), [2, 1]) is None


def test_the_base_flags_are_off():
    assert HessianStructure.layerwise is False and HessianStructure.takes_layers is False
    assert FullHessian.layerwise is False and FullHessian.takes_layers is False


def test_the_inherited_variance_function_is_the_functional_variance():
    """The diagonal's ``diag(J Σ Jᵀ) = Σ_p J_op² / (h_p + λ)``, summed here."""
    h = torch.tensor([1.0, 2.0, 4.0], dtype=F64)
    jac = torch.arange(12, dtype=F64).reshape(2, 2, 3)
    expected = (jac**2 / (h + 0.5)).sum(-1)
    torch.testing.assert_close(DiagonalHessian().variance_fn(h, 0.5)(jac), expected)


def test_a_layerwise_structures_layer_variance_function_is_its_variance_function():
    """KFAC of one row through a 1 x 2 layer: ``H + λ I = G ⊗ A + I`` with ``G = 1``,
    ``A = a aᵀ``, ``a = (1, 2)``; the variance of the output at the same row is
    ``aᵀ (a aᵀ + I)⁻¹ a = ‖a‖² / (1 + ‖a‖²) = 5/6`` (δ = 1)."""
    s, shapes = KroneckerHessian(), {"0.weight": torch.Size([1, 2])}
    a = torch.tensor([[1.0, 2.0]], dtype=F64)
    h = s.start(shapes, a)
    h = s.add_layer_ggn(h, {"0": torch.ones(1, 1, 1, dtype=F64)}, {"0": a},
                        torch.ones(1, 1, dtype=F64), categorical=False)  # fmt: skip
    jac = ({"0": torch.ones(1, 1, 1, dtype=F64)}, {"0": a})
    got = s.layer_variance_fn(h, 1.0, shapes)(jac)
    torch.testing.assert_close(got, torch.full((1, 1), 5 / 6, dtype=F64))


def test_the_full_structure_refuses_the_per_layer_calls_by_their_whole_message():
    with pytest.raises(TypeError, match=r"^FullHessian sums full Jacobians: call add_ggn$"):
        FullHessian().add_layer_ggn(torch.zeros(1, 1), {}, {}, torch.ones(1, 1), False)
    with pytest.raises(TypeError, match=r"^FullHessian takes full Jacobians: call variance_fn$"):
        FullHessian().layer_variance_fn(torch.eye(1), 1.0, {"w": torch.Size([1])})


def test_map_tensors_maps_a_tensor_or_every_tensor_of_a_dict():
    assert map_tensors(torch.tensor(3.0), lambda t: t + 1) == torch.tensor(4.0)
    got = map_tensors({"a": torch.tensor(1.0), "b": torch.tensor(2.0)}, lambda t: -t)
    assert got == {"a": torch.tensor(-1.0), "b": torch.tensor(-2.0)}
