"""Train an SVI-fitted BNN with PyTorch Lightning: :class:`BNNLightningModule`.

Pyro's own recipe (``examples/svi_lightning.py``): the ELBO's differentiable loss is the
``training_step`` loss, a plain torch optimizer steps the guide's parameters, and Lightning
runs the loop, the devices and ``strategy="ddp"``. Here the loss is exactly the one ``fit``
minimises (the plain-torch objective of :mod:`bnn_pyro.methods.vi.engine` where it covers the
model, else :func:`bnn_pyro.methods.vi.svi.make_elbo`'s ELBO on the model and guide of the
method; the data scaled to the *global* ``dataset_size``), so under DDP, where Lightning
averages the gradients of the ranks' minibatches, the KL enters once per global step.

Needs the optional extra: ``pip install bnn_pyro[lightning]``. ``import bnn_pyro`` does not
import Lightning; this module does.

Example::

    import lightning
    from bnn_pyro.methods.vi.lightning import BNNLightningModule

    bnn = bp.VariationalBNN(bp.nn.mlp(13, [50], 1), bp.Gaussian(scale="learned"))
    module = BNNLightningModule(bnn, dataset_size=len(X), example=(X[:2], y[:2]), lr=1e-2)
    trainer = lightning.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=50)
    trainer.fit(module, DataLoader(TensorDataset(X, y), batch_size=128, shuffle=True))
    mean, var = bnn.predict(X_test)          # the method itself, trained
"""

from __future__ import annotations

from typing import Any

import torch

try:
    import lightning
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "bnn_pyro.methods.vi.lightning needs PyTorch Lightning: pip install 'bnn_pyro[lightning]'"
    ) from err

from bnn_pyro._checks import check_float, check_int
from bnn_pyro.methods.vi.engine import direct_objective, why_not_direct
from bnn_pyro.methods.vi.svi import make_elbo
from bnn_pyro.methods.vi.svi_model import SVIModel
from bnn_pyro.training.optim import make_optimizer

__all__ = ["BNNLightningModule"]


class BNNLightningModule(lightning.LightningModule):
    """A :class:`~bnn_pyro.VariationalBNN` or :class:`~bnn_pyro.HiddenLayerBNN` as a
    ``LightningModule``: its loss is the negative ELBO that ``fit`` minimises.

    Args:
        method: the SVI-trained BNN (trained in place: predict with it afterwards).
        dataset_size: ``N``, the number of training rows *in all* (all ranks together); a
            minibatch of ``B`` rows stands for ``N / B`` in the likelihood.
        example: an ``(x, y)`` pair of a few training rows (``(B, ...)``, ``(B,)``/``(B, O)``),
            to create the guide's parameters before Lightning hands them to the optimizer;
            not needed once the guide is set up (a fitted or loaded method).
        lr: the optimizer's learning rate.
        optimizer: ``None`` (Adam), a name or a torch optimizer class, as ``fit`` takes it.
        elbo: ``None`` (the method's own), ``"trace"``, ``"meanfield"``, ``"stl"`` or
            ``"alpha"``, as ``fit`` takes it.
        num_particles: samples per step (vectorized).

    Each training step logs ``loss`` (the negative ELBO of the minibatch, scaled to ``N``).

    Shapes:
        a batch is ``(x (B, *features), y (B,) | (B, O))``, as ``fit`` takes rows.
    """

    def __init__(
        self,
        method: SVIModel,
        dataset_size: int,
        example: tuple[Any, Any] | None = None,
        lr: float = 1e-3,
        optimizer: Any = None,
        elbo: str | None = None,
        num_particles: int = 1,
    ) -> None:
        if not isinstance(method, SVIModel):
            raise TypeError(
                "method must be a VariationalBNN or HiddenLayerBNN (an SVI-trained BNN), got "
                f"{type(method).__name__}; the classic methods train with their own fit "
                "(data-parallel under torchrun)"
            )
        dataset_size = check_int("dataset_size", dataset_size)
        lr = check_float("lr", lr, minimum=0.0, strict=True)
        num_particles = check_int("num_particles", num_particles)
        elbo = method.default_elbo if elbo is None else elbo
        if elbo not in method.elbos:
            raise ValueError(f"elbo must be one of {method.elbos}, got {elbo!r}")
        if not method.is_fitted():
            if not (isinstance(example, (tuple, list)) and len(example) == 2):
                raise ValueError(
                    "example must be an (x, y) pair of a few training rows: the guide's "
                    "parameters are created from it before the optimizer sees them"
                )
            x = method.prepare_inputs(example[0], "example x")
            y = method.prepare_targets(example[1], x, "example y")
            method.input_shape = tuple(x.shape[1:])
            method.setup_guide(x[:2], y[:2])
        super().__init__()
        self.method = method
        method.dataset_size = dataset_size
        self.dataset_size, self.lr, self.optimizer_spec = dataset_size, lr, optimizer
        #: The objective as a Pyro ELBO (the reference, and the loss where ``direct`` is None).
        self.elbo = make_elbo(elbo, num_particles, vectorize=True)
        #: The plain-torch objective ``fit`` steps with, where it covers the model (chosen by
        #: type: :func:`~bnn_pyro.methods.vi.engine.why_not_direct`), else ``None``.
        self.direct = (
            direct_objective(method, elbo, num_particles)
            if why_not_direct(method, elbo, num_particles, optimizer) is None
            else None
        )

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The minibatch's negative ELBO, scaled to ``dataset_size`` (differentiable)."""
        method = self.method
        x = method.prepare_inputs(x, "x")
        y = method.prepare_targets(y, x, "y")
        if self.direct is not None:
            return self.direct(x, y, dataset_size=self.dataset_size)[0]
        return self.elbo.differentiable_loss(
            method.model, method.guide, x, y, dataset_size=self.dataset_size
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss(x, y)
        self.log("loss", loss.detach(), prog_bar=True, on_step=True, on_epoch=True)
        return loss

    def on_train_start(self) -> None:
        self._emit = getattr(self.method.guide, "emit_params", None)
        if self._emit is not None:
            self.method.guide.emit_params = False  # the parameters live in the module

    def on_train_end(self) -> None:
        if getattr(self, "_emit", None) is not None:
            self.method.guide.emit_params = self._emit

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = [p for p in self.method.parameters() if p.requires_grad]
        return make_optimizer(self.optimizer_spec, params, self.lr)
