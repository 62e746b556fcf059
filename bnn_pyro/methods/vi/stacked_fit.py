"""K mean-field ``VariationalBNN`` fits in one pass: :func:`fit_stacked_vi`, the VI branch of
:func:`bnn_pyro.fit_stacked`.

The members' guides are set up as their own ``fit`` would set them up (each under its seed), then
stacked (:class:`~bnn_pyro.methods.vi.stacked.StackedVI`, under the objective their own fits
minimise: the ELBO, its sticking-the-landing or closed-form-KL estimator, or the black-box alpha
energy) and trained by the one loop, the models written back after every epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from bnn_pyro._checks import as_tensor, check_bool, check_float, check_int
from bnn_pyro._rng import global_rng_state, order_generators, seeded
from bnn_pyro.elbos.alpha import alpha_particles
from bnn_pyro.methods.vi.compiled_loss import CompiledStackedLoss
from bnn_pyro.methods.vi.engine import ObjectiveStep
from bnn_pyro.methods.vi.map_init import check_init, map_phase
from bnn_pyro.methods.vi.stacked import StackedVI
from bnn_pyro.methods.vi.stacked_support import members_elbo, why_not_stacked_vi
from bnn_pyro.methods.vi.svi import DEFAULT_SCHEDULE
from bnn_pyro.methods.vi.svi_model import check_fit_in_sample
from bnn_pyro.training.batches import shuffled_batches, validation_nll
from bnn_pyro.training.callbacks import History, check_callbacks
from bnn_pyro.training.loop import Callback, train
from bnn_pyro.training.optim import make_optimizer
from bnn_pyro.training.resume import SVI_SETTINGS, ResumePath, open_resume
from bnn_pyro.training.schedules import KLWeightSpec, check_schedule_args, kl_weight_at
from bnn_pyro.training.stacked import elementwise_optimizer
from bnn_pyro.training.stacked_batches import (
    check_member_sets,
    member_data,
    shuffled_member_batches,
)

__all__ = ["fit_stacked_vi"]

#: The one-particle objectives a stacked fit takes by name, as ``fit(elbo=...)`` does.
ONE_PARTICLE = ("trace", "stl", "meanfield")


def fit_stacked_vi(
    bnns: Sequence[Any],
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    seeds: Sequence[int],
    epochs: int = 100,
    batch_size: int = 128,
    lr: float | None = None,
    optimizer: Any = None,
    weight_decay: float = 0.0,
    kl_weight: KLWeightSpec = 1.0,
    lr_schedule: Any = None,
    callbacks: Iterable[Callback] = (),
    validation_data: tuple[Any, Any] | None = None,
    shuffle: bool = True,
    average: float | None = None,
    resume: ResumePath = None,
    progress: bool = True,
    init: str | None = None,
    map_epochs: int | None = None,
    elbo: str | None = None,
    num_particles: int = 1,
    compile: bool = False,
) -> History:
    """Train K ``VariationalBNN`` models as one: what :func:`bnn_pyro.fit_stacked` does with
    them (see there for the arguments); each ends as its own ``fit(X_k, y_k, seed=seeds[k],
    ...)`` would (up to float rounding).

    ``callbacks`` are called as ``fn(models, epoch, history)``, ``models`` the K models (an
    ``nn.ModuleList``) as trained so far; what a callback puts in their guides
    (``EarlyStopping(restore_best=True)``) is what training goes on from. ``validation_data``:
    ``(Nv, D)`` shared or ``(K, Nv, D)`` one set per member, adding ``val_nll`` (the members'
    mean) and ``member_val_nll``, each member's as its own ``fit`` scores it. ``compile``:
    the stacked objective compiled by ``torch.compile``
    (:class:`~bnn_pyro.methods.vi.compiled_loss.CompiledStackedLoss`; the first step compiles,
    tens of seconds), the same draws as the eager one, for weight-space draws (no local
    reparameterization, no dropout).

    Example:
        >>> import bnn_pyro as bp
        >>> X = torch.randn(2, 32, 2)  # each member its own rows: (K, N, D)
        >>> bnns = [bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1)) for _ in range(2)]
        >>> h = fit_stacked_vi(bnns, X, X.sum(-1), seeds=[3, 4], epochs=3, progress=False)
        >>> len(h["loss"]), [b.is_fitted() for b in bnns]
        (3, [True, True])
    """
    X, y = as_tensor("X", X, min_dim=2), as_tensor("y", y)
    if weight_decay:
        raise ValueError("weight_decay applies to MCDropout, SWAG and Laplace (VI has its prior)")
    if callable(kl_weight):
        kl_weight_at(kl_weight, 0)  # a bad schedule is refused before anything changes
    else:
        check_float("kl_weight", kl_weight, minimum=0.0)
    if init is not None or map_epochs is not None:
        for b in bnns:
            map_epochs = check_init(b, init, map_epochs, epochs)
    lr = 1e-2 if lr is None else lr  # VariationalBNN.fit's default
    num_particles = check_int("num_particles", num_particles)
    elbo = elbo if elbo is not None else members_elbo(bnns)
    if not (elbo in ONE_PARTICLE and num_particles == 1) and elbo != "alpha":
        raise ValueError(
            f"fit_stacked takes elbo='trace', 'stl' or 'meanfield' (one particle) or 'alpha' "
            f"(any num_particles), got elbo={elbo!r}, num_particles={num_particles!r}"
        )
    # the draws a member's net makes itself: its layers' pre-activation noise, dropout masks
    local = any(b.local_reparameterization for b in bnns)
    dropout = any(isinstance(m, nn.Dropout) for b in bnns for m in b.net.modules())
    if elbo == "alpha" and local:
        raise ValueError("elbo='alpha' is stacked for the weight-space estimator only")
    if elbo == "alpha" and dropout:
        # a member's own fit draws its particles' masks on the layout torch's matmul gives
        # them (a first layer's (P, B, H) output folded as (B, P, H) in memory), which one
        # stacked pass does not reproduce: the members would end elsewhere than their own fits
        raise ValueError(
            "elbo='alpha' is not stacked for nets with dropout (the members would not draw the "
            "masks their own fits draw): fit them one by one, or stacked with elbo='trace'"
        )
    reason = why_not_stacked_vi(bnns)
    if reason is not None:
        raise ValueError(f"fit_stacked: {reason}")
    if check_bool("compile", compile) and (local or dropout):
        raise ValueError(
            "compile=True compiles the stacked objective of weight-space draws: local "
            "reparameterization and dropout draw inside the net, from each member's generator, "
            "which torch.compile cannot trace (fit them stacked uncompiled)"
        )
    k = len(bnns)
    if len(seeds) != k:
        raise ValueError(f"seeds must give one seed per model ({k}), got {len(seeds)}")
    if not elementwise_optimizer(optimizer):
        raise ValueError(f"fit_stacked needs an elementwise optimizer, got {optimizer!r}")
    check_bool("shuffle", shuffle)
    check_schedule_args(lr_schedule, average)
    callbacks = check_callbacks(callbacks, validation_data is not None)
    owner = nn.ModuleList(bnns)
    run = {**{k: v for k, v in locals().items() if k in SVI_SETTINGS}, "seeds": list(seeds)}
    resume = open_resume(resume, owner, callbacks, run, extendable=False)
    per_member = check_member_sets(X, y, k)
    xs = [b.prepare_inputs(X[i] if per_member else X) for i, b in enumerate(bnns)]
    ys = [b.prepare_targets(y[i] if per_member else y, xs[i]) for i, b in enumerate(bnns)]
    n = xs[0].shape[0]
    if any(x.shape[0] != n for x in xs):
        raise ValueError("every member needs the same number of rows")
    scores = [
        validation_nll(b, member_data(validation_data, i, k)) for i, b in enumerate(bnns)
    ] if validation_data is not None else []  # fmt: skip
    generators = []
    for b, x, t, seed in zip(bnns, xs, ys, seeds, strict=True):
        with seeded(int(seed), b.device):  # what fit does before its first step
            b.input_shape = tuple(x.shape[1:])
            b.setup_guide(x[:2], t[:2], (x, t))
            g = torch.Generator(device=b.device)  # where its own fit's draws come from now
            g.set_state(global_rng_state(b.device))
        b.dataset_size = n
        generators.append(g)
    order = order_generators([int(s) for s in seeds])
    if map_epochs:  # as fit(init="map"): each member's MAP phase on its own minibatch order
        for b, x, t, g, seed in zip(bnns, xs, ys, order, seeds, strict=True):
            member_batches = shuffled_batches(x, t, min(batch_size, n), shuffle, int(seed))
            map_phase(b, member_batches, dataset_size=n, epochs=map_epochs, lr=lr, progress=False)
            g.set_state(member_batches.generator.get_state())
    if elbo == "alpha":  # as fit(elbo="alpha")
        p = alpha_particles(num_particles)
        stacked = StackedVI(bnns, generators, n, mode=elbo, particles=p)
    else:
        stacked = StackedVI(bnns, generators, n, mode=elbo)
    batches = shuffled_member_batches(
        torch.stack(xs), torch.stack(ys), batch_size, order, generators, shuffle
    )
    if resume is not None:  # the run's state is the stacked guides, not the members'
        for name, p in stacked.named_parameters():
            resume.extra[name] = p
    opt = make_optimizer(optimizer, stacked.parameters(), lr)
    objective = CompiledStackedLoss(stacked) if compile else stacked
    step = ObjectiveStep(objective, opt, kl_weight, desc=f"fit_stacked (lr={lr})")

    def after_epoch(_: Any, epoch: int, history: History) -> bool:
        if not callbacks:  # nobody looks at the members before the end (it writes them back)
            return False
        if not scores:  # (the validation has written them back this epoch)
            stacked.write_back()
        stop = any([bool(cb(owner, epoch, history)) for cb in callbacks])
        stacked.read_from()  # what a callback put in the guides is what training goes on from
        return stop

    def validation() -> dict[str, Any]:  # each member scored on its guide of this epoch
        stacked.write_back()
        per_member = [score() for score in scores]
        return {"val_nll": sum(per_member) / k, "member_val_nll": per_member}

    modes = [b.training for b in bnns]
    for b in bnns:
        b.train()
    try:
        history = train(
            stacked,
            step,
            batches,
            epochs=epochs,
            callbacks=[after_epoch],
            validation=validation if scores else None,
            progress=progress,
            desc=f"VariationalBNN, {k} models stacked",
            lr_schedule=DEFAULT_SCHEDULE if lr_schedule is None else lr_schedule,
            average=average,
            resume=resume,
        )
    finally:
        stacked.write_back()
        for b, mode in zip(bnns, modes, strict=True):
            b.train(mode)
    for i, (b, x, t) in enumerate(zip(bnns, xs, ys, strict=True)):  # as fit checks its own
        check_fit_in_sample(b, x, t, what=f"member {i} of the stacked fit")
    return history
