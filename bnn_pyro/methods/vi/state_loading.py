"""``load_state_dict`` into a freshly built SVI model.

Pyro's guides make their parameters on their first call (an autoguide's ``locs``/``scales``,
the mean-field guide's ``locs``/``rhos``), so a model just built has none: a fitted model's
``state_dict`` then meets only unexpected keys, Pyro's classic pitfall.
:class:`LazyGuideLoading`, a base of :class:`~bnn_pyro.methods.vi.svi_model.SVIModel`, sets
the guide up before the guide's keys are read: from one row of the input shape the model
knows (from ``fit``, or from its net's first layer), through the checkpoint hook
``restore_fitted_state``, on a forked RNG. It works wherever torch loads the model, alone or
inside another module; a model that took a whole state dict counts as fitted.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from bnn_pyro._rng import seeded

__all__ = ["LazyGuideLoading"]


class LazyGuideLoading(nn.Module):
    """Makes ``load_state_dict`` set a lazily made guide up first (see the module docstring).

    A class that mixes it in has a ``guide`` submodule and the ``SVIModel`` attributes and
    hooks (``input_shape``, ``dataset_size``, ``restore_fitted_state``, ``is_fitted``).

    Example:
        >>> import torch, bnn_pyro as bp
        >>> X = torch.randn(16, 2); y = X.sum(-1)
        >>> fitted = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), guide="normal")
        >>> _ = fitted.fit(X, y, epochs=2, progress=False, seed=0)
        >>> fresh = bp.VariationalBNN(bp.nn.mlp(2, [4], 1), bp.Gaussian(0.1), guide="normal")
        >>> _ = fresh.load_state_dict(fitted.state_dict())
        >>> bool(torch.equal(fresh.predict(X, seed=0)[0], fitted.predict(X, seed=0)[0]))
        True
    """

    def __init__(self) -> None:
        super().__init__()
        #: Whether a whole state dict was loaded into the unfitted model (it then counts as
        #: fitted); a fit's own restores of its state (its guards) leave it as it was.
        self.loaded_state = False
        self.register_load_state_dict_post_hook(_after_load)

    def is_fitted(self) -> bool:
        """Whether ``fit`` has run, or a whole state dict was loaded."""
        return self.loaded_state or super().is_fitted()

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        was_fitted = self.is_fitted()
        guide: nn.Module = self.guide
        start = prefix + "guide."
        theirs = {k[len(start) :] for k in state_dict if k.startswith(start)}
        if theirs - set(guide.state_dict()):
            self._set_guide_up()
        args = (local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        self._loading = (error_msgs, len(error_msgs), prefix, was_fitted)
        try:
            super()._load_from_state_dict(state_dict, prefix, *args)
        except BaseException:
            del self._loading
            raise

    def _set_guide_up(self) -> None:
        """Create the guide's parameters from one row of the known input shape."""
        shape = self.input_shape
        spec = self._expected_features()
        if shape is None and spec is not None and spec.ndim == len(spec.features) + 1:
            shape = spec.features
        if shape is None:
            raise ValueError(
                f"load_state_dict: this {type(self).__name__}'s guide has no parameters yet "
                "(Pyro makes them on its first call) and its input shape is unknown (the net "
                "does not fix it): call setup_guide(x, y) on a row of the training data first, "
                "or save with .save(path) and reload with bp.load(path, net=...)"
            )
        fitted = {"dataset_size": self.dataset_size, "input_shape": list(shape)}
        with seeded(0, self.device):
            self.restore_fitted_state(fitted)


def _after_load(module: nn.Module, keys: Any) -> None:
    """After torch loaded ``module`` and its submodules: a load into an unfitted model with no
    missing, unexpected or mis-sized key of its own makes it count as fitted."""
    loading = module.__dict__.pop("_loading", None)
    if loading is None:
        return
    errors, count, prefix, was_fitted = loading
    own = [k for k in (*keys.missing_keys, *keys.unexpected_keys) if k.startswith(prefix)]
    if not was_fitted and len(errors) == count and not own:
        module.loaded_state = True
