"""KFAC: the Kronecker-factored Laplace curvature of linear layers (``"kron"``)."""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro.methods.laplace.structure_base import HessianStructure

__all__ = ["KroneckerHessian", "LayerJacobians"]

#: What KFAC's GLM predictive takes for ``jac``: ``(deltas {layer: (B, O, out)}, inputs
#: {layer: (B, in)})``, from :func:`~bnn_pyro.methods.laplace.curvature.layer_jacobians`.
LayerJacobians = tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]


class KroneckerHessian(HessianStructure):
    """Kronecker-factored ``H`` (KFAC; Martens & Grosse 2015, Ritter et al. 2018): per linear
    layer, ``H_W ≈ G ⊗ A / N`` with ``G = Σ_n δ_nᵀ Λ_n δ_n`` ``(out, out)`` (``δ_n`` the
    Jacobian of the outputs in the layer's pre-activations, ``Λ_n`` the likelihood's output
    Hessian) and ``A = Σ_n a_n a_nᵀ`` ``(in, in)`` (the layer's inputs); a bias keeps its exact
    block ``G``. The blocks of different parameters are independent. The prior precision is
    added exactly in each block's eigenbasis: ``(Q_G ⊗ Q_A)(Λ_G ⊗ Λ_A / N + λ)(Q_G ⊗ Q_A)ᵀ``,
    as laplace-torch's ``KronDecomposed`` does; memory is ``out² + in²`` per layer, not
    ``(out · in)²``. Covers ``nn.Linear`` weights and biases, with the GGN.

    ``h`` is a dict: ``"n"`` (the examples summed) and ``"{name}|G"``, ``"{name}|A"`` per
    parameter in the order of the flat θ.

    Example:
        >>> s = KroneckerHessian()
        >>> h = s.start({"0.weight": torch.Size([1, 2])}, torch.zeros(1))
        >>> # one row, one output: δ = 1 (the output is the layer's), a = (1, 2), 1/σ² = 1
        >>> h = s.add_layer_ggn(h, {"0": torch.ones(1, 1, 1)}, {"0": torch.tensor([[1.0, 2.0]])},
        ...                     torch.ones(1, 1), categorical=False)
        >>> s.precision(h, 1.0)["0.weight"]  # G ⊗ A / N + λ I: exact for one example
        tensor([[2., 2.],
                [2., 5.]])
    """

    name = "kron"
    layerwise = True

    def zeros(self, size: int, like: torch.Tensor) -> torch.Tensor:
        raise TypeError("KroneckerHessian needs the parameters' shapes: call start(shapes, like)")

    def start(self, shapes: dict[str, torch.Size], like: torch.Tensor) -> dict[str, torch.Tensor]:
        h = {"n": like.new_zeros(())}
        for name, shape in shapes.items():
            if len(shape) not in (1, 2):
                raise ValueError(
                    f"hessian_structure='kron' covers linear layers, got {name!r} {shape}"
                )
            h[f"{name}|G"] = like.new_zeros(shape[0], shape[0])
            if len(shape) == 2:
                h[f"{name}|A"] = like.new_zeros(shape[1], shape[1])
        return h

    def add_fisher(self, h: Any, grads: dict[str, torch.Tensor]) -> Any:
        raise ValueError("hessian_structure='kron' is built from the GGN: use hessian='ggn'")

    def add_ggn(
        self,
        h: Any,
        jac: torch.Tensor,
        weight: torch.Tensor,
        jp: torch.Tensor | None,
    ) -> Any:
        raise TypeError(
            "KroneckerHessian sums per-layer factors, not full Jacobians: call add_layer_ggn"
        )

    def add_layer_ggn(
        self,
        h: dict[str, torch.Tensor],
        deltas: dict[str, torch.Tensor],
        inputs: dict[str, torch.Tensor],
        weight: torch.Tensor,
        categorical: bool,
        shapes: dict[str, torch.Size] | None = None,
    ) -> dict[str, torch.Tensor]:
        """``h`` plus a batch of ``B`` rows, from each linear layer's output Jacobians and inputs.

        Args:
            h: the factors so far (:meth:`start`).
            deltas: ``{layer: (B, O, out)}``, the net's outputs' Jacobian in the layer's
                outputs (its pre-activations), ``layer`` the module's name (``"0"`` for
                ``"0.weight"``).
            inputs: ``{layer: (B, in)}``, the layer's inputs.
            weight: ``(B, O)``: ``1/σ²`` (a Gaussian), or the class probabilities ``p``.
            categorical: ``Λ = diag(p) - p pᵀ`` (else ``diag(weight)``).
            shapes: not read (the factors are named by their parameters already).

        Returns:
            The factors with ``G += Σ_b δ_bᵀ Λ_b δ_b`` and ``A += Σ_b a_b a_bᵀ``, ``N += B``.
        """
        h = dict(h)
        for name, g, a in _factors(h):
            layer = name.rpartition(".")[0]
            delta = deltas[layer]
            g = g + torch.einsum("boi,bo,bok->ik", delta, weight, delta)
            if categorical:
                pd = torch.einsum("bo,boi->bi", weight, delta)
                g = g - pd.T @ pd
            h[f"{name}|G"] = g
            if a is not None:
                x = inputs[layer]
                h[f"{name}|A"] = a + x.T @ x
        h["n"] = h["n"] + weight.shape[0]
        return h

    def precision(self, h: dict[str, torch.Tensor], lam: float) -> dict[str, torch.Tensor]:
        """``{name: G ⊗ A / N + λ I}`` (a bias: ``G + λ I``), dense per parameter."""
        n, out = float(h["n"]), {}
        for (name, g, a), value in zip(_factors(h), _per_block(h, lam), strict=True):
            block = g if a is None else torch.kron(g, a) / n
            out[name] = block + value * torch.eye(len(block), dtype=g.dtype, device=g.device)
        return out

    def covariance(self, h: dict[str, torch.Tensor], lam: float) -> torch.Tensor:
        blocks = []
        for q_g, q_a, d in _eigen(h, lam):
            q = q_g if q_a is None else torch.kron(q_g, q_a)
            blocks.append((q / d.reshape(-1)) @ q.T)
        return torch.block_diag(*blocks)

    def sample(
        self, mean: torch.Tensor, h: dict[str, torch.Tensor], lam: float, num_samples: int
    ) -> torch.Tensor:
        parts = []
        for q_g, q_a, d in _eigen(h, lam):
            z = torch.randn(num_samples, *d.shape, dtype=mean.dtype, device=mean.device)
            z = (z / d.sqrt()) @ q_g.T if q_a is None else q_g @ (z / d.sqrt()) @ q_a.T
            parts.append(z.reshape(num_samples, -1))
        return mean + torch.cat(parts, dim=1)

    def eigenvalues(self, h: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat(self.group_eigenvalues(h, []))

    def group_eigenvalues(self, h: dict[str, torch.Tensor], sizes: list[int]) -> list[torch.Tensor]:
        """Per parameter tensor (each is a block: ``sizes`` only names them)."""
        return [d.reshape(-1) for _, _, d in _eigen(h, 0.0, torch.float64)]

    def log_det(self, h: dict[str, torch.Tensor], lam: float | torch.Tensor) -> torch.Tensor:
        return sum(torch.log(d).sum() for _, _, d in _eigen(h, lam))

    def functional_variance(
        self, h: dict[str, torch.Tensor], lam: float, jac: LayerJacobians
    ) -> torch.Tensor:
        """``diag(J Σ Jᵀ)`` ``(B, O)`` from the layers' ``jac = (deltas, inputs)``
        (:func:`~bnn_pyro.methods.laplace.curvature.layer_jacobians`): a weight's Jacobian row
        is ``δ ⊗ a``, so in the eigenbasis its variance is ``Σ_kl (Q_Gᵀδ)_k² (Q_Aᵀa)_l² / D_kl``,
        without the ``B · O · P`` Jacobians."""
        total = 0.0
        for t_g, t_a, d in _rotated(h, lam, jac):
            if t_a is None:
                total = total + (t_g.pow(2) / d).sum(-1)
            else:
                total = total + torch.einsum("bok,bl,kl->bo", t_g.pow(2), t_a.pow(2), 1.0 / d)
        return total

    def functional_covariance(
        self, h: dict[str, torch.Tensor], lam: float, jac: LayerJacobians
    ) -> torch.Tensor:
        """``J Σ Jᵀ`` ``(B O, B O)`` from the layers' ``jac = (deltas, inputs)``, as
        :meth:`functional_variance`."""
        total = 0.0
        for t_g, t_a, d in _rotated(h, lam, jac):
            if t_a is None:
                part = torch.einsum("bok,cpk,k->bocp", t_g, t_g, 1.0 / d)
            else:
                inner = torch.einsum("bl,cl,kl->kbc", t_a, t_a, 1.0 / d)  # (out, B, B)
                part = torch.einsum("bok,cpk,kbc->bocp", t_g, t_g, inner)
            total = total + part.flatten(2).flatten(0, 1)
        return total


def _factors(h: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor, torch.Tensor | None]]:
    """``(name, G, A or None)`` per parameter, in the order of the flat θ."""
    return [(key[:-2], g, h.get(key[:-2] + "|A")) for key, g in h.items() if key.endswith("|G")]


def _eigen(
    h: dict[str, torch.Tensor], lam: float, dtype: torch.dtype | None = None
) -> list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]:
    """Per parameter ``(Q_G, Q_A or None, D)``: ``D = Λ_G ⊗ Λ_A / N + λ`` ``(out, in)`` (a bias:
    ``Λ_G + λ`` ``(out,)``), the eigenvalues clipped at 0 (``G``, ``A`` are PSD up to
    round-off)."""
    n, out = float(h["n"]), []
    for (_, g, a), value in zip(_factors(h), _per_block(h, lam), strict=True):
        l_g, q_g = torch.linalg.eigh(g if dtype is None else g.to(dtype))
        l_g = l_g.clamp_min(0)
        if a is None:
            out.append((q_g, None, l_g + value))
            continue
        l_a, q_a = torch.linalg.eigh(a if dtype is None else a.to(dtype))
        out.append((q_g, q_a, torch.outer(l_g, l_a.clamp_min(0)) / n + value))
    return out


def _per_block(h: dict[str, torch.Tensor], lam: float | torch.Tensor) -> list[float]:
    """Each parameter's λ: ``lam`` itself, or its block's value of a ``(P,)`` ``lam`` (one
    per parameter tensor: a λ that varies inside a block is refused)."""
    factors = _factors(h)
    if not isinstance(lam, torch.Tensor):
        return [float(lam)] * len(factors)
    values, start = [], 0
    for _, g, a in factors:
        size = g.shape[0] * (1 if a is None else a.shape[0])
        block = lam[start : start + size]
        start += size
        if bool((block != block[0]).any()):
            raise ValueError("hessian_structure='kron' takes one prior precision per parameter")
        values.append(float(block[0]))
    return values


def _rotated(
    h: dict[str, torch.Tensor], lam: float, jac: LayerJacobians
) -> list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]:
    """Per parameter: its layer's ``δ`` in ``G``'s eigenbasis ``(B, O, out)``, the inputs in
    ``A``'s ``(B, in)`` (``None`` for a bias), and ``D``."""
    deltas, inputs = jac
    out = []
    for (name, _, _), (q_g, q_a, d) in zip(_factors(h), _eigen(h, lam), strict=True):
        layer = name.rpartition(".")[0]
        t_a = None if q_a is None else inputs[layer] @ q_a
        out.append((deltas[layer] @ q_g, t_a, d))
    return out
