"""The predictive of the Laplace approximation: posterior draws of the parameters, the net or
its linearisation on them, and the closed-form moments of the linearisation (the GLM): exact
through an identity link (regression, or logits), the probit approximation through a softmax."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn

from bnn_pyro._checks import check_choice, check_int
from bnn_pyro._rng import seeded
from bnn_pyro.base import PredictOutput
from bnn_pyro.methods.classic.params import batched_call, linearized_call, unflatten
from bnn_pyro.methods.classic.training import modes, module_device
from bnn_pyro.methods.laplace.curvature import (
    jacobian_blocks,
    layer_jacobians,
    layer_rows,
    output_jacobians,
)
from bnn_pyro.methods.laplace.kron import LayerJacobians
from bnn_pyro.methods.laplace.probit import probit_moments
from bnn_pyro.methods.laplace.structures import HessianStructure
from bnn_pyro.threads import uses_threads

__all__ = ["LINK_APPROXIMATIONS", "LaplacePredictive"]

#: How ``predict`` takes the GLM predictive through a softmax (``link_approx=``): ``"probit"``,
#: the probit approximation (:func:`~bnn_pyro.methods.laplace.probit.probit_moments`,
#: deterministic), or ``"mc"``, the moments of ``S`` sampled probability vectors.
LINK_APPROXIMATIONS = ("probit", "mc")

#: Rows per block of the closed-form ``predict`` (one Jacobian pass each; the block's Jacobians
#: are cut down further to :data:`~bnn_pyro.methods.laplace.curvature.JACOBIAN_BLOCK_BYTES`).
_GLM_ROWS = 256


class LaplacePredictive:
    """The prediction half of :class:`~bnn_pyro.methods.laplace.laplace.LaplaceApproximation`,
    which provides the fitted posterior it reads: ``model``, ``structure``, ``mean``,
    ``prior_precision``, ``predictive``, the flat mean and curvature (``_require_fit``) and λ as
    the structures take it (``_lam``).

    Example:
        >>> import bnn_pyro as bp
        >>> issubclass(bp.LaplaceApproximation, LaplacePredictive)
        True
    """

    model: nn.Module
    structure: HessianStructure
    prior_precision: float | tuple[float, ...]
    predictive: str
    link_approx: str
    _shapes: dict[str, torch.Size]

    @uses_threads
    @torch.no_grad()
    def predict(
        self,
        x: torch.Tensor,
        return_samples: bool = False,
        normalize_output: bool | None = None,
        *,
        num_samples: int | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        link_approx: str | None = None,
        **options: Any,
    ) -> PredictOutput:
        """The posterior predictive at ``x``: in closed form for the GLM predictive, sampled
        for the net's (``predictive="nn"``).

        ``predictive="glm"``: the linearised net's outputs are Gaussian,
        ``N(f(x, θ*), J(x) Σ J(x)ᵀ)``, so where they are returned as they are (regression, or
        ``normalize_output=False``: logits) the mean is the net's output at θ* and the
        variance :meth:`glm_variance`, both exact, no sampling (laplace-torch's
        ``pred_type="glm"``). Through the softmax of a classifier, ``link_approx`` chooses:
        ``"probit"`` (the default) the probit approximation of
        :func:`~bnn_pyro.methods.laplace.probit.probit_moments` (deterministic: laplace-torch's
        default ``link_approx``; the variance is that of each class's probability under that
        approximation, at most ``p (1 - p)``); ``"mc"`` the mean and variance of ``S`` sampled
        probability vectors, as for any sampled method.

        ``predictive="nn"``: the net on ``S`` posterior draws, their mean and variance.

        The variance is the epistemic part (add ``noise_scale²`` for the predictive of a
        regression's ``y``: :meth:`predictive_gaussian`).

        Args:
            x: ``(N, ...)`` inputs.
            return_samples: also return ``S`` samples of the predictive: the linearised net
                (or the net) on ``S`` posterior draws, softmaxed where the outputs are. The
                mean and variance returned with them are the ones returned without them (the
                closed form, where there is one: not the samples' own mean and variance, which
                scatter around it).
            normalize_output: softmax multi-column outputs (see
                :func:`~bnn_pyro.base.to_probabilities`); ``None``: for a classifier only.
            num_samples: ``S`` (default: the constructor's ``num_samples``), for the samples.
            seed: makes the draws reproducible without touching the global RNG.
            generator: the same through a ``torch.Generator`` (instead of ``seed``).
            link_approx: ``"probit"`` or ``"mc"``, this call's (default: the constructor's);
                read only by the GLM predictive through a softmax.
            **options: none for the Laplace approximation (an unknown one is refused).

        Returns:
            ``mean (N, O)``, ``variance (N, O)`` (epistemic) and, if asked,
            ``samples (S, N, O)``.

        Raises:
            ValueError, TypeError: a bad option (``link_approx``, ``num_samples``, ``seed``,
                ``generator``, ``normalize_output``) or ``x``, before any work.
            NotFittedError: before
                :meth:`~bnn_pyro.methods.laplace.laplace.LaplaceApproximation.fit`.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> la = LaplaceApproximation(nn.Linear(2, 1), "regression", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(40, 2), torch.randn(40), epochs=0, progress=False)
            >>> x = torch.randn(5, 2)
            >>> mean, var = la.predict(x)  # no draws: the GLM's exact moments
            >>> torch.allclose(mean, la.model(x)), torch.allclose(var, la.glm_variance(x))
            (True, True)
            >>> mean, var, samples = la.predict(x, return_samples=True, num_samples=8, seed=0)
            >>> samples.shape
            torch.Size([8, 5, 1])
        """
        link = self.link_approx if link_approx is None else link_approx
        link = check_choice("link_approx", link, LINK_APPROXIMATIONS)
        draws = {"num_samples": num_samples, "seed": seed, "generator": generator}
        x = self._check_x(x)
        normalize = self._normalize(normalize_output)
        self._require_fit()
        if self.predictive == "glm":
            if options:
                raise TypeError(
                    f"LaplaceApproximation.predict got unknown options {sorted(options)}"
                )
            self._check_draws(num_samples, seed, generator)
            softmaxed = normalize and self._width(x) > 1  # as to_probabilities decides
            if not (softmaxed and link == "mc"):
                return self._glm_predict(x, return_samples, normalize_output, draws, softmaxed)
        return super().predict(x, return_samples, normalize_output, **draws, **options)

    def _width(self, x: torch.Tensor) -> int:
        """The number of the net's outputs (one row of ``x`` through it, in eval mode)."""
        with modes(self.model, lambda m: False), torch.no_grad():
            return self.model(x[:1]).shape[-1]

    def _glm_predict(
        self,
        x: torch.Tensor,
        return_samples: bool,
        normalize_output: bool | None,
        draws: dict[str, Any],
        softmaxed: bool,
    ) -> PredictOutput:
        """:meth:`predict`'s closed form (its arguments checked): the GLM's moments, through
        the probit approximation where the outputs are ``softmaxed``; the samples drawn as the
        sampled predictive draws them."""
        plan = self._glm_plan(x)  # once, Σ's factorisation with it

        def moments(part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            mean, var = self._glm_moments(part, plan=plan)
            return probit_moments(mean, var) if softmaxed else (mean, var)

        return self._closed_form(x, moments, _GLM_ROWS, return_samples, normalize_output, draws)

    @uses_threads
    def predictive_gaussian(
        self, x: torch.Tensor, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian predictive of ``y`` for regression: with ``predictive="glm"``, the
        exact GLM predictive ``N(f(x, θ*), J(x) Σ J(x)ᵀ + σ²)`` as a mixture of one component,
        no sampling; with ``"nn"``, the mixture over ``S`` draws of the net (see
        :meth:`BaseBayesianMethod.predictive_gaussian
        <bnn_pyro.base.BaseBayesianMethod.predictive_gaussian>`).

        Args:
            x: ``(N, ...)`` inputs.
            **kwargs: passed to :meth:`predict` (``num_samples``, ``seed``, ...; checked, and
                read only by the sampled predictive).

        Returns:
            ``locs (S, N, O)`` and ``scales`` broadcastable to them: ``S = 1`` and
            ``scales (1, N, O)`` for the GLM.

        Raises:
            NotImplementedError: no ``noise_scale`` (not a Gaussian-likelihood regression).
            ValueError: a ``noise_scale`` that is not positive.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> la = LaplaceApproximation(nn.Linear(2, 1), "regression", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(40, 2), torch.randn(40), epochs=0, progress=False)
            >>> x = torch.randn(3, 2)
            >>> locs, scales = la.predictive_gaussian(x)
            >>> locs.shape, torch.allclose(scales[0] ** 2, la.glm_variance(x) + 0.25)
            (torch.Size([1, 3, 1]), True)
        """
        if self.predictive != "glm":
            return super().predictive_gaussian(x, **kwargs)
        noise = getattr(self, "noise_scale", None)
        if noise is None:  # the base's error and wording
            return super().predictive_gaussian(x, **kwargs)
        noise = torch.as_tensor(noise, device=self.device)
        if bool((noise <= 0).any()):
            raise ValueError(f"noise_scale must be positive, got {self.noise_scale}")
        mean, var = self.predict(x, normalize_output=False, **kwargs)
        locs = mean.unsqueeze(0)
        return locs, (var.unsqueeze(0) + noise.to(locs) ** 2).sqrt()

    def sample_parameters(self, num_samples: int) -> dict[str, torch.Tensor]:
        """``{name: (S, *shape)}`` draws of the Bayesian parameters from the posterior."""
        mean, h = self._require_fit()
        check_int("num_samples", num_samples)
        flat = self.structure.sample(mean, h, self._lam(), num_samples)
        return unflatten(flat, self._shapes)

    @uses_threads
    def glm_variance(self, x: Any, chunk_size: int = 256) -> torch.Tensor:
        """The closed-form variance of the linearised net's outputs under the posterior,
        ``diag(J(x) Σ J(x)ᵀ)`` with ``Σ = (H + λ I)⁻¹`` and ``J(x)`` the Jacobian of the outputs
        in the Bayesian parameters at θ*: no sampling (laplace-torch's ``pred_type="glm"``
        ``f_var``, per output). For regression it is the epistemic variance of the mean (add
        ``noise_scale²`` for the predictive of ``y``); for classification, of the logits. A
        diagonal posterior over ``nn.Linear`` layers (KFAC's too) takes it from each layer's
        output Jacobians and inputs (``J = δ ⊗ a``), never the ``N x O x P`` Jacobians.

        Args:
            x: ``(N, ...)`` inputs.
            chunk_size: rows per Jacobian pass, at most: the rows and the outputs of a pass are
                cut down further to keep its ``rows x outputs x P`` numbers under
                :data:`~bnn_pyro.methods.laplace.curvature.JACOBIAN_BLOCK_BYTES`.

        Returns:
            ``(N, O)``.

        Raises:
            TypeError, ValueError: ``x`` is not a tensor of the net's input shape (as in
                ``predict``), or ``chunk_size`` is not an int >= 1.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> net = nn.Linear(1, 1)
            >>> la = LaplaceApproximation(net, "regression", hessian_structure="full",
            ...                           noise_scale=0.5)
            >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
            >>> la.glm_variance(torch.zeros(3, 1)).shape
            torch.Size([3, 1])
        """
        return self._glm_moments(x, chunk_size)[1]

    def _glm_plan(self, x: Any) -> tuple[int | None, Callable[[Any], torch.Tensor]]:
        """How the GLM variance at ``x`` goes: the rows per pass of per-layer Jacobians, or
        ``None`` for the full ones (:func:`~bnn_pyro.methods.laplace.curvature.layer_rows`,
        from ``x``'s first row), and the structure's variance function of them, with what it
        needs of ``Σ`` worked out once."""
        h, lam, rows = self._require_fit()[1], self._lam(), self._layer_rows(x)
        if rows is None:
            return None, self.structure.variance_fn(h, lam)
        return rows, self.structure.layer_variance_fn(h, lam, self._shapes)

    def _layer_rows(self, x: Any) -> int | None:
        """:func:`~bnn_pyro.methods.laplace.curvature.layer_rows` at θ* for ``x`` (checked),
        the net in eval mode."""
        x = self._check_x(x).to(module_device(self.model))
        params = unflatten(self._require_fit()[0], self._shapes)
        with modes(self.model, lambda m: False):
            return layer_rows(self.structure, self.model, params, x)

    def _glm_moments(
        self,
        x: Any,
        chunk_size: int = _GLM_ROWS,
        plan: tuple[int | None, Callable[[Any], torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The GLM predictive of the outputs at ``x``'s rows, ``N(f(x, θ*), diag(J Σ Jᵀ))``:
        ``mean (N, O)`` and ``variance (N, O)``, from one pass of Jacobians (``plan``:
        :meth:`_glm_plan`'s, when the caller has it for many calls)."""
        rows, variance = self._glm_plan(x) if plan is None else plan
        means, variances = [], []
        for blocks, out in self._jacobian_blocks(x, chunk_size, rows, by_output=True):
            means.append(out)
            variances.append(torch.cat([variance(j) for j in blocks], dim=1))
        return torch.cat(means), torch.cat(variances)

    @uses_threads
    def glm_covariance(self, x: Any, chunk_size: int = 256) -> torch.Tensor:
        """The joint covariance of the linearised net's outputs at all of ``x``'s rows under the
        posterior, ``J(x) Σ J(x)ᵀ`` (laplace-torch's ``pred_type="glm", joint=True``): the
        correlations between predictions that :meth:`glm_variance`'s diagonal drops, for joint
        draws of a whole curve, or the uncertainty of a sum or a difference of predictions.

        Args:
            x: ``(N, ...)`` inputs.
            chunk_size: rows per Jacobian pass (the Jacobians of all rows are kept:
                ``N x O x P`` numbers, and the result ``(N O)²``).

        Returns:
            ``(N O, N O)``, rows and columns ordered as ``(N, O)`` flattened row-major: entry
            ``[i O + a, j O + b]`` is the covariance of output ``a`` at row ``i`` and output
            ``b`` at row ``j``. Its diagonal is :meth:`glm_variance` flattened.

        Raises:
            TypeError, ValueError: as :meth:`glm_variance`.

        Example:
            >>> from bnn_pyro import LaplaceApproximation
            >>> _ = torch.manual_seed(0)
            >>> la = LaplaceApproximation(nn.Linear(1, 1), "regression",
            ...                           hessian_structure="full", noise_scale=0.5)
            >>> _ = la.fit(torch.randn(50, 1), torch.randn(50), epochs=0, progress=False)
            >>> x = torch.tensor([[0.0], [1.0], [2.0]])
            >>> cov = la.glm_covariance(x)
            >>> cov.shape, torch.allclose(cov.diagonal(), la.glm_variance(x).flatten())
            (torch.Size([3, 3]), True)
        """
        h = self._require_fit()[1]
        rows = self._layer_rows(x) if self.structure.layerwise else None  # diag: full Jacobians
        blocks = [b[0][0] for b in self._jacobian_blocks(x, chunk_size, rows)]
        if self.structure.layerwise:  # (deltas, inputs) per block: joined per layer
            jac = tuple({k: torch.cat([b[i][k] for b in blocks]) for k in blocks[0][i]}
                        for i in range(2))  # fmt: skip
        else:
            jac = torch.cat(blocks)
        return self.structure.functional_covariance(h, self._lam(), jac)

    def _jacobian_blocks(
        self, x: Any, chunk_size: int, rows: int | None, by_output: bool = False
    ) -> Iterator[tuple[list[torch.Tensor | LayerJacobians], torch.Tensor]]:
        """``x`` checked as ``predict`` checks it (type, dtype and shape, by name), then per
        block of at most ``chunk_size`` rows, the Jacobians ``(B, O, P)`` of the net's outputs in
        the Bayesian parameters at θ* (``rows`` not ``None``: each linear layer's ``(deltas,
        inputs)`` instead, at most ``rows`` at a time), as a list of one; ``by_output``: as a
        list of ``(B, O', P)`` blocks over the outputs, each under :data:`~bnn_pyro.methods.
        laplace.curvature.JACOBIAN_BLOCK_BYTES` (the rows cut down to fit first); with the
        block's outputs ``f(x, θ*)`` ``(B, O)``. The net is in eval mode, no graph kept."""
        mean, _ = self._require_fit()
        check_int("chunk_size", chunk_size)
        x = self._check_x(x).to(module_device(self.model))
        params = unflatten(mean, self._shapes)
        with modes(self.model, lambda m: False), torch.no_grad():
            if rows is not None:
                for part in x.split(min(chunk_size, rows)):
                    deltas, inputs, out = layer_jacobians(self.model, params, part)
                    yield [(deltas, inputs)], out
                return
            if not by_output:
                for part in x.split(chunk_size):
                    jac, out = output_jacobians(self.model, params, part)
                    yield [jac], out
                return
            outputs = self.model(x[:1]).shape[-1]
            n_rows, n_outs = jacobian_blocks(chunk_size, outputs, mean.numel(), mean.element_size())
            for part in x.split(min(chunk_size, n_rows)):
                pairs = [
                    output_jacobians(self.model, params, part, slice(o, o + n_outs))
                    for o in range(0, outputs, n_outs)
                ]
                yield [jac for jac, _ in pairs], torch.cat([out for _, out in pairs], dim=1)

    def _sample_outputs(self, x: torch.Tensor, num_samples: int, seed: int | None) -> torch.Tensor:
        """``predictive="nn"``: the net on each posterior sample; ``"glm"``: the linearised net."""
        self._require_fit()
        with seeded(seed, module_device(self.model)):
            stacked = self.sample_parameters(num_samples)
        with modes(self.model, lambda m: False):
            if self.predictive == "nn":
                samples = batched_call(self.model, stacked, x)
            else:
                samples = linearized_call(self.model, self.mean, stacked, x)
        return samples
