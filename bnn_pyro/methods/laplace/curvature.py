"""Per-sample curvature for the Laplace approximation, vectorized with ``torch.func``.

Both curvatures are sums over the data of per-example terms:

- empirical Fisher ``F = Σ_n g_n g_nᵀ`` with ``g_n = ∇_θ -log p(y_n | f(x_n; θ))``, the
  per-example gradients computed at once by ``vmap(grad(...))``;
- generalised Gauss-Newton ``G = Σ_n J_nᵀ Λ_n J_n`` with ``J_n = ∂f(x_n)/∂θ`` (``vmap(jacrev)``)
  and ``Λ_n`` the Hessian of the negative log-likelihood in the outputs: ``diag(1/σ²)`` for a
  Gaussian, ``diag(p) - p pᵀ`` for a softmax categorical.

A :class:`~bnn_pyro.methods.laplace.structures.HessianStructure` keeps the sum: its diagonal
``(P,)``, the ``(P, P)`` matrix, ...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
import torch.nn as nn
from torch.func import functional_call, grad_and_value, jacrev, vmap

from bnn_pyro.likelihoods import Likelihood, noise_latents
from bnn_pyro.methods.classic.params import flatten
from bnn_pyro.methods.laplace.structures import HessianStructure, map_tensors
from bnn_pyro.training import distributed


def _nll(
    out: torch.Tensor, y: torch.Tensor, likelihood: Likelihood, latents: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Summed negative log-likelihood (:meth:`Likelihood.log_prob`): ``out (..., O)``, ``y`` as
    the likelihood's targets."""
    return -likelihood.log_prob(out, y, latents).sum()


def output_jacobians(
    model: nn.Module,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    outputs: slice | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Jacobians of the net's outputs in the parameters ``params`` (the others fixed), row
    by row (``vmap(jacrev)``), and the outputs.

    Args:
        model: the net; ``params`` ``{name: tensor}`` of ``P`` entries in total.
        x: ``(B, ...)`` inputs.
        outputs: only these outputs (a slice of the ``O``; default all): a block of them.

    Returns:
        ``jac (B, O', P)`` (parameters flattened in ``params``' order) and ``out (B, O')``, for
        the ``O'`` outputs asked for.

    Example:
        >>> net = nn.Linear(3, 2)
        >>> jac, out = output_jacobians(net, dict(net.named_parameters()), torch.ones(4, 3))
        >>> jac.shape, out.shape  # P = 2 x 3 weights + 2 biases
        (torch.Size([4, 2, 8]), torch.Size([4, 2]))
    """

    chosen = slice(None) if outputs is None else outputs

    def f(p: dict[str, torch.Tensor], xi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = functional_call(model, p, (xi.unsqueeze(0),)).squeeze(0)[..., chosen]
        return out, out  # (output, aux copy of the output for jacrev(has_aux=True))

    jac, out = vmap(jacrev(f, has_aux=True), in_dims=(None, 0))(params, x)
    return flatten(jac, batch_dims=2), out


def layer_jacobians(
    model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
    """Per ``nn.Linear`` layer holding a parameter of ``params``: the Jacobian of the net's
    outputs in the layer's outputs (its pre-activations, ``δ``) and the layer's inputs, row by
    row; what KFAC's factors sum, in ``B · O · Σ out`` numbers instead of the full Jacobians'
    ``B · O · P``. ``δ`` is the Jacobian in a zero shift added to the layer's output.

    Args:
        model: the net; ``params`` ``{name: tensor}`` its parameters at θ*.
        x: ``(B, in)`` inputs.

    Returns:
        ``deltas {layer: (B, O, out)}``, ``inputs {layer: (B, in)}`` (``layer`` the module's
        name) and the outputs ``(B, O)``.

    Raises:
        ValueError: a linear layer sees inputs other than ``(B, in)`` (a sequence, say).

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        >>> deltas, ins, out = layer_jacobians(net, dict(net.named_parameters()), torch.ones(5, 3))
        >>> {k: tuple(v.shape) for k, v in deltas.items()}, tuple(ins["2"].shape), tuple(out.shape)
        ({'0': (5, 2, 4), '2': (5, 2, 2)}, (5, 4), (5, 2))
    """
    layers = linear_layers(model, params)
    ref = next(iter(params.values()))
    shifts = {k: ref.new_zeros(m.out_features) for k, m in layers.items()}

    def f(shift: dict[str, torch.Tensor], xi: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        seen: dict[str, torch.Tensor] = {}

        def hook(key: str):  # noqa: ANN202
            def shifted(_: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
                if args[0].dim() != 2:
                    raise ValueError(
                        f"hessian_structure='kron' needs (B, in) inputs at each linear layer; "
                        f"layer {key!r} got {tuple(args[0].shape)}"
                    )
                seen[key] = args[0].squeeze(0)
                return out + shift[key]

            return shifted

        handles = [m.register_forward_hook(hook(k)) for k, m in layers.items()]
        try:
            out = functional_call(model, params, (xi.unsqueeze(0),)).squeeze(0)
        finally:
            for handle in handles:
                handle.remove()
        return out, (out, seen)

    deltas, (out, inputs) = vmap(jacrev(f, has_aux=True), in_dims=(None, 0))(shifts, x)
    return deltas, inputs, out


#: Whether a structure that :attr:`~bnn_pyro.methods.laplace.structure_base.HessianStructure.
#: takes_layers` (the diagonal) is given the per-layer Jacobians where :func:`layer_rows` finds
#: them exact; ``False``: the full Jacobians everywhere, the reference path (for the tests and
#: ``benchmarks/laplace_glm_predict.py``; KFAC takes the layers' always).
PER_LAYER = True


def linear_layers(model: nn.Module, params: dict[str, torch.Tensor]) -> dict[str, nn.Linear]:
    """``{module name: layer}`` of the ``nn.Linear`` layers holding a parameter of ``params``.

    Example:
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        >>> list(linear_layers(net, {"2.weight": net[2].weight}))
        ['2']
    """
    modules = dict(model.named_modules())
    layers = {}
    for name in params:
        owner = name.rpartition(".")[0]
        if isinstance(modules.get(owner), nn.Linear):
            layers[owner] = modules[owner]
    return layers


def layer_rows(
    structure: HessianStructure,
    model: nn.Module,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
) -> int | None:
    """How many rows go through one :func:`layer_jacobians` pass for ``structure``, or ``None``:
    the full Jacobians (:func:`output_jacobians`) instead. The net is in the mode it runs in.

    A :attr:`~bnn_pyro.methods.laplace.structure_base.HessianStructure.layerwise` structure
    (KFAC) always goes per layer. One that ``takes_layers`` (the diagonal) does, where
    :data:`PER_LAYER`, when the layers' ``δ ⊗ a`` are the full Jacobians: every parameter of
    ``params`` the weight or bias of an ``nn.Linear`` of its own (none tied to another) that runs
    ``nn.Linear.forward`` with no forward hook, each of those layers called once on ``(1, in)``
    inputs in a forward of ``x``'s first row (a conv, a layer on a sequence or run twice: the
    full Jacobians). It assumes, as KFAC does, that the net reads such a weight only through its
    layer. The rows keep the ``rows x O x Σ out`` numbers of ``δ`` under
    :data:`JACOBIAN_BLOCK_BYTES` (one at least).

    Args:
        structure: the curvature's structure; ``model``, ``params`` as in :func:`curvature`.
        x: ``(N, ...)`` inputs (its first row is run).

    Returns:
        Rows per pass, or ``None``.

    Example:
        >>> from bnn_pyro.methods.laplace.structures import DiagonalHessian, FullHessian
        >>> net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        >>> params = dict(net.named_parameters())
        >>> layer_rows(DiagonalHessian(), net, params, torch.ones(5, 3))  # 2**28 / (2 · 6 · 4)
        5592405
        >>> layer_rows(FullHessian(), net, params, torch.ones(5, 3)) is None
        True
    """
    if not (structure.layerwise or (structure.takes_layers and PER_LAYER)):
        return None
    layers = linear_layers(model, params)
    modules = dict(model.named_modules())
    owners = [name.rpartition(".") for name in params]
    if not structure.layerwise and not all(
        isinstance(modules.get(owner), nn.Linear) and leaf in ("weight", "bias")
        for owner, _, leaf in owners
    ):
        return None
    seen: dict[str, list[int]] = {k: [] for k in layers}
    handles = [
        m.register_forward_hook(lambda _, args, out, k=k: seen[k].append(args[0].dim()))
        for k, m in layers.items()
    ]
    try:
        with torch.no_grad():
            out = functional_call(model, params, (x[:1],))
    finally:
        for handle in handles:
            handle.remove()
    if not structure.layerwise:
        tied = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
        for k, m in layers.items():  # (our hook is gone: any left is the net's own)
            plain = type(m).forward is nn.Linear.forward and not m._forward_hooks
            if not plain or seen[k] != [2] or any(tied[id(p)] > 1 for p in m.parameters(False)):
                return None
    width = out.shape[-1] * sum(m.out_features for m in layers.values())
    return max(1, JACOBIAN_BLOCK_BYTES // max(1, width * out.element_size()))


def curvature(
    model: nn.Module,
    params: dict[str, torch.Tensor],
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    likelihood: str,
    kind: str,
    structure: HessianStructure,
    sigma: torch.Tensor | None,
    device: torch.device,
    reduce: bool = False,
) -> tuple[torch.Tensor, float, int]:
    """Sum the curvature over the data at ``params``.

    Args:
        model: the net in eval mode; parameters not in ``params`` stay fixed.
        params: ``{name: tensor}`` of the Bayesian parameters (P entries in total).
        batches: ``(x (B, ...), y)`` pairs.
        likelihood: the observation model: its :meth:`~bnn_pyro.likelihoods.Likelihood.log_prob`
            and :meth:`~bnn_pyro.likelihoods.Likelihood.output_hessian` (``Categorical``, or
            ``Gaussian`` with ``sigma``).
        kind: ``"fisher"`` (empirical Fisher) or ``"ggn"``.
        structure: how ``H`` is kept (:mod:`~bnn_pyro.methods.laplace.structures`).
        sigma: ``(O,)`` Gaussian noise std (a Gaussian only).
        device: where the batches go.
        reduce: the batches are this rank's part of the data: sum ``H``, the log-likelihood
            and the count over the ranks of a ``torch.distributed`` group.

    Returns:
        ``H`` (``(P,)`` or ``(P, P)``), the log-likelihood ``Σ_n log p(y_n | f(x_n))`` at
        ``params``, and the number of examples.
    """

    latents = noise_latents(sigma)

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),)).squeeze(0)
        return _nll(out, yi, likelihood, latents)

    ref = next(iter(params.values()))
    shapes = {n: t.shape for n, t in params.items()}
    h = structure.start(shapes, ref)
    loglik, count, rows, decided = 0.0, 0, None, False
    for xb, yb in batches:
        xb, yb = xb.to(device), yb.to(device)
        count += len(xb)
        if kind == "fisher":
            grads, nll = vmap(grad_and_value(loss), in_dims=(None, 0, 0))(params, xb, yb)
            loglik -= float(nll.detach().sum())
            h = structure.add_fisher(h, grads)
            continue
        if not decided:  # per layer or through the full Jacobians: on the first batch
            rows, decided = layer_rows(structure, model, params, xb), True
        if rows is None:
            with torch.no_grad():
                out = functional_call(model, params, (xb,))  # (B, O)
            nll, w, coupled = _output_weights(out, yb, likelihood, latents)
            loglik -= nll
            h = _add_ggn_blocks(h, structure, model, params, xb, w, coupled)
            continue
        # per layer (KFAC; a diagonal of linear layers), in blocks of rows
        for xr, yr in zip(xb.split(rows), yb.split(rows), strict=True):
            deltas, inputs, out = layer_jacobians(model, params, xr)
            nll, w, coupled = _output_weights(out, yr, likelihood, latents)
            loglik -= nll
            h = structure.add_layer_ggn(h, deltas, inputs, w, coupled, shapes)
    if reduce and distributed.active():
        sums = distributed.all_sum(torch.tensor([loglik, float(count)], dtype=torch.float64))
        h = map_tensors(h, lambda t: distributed.all_sum(t.detach()))
        return h, float(sums[0]), int(sums[1])
    return map_tensors(h, torch.Tensor.detach), loglik, count


def _output_weights(
    out: torch.Tensor, y: torch.Tensor, likelihood: Likelihood, latents: dict[str, torch.Tensor]
) -> tuple[float, torch.Tensor, bool]:
    """The negative log-likelihood of the outputs ``out (B, O)`` at ``y``, the ``(B, O)``
    weights of its Hessian in them (:meth:`~bnn_pyro.likelihoods.Likelihood.output_hessian`:
    ``1/σ²`` for a Gaussian, the class probabilities ``p`` for a categorical), and whether the
    Hessian is ``diag(w) - w wᵀ``."""
    nll = _nll(out, likelihood.check_targets(y, out.shape[-1]), likelihood, latents)
    w, coupled = likelihood.output_hessian(out, latents)
    return float(nll.detach()), w.to(out).detach(), coupled


#: The most bytes one Jacobian block may take: the GGN and the GLM predictive go through the
#: rows and the outputs in blocks of ``rows x outputs x P`` numbers under it, so their memory
#: never grows with the number of rows or outputs (laplace-torch materialises ``N x O x P``).
JACOBIAN_BLOCK_BYTES = 2**28


def jacobian_blocks(rows: int, outputs: int, size: int, itemsize: int) -> tuple[int, int]:
    """``(rows per block, outputs per block)`` for Jacobians of ``rows x outputs x size``
    numbers of ``itemsize`` bytes: all of the outputs with as many rows as
    :data:`JACOBIAN_BLOCK_BYTES` holds, else one row with as many outputs as it holds (never
    less than one of each).

    Example:
        >>> jacobian_blocks(1000, 10, 1000, 4)  # 40 KB a row: every row at once
        (1000, 10)
        >>> jacobian_blocks(100, 1000, 10**6, 4)  # 4 GB a row: 67 outputs at a time
        (1, 67)
    """
    per_row = outputs * size * itemsize
    if per_row <= JACOBIAN_BLOCK_BYTES:
        return max(1, min(rows, JACOBIAN_BLOCK_BYTES // per_row)), outputs
    return 1, max(1, min(outputs, JACOBIAN_BLOCK_BYTES // (size * itemsize)))


def _add_ggn_blocks(
    h: torch.Tensor,
    structure: HessianStructure,
    model: nn.Module,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    w: torch.Tensor,
    coupled: bool,
) -> torch.Tensor:
    """``h`` plus the GGN of the rows ``x (B, ...)`` with output weights ``w (B, O)``, through
    Jacobian blocks of :func:`jacobian_blocks`' size: the sum over outputs of ``J_oᵀ w_o J_o``
    splits over output blocks, and where ``coupled`` (a categorical) ``j = Σ_o p_o J_o`` is
    summed over them before its ``- j jᵀ`` is taken, once per row block."""
    size = sum(t.numel() for t in params.values())
    ref = next(iter(params.values()))
    rows, outs = jacobian_blocks(len(x), w.shape[1], size, ref.element_size())
    for start in range(0, len(x), rows):
        xr, wr = x[start : start + rows], w[start : start + rows]
        jp = ref.new_zeros(len(xr), size) if coupled else None
        for o in range(0, w.shape[1], outs):
            block = slice(o, o + outs)
            jac, _ = output_jacobians(model, params, xr, block)  # (b, o', P)
            h = structure.add_ggn(h, jac, wr[:, block], None)
            if jp is not None:
                jp = jp + torch.einsum("bop,bo->bp", jac, wr[:, block])
        if jp is not None:  # - Σ_b j_b j_bᵀ: the term across outputs
            h = structure.add_ggn(h, jp.new_zeros(len(xr), 0, size), wr[:, :0], jp)
    return h


@torch.no_grad()
def residual_sigma(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    reduce: bool = False,
) -> float | torch.Tensor:
    """Maximum-likelihood noise std ``sqrt(mean_n (y_n - f(x_n))²)`` per output (floor 1e-6).

    A float for one output, an ``(O,)`` tensor otherwise; ``reduce`` as in :func:`curvature`.
    """
    sse, count = 0.0, 0
    for xb, yb in batches:
        out = model(xb.to(device))
        sse = sse + ((out - yb.to(device).reshape(out.shape)) ** 2).sum(0)
        count += len(xb)
    if reduce and distributed.active():
        sse = distributed.all_sum(torch.as_tensor(sse, dtype=torch.float64))
        count = int(distributed.all_sum(torch.tensor(float(count), dtype=torch.float64)))
    sigma = (sse / count).sqrt().clamp_min(1e-6)
    return float(sigma) if sigma.numel() == 1 else sigma
