"""The SVI loop: divergence guard, kl_weight schedules, callbacks, optimizers, validation."""

from __future__ import annotations

import copy
import math

import pyro.optim
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.training import Checkpoint, linear_annealing


def _bnn() -> bp.VariationalBNN:
    torch.manual_seed(0)
    return bp.VariationalBNN(bp.nn.mlp(3, [6], 1), bp.Gaussian(scale=0.2))


def test_divergence_stops_with_a_clear_error_and_leaves_the_model_as_before(regression_data):
    X, y = regression_data
    bnn = _bnn()

    def poison(model, epoch, history):
        if epoch == 2:
            with torch.no_grad():
                model.guide.locs["net__0__weight"][0, 0] = float("nan")

    with pytest.raises(bp.TrainingDivergedError, match="epoch 3, step 0") as info:
        bnn.fit(X, y, epochs=10, batch_size=32, progress=False, callbacks=[poison])
    assert "lower learning rate" in str(info.value)
    with pytest.raises(bp.NotFittedError):  # a failed first fit: unfitted, as before it
        bnn.predict(X, num_samples=3)
    bnn.fit(X, y, epochs=2, batch_size=32, progress=False, seed=0)
    before = {k: v.clone() for k, v in bnn.state_dict().items()}
    with pytest.raises(bp.TrainingDivergedError, match="epoch 3, step 0"):
        bnn.fit(X, y, epochs=10, batch_size=32, progress=False, callbacks=[poison], seed=0)
    after = bnn.state_dict()  # a failed refit: the earlier fit, bit for bit
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    mean, _ = bnn.predict(X, num_samples=3)  # still usable
    assert bool(torch.isfinite(mean).all())


def test_kl_weight_schedule_is_applied_per_epoch(regression_data):
    X, y = regression_data
    history = _bnn().fit(X, y, epochs=6, kl_weight=linear_annealing(4), progress=False, seed=0)
    assert history["kl_weight"] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert math.isnan(history["kl"][0])  # beta = 0: the KL part is not observable from the loss
    # beta scales the KL part of the loss: loss = nll + beta * kl
    for loss, nll, kl, beta in zip(
        history["loss"][1:],
        history["nll"][1:],
        history["kl"][1:],
        history["kl_weight"][1:],
        strict=True,
    ):
        assert math.isclose(loss, nll + beta * kl, rel_tol=1e-6)


def test_tempering_changes_the_posterior_width(regression_data):
    X, y = regression_data
    scales = {}
    for beta in (1.0, 0.01):
        bnn = _bnn()
        bnn.fit(X, y, epochs=300, kl_weight=beta, progress=False, seed=0)
        scales[beta] = float(bnn.guide.scales()["net.0.weight"].mean())
    # a small beta down-weights the prior's pull towards its scale of 1: narrower posterior
    assert scales[0.01] < scales[1.0]


def test_callbacks_early_stopping_and_checkpoints(regression_data, tmp_path):
    X, y = regression_data
    seen = []
    history = _bnn().fit(
        X,
        y,
        epochs=50,
        progress=False,
        callbacks=[lambda m, e, h: seen.append(e) or e == 4],
    )
    assert seen == [0, 1, 2, 3, 4] and len(history["loss"]) == 5
    stopper = bp.EarlyStopping(monitor="val_nll", patience=2, min_delta=1e9)
    history = _bnn().fit(
        X, y, epochs=50, validation_data=(X[:16], y[:16]), progress=False, callbacks=[stopper]
    )
    assert len(history["val_nll"]) == 3  # no epoch improves by 1e9: stops after patience
    path = tmp_path / "ckpt.pt"
    _bnn().fit(X, y, epochs=4, progress=False, callbacks=[Checkpoint(str(path), every=2)])
    assert bp.VariationalBNN.load(path, net=bp.nn.mlp(3, [6], 1)).dataset_size == len(X)
    with pytest.raises(ValueError, match="val_nll"):
        _bnn().fit(X, y, epochs=2, progress=False, callbacks=[bp.EarlyStopping("val_nll")])


@pytest.mark.parametrize(
    "optimizer, lr",
    [
        (torch.optim.SGD, 1e-5),
        (lambda params: torch.optim.RMSprop(params, lr=1e-2), None),
        (pyro.optim.ClippedAdam({"lr": 1e-2}), None),
    ],
)
def test_torch_and_pyro_optimizers(regression_data, optimizer, lr):
    X, y = regression_data
    bnn = _bnn()
    # (the loss is the whole data set's negative ELBO, so plain SGD needs a small step)
    history = bnn.fit(X, y, epochs=60, optimizer=optimizer, lr=lr or 1e-3, progress=False, seed=0)
    assert history["loss"][-1] < history["loss"][0]


def test_validation_nll_is_reported(regression_data):
    X, y = regression_data
    history = _bnn().fit(
        X[:48], y[:48], epochs=30, validation_data=(X[48:], y[48:]), progress=False, seed=0
    )
    assert history["val_nll"][-1] < history["val_nll"][0]


# ------------------------------------------------------------------ the parts, on a toy model
def _toy(scales=None):
    """A one-site model and guide whose guide scale can be set per call (``scales``: a list
    popped per call of the guide, for a bad value on a later step)."""
    import pyro
    import pyro.distributions as dist

    loc = torch.nn.Parameter(torch.tensor(0.0))

    def model():
        pyro.sample("w", dist.Normal(3.0, 1.0))

    def guide():
        scale = scales.pop(0) if scales else 1.0
        pyro.sample("w", dist.Normal(loc, torch.tensor(scale)))

    return model, guide, loc


def _svi(model, guide, params, elbo="meanfield", **kwargs):
    from bnn_pyro.methods.vi.svi import GuardedSVI, as_pyro_optim, make_elbo

    loss = make_elbo(elbo, 1, False) if isinstance(elbo, str) else elbo
    return GuardedSVI(model, guide, as_pyro_optim(torch.optim.SGD, params, 0.1), loss, params,
                      **kwargs)  # fmt: skip


def test_a_step_returns_the_elbos_loss_and_moves_only_trainable_parameters():
    from bnn_pyro.methods.vi.svi import GuardedSVI, as_pyro_optim, make_elbo

    model, guide, loc = _toy()
    frozen = torch.nn.Parameter(torch.tensor(5.0), requires_grad=False)
    svi = GuardedSVI(model, guide, as_pyro_optim(torch.optim.SGD, [loc], 0.1),
                     make_elbo("meanfield", 1, False), [loc, frozen])  # fmt: skip
    assert svi.params == [loc]
    value = svi.step()
    # KL(N(0, 1) || N(3, 1)) = 4.5 in closed form; SGD at 0.1 on d/dloc = -3 moves loc to 0.3
    assert value == pytest.approx(4.5) and float(loc) == pytest.approx(0.3)
    assert loc.grad is None and float(frozen) == 5.0


def test_an_elbo_that_cannot_give_a_loss_is_refused():
    from bnn_pyro.methods.vi.svi import GuardedSVI, as_pyro_optim

    model, guide, loc = _toy()
    with pytest.raises(TypeError) as caught:
        GuardedSVI(model, guide, as_pyro_optim(None, [loc], 0.1), object(), [loc])
    assert str(caught.value) == "object has neither differentiable_loss nor loss_and_grads"


def test_a_non_finite_loss_moves_nothing_and_names_the_value():
    model, guide, loc = _toy(scales=[float("inf")])
    svi = _svi(model, guide, [loc], validate_every_step=False)
    import pyro

    with pyro.validation_enabled(False), pytest.raises(bp.exceptions.TrainingDivergedError) as e:
        svi.step()
    assert str(e.value).startswith("the loss is ") and float(loc) == 0.0 and loc.grad is None


def test_pyros_validation_runs_on_the_first_step_and_on_every_step_when_asked():
    """A guide scale that turns negative at the second step: without validation its loss is
    NaN (refused by the guard); with it, Pyro's check names the bad argument."""
    import pyro

    for every, error in ((False, bp.exceptions.TrainingDivergedError), (True, ValueError)):
        model, guide, loc = _toy(scales=[1.0, -1.0])
        svi = _svi(model, guide, [loc], elbo="trace", validate_every_step=every)
        with pyro.validation_enabled(True):
            svi.step()
            with pytest.raises(error):
                svi.step()
    model, guide, loc = _toy(scales=[-1.0])
    with pyro.validation_enabled(True), pytest.raises(ValueError):
        _svi(model, guide, [loc], elbo="trace").step()  # the first step is validated


def test_an_elbo_with_loss_and_grads_only_trains_too():
    """``TraceGraph_ELBO`` back-propagates by itself (its gradients are kept and applied)."""
    import pyro.distributions as dist
    from pyro.infer import TraceGraph_ELBO

    model, guide, loc = _toy()
    svi = _svi(model, guide, [loc], elbo=TraceGraph_ELBO())
    torch.manual_seed(0)
    eps = float(dist.Normal(0.0, 1.0).rsample())  # the guide's draw w = loc + eps
    torch.manual_seed(0)
    svi.step()
    # the pathwise gradient of log q(w) - log p(w) in loc is w - 3; SGD at 0.1 from 0
    assert float(loc) == pytest.approx(-0.1 * (eps - 3.0), abs=1e-6)


def test_svi_step_rows_hold_the_epochs_means_and_the_kl_at_its_weight():
    """``loss`` and ``nll`` are the means of the epoch's steps; ``kl`` is ``(loss - nll) / beta``
    at the epoch's ``kl_weight``."""
    from bnn_pyro.methods.vi.svi import SVIStep

    bnn = _bnn()
    X, y = torch.randn(8, 3), torch.randn(8, 1)
    bnn.setup_guide(X, y)
    params = list(bnn.parameters())
    svi = _svi(bnn.model, bnn.guide, params, elbo="trace")
    step = SVIStep(svi, dataset_size=8, kl_weight=lambda epoch: 0.5 * (epoch + 1))
    assert step.optimizer is svi.optim.optimizer
    step.start_epoch(1)  # beta = 1.0
    losses, nlls = [], []
    for _ in range(2):
        losses.append(step(X, y))
        nlls.append(float(svi.elbo.last_nll))
    row = step.end_epoch(losses, [8, 8])
    assert row["kl_weight"] == 1.0 and row["loss"] == pytest.approx(sum(losses) / 2)
    assert row["nll"] == pytest.approx(sum(nlls) / 2)
    assert row["kl"] == pytest.approx(row["loss"] - row["nll"])


def test_a_pyro_optimizers_state_goes_through_get_state_and_set_state():
    from bnn_pyro.methods.vi.svi import GuardedSVI, SVIStep, as_pyro_optim, make_elbo

    model, guide, loc = _toy()
    optim = pyro.optim.Adam({"lr": 0.1})
    assert as_pyro_optim(optim, [loc], 0.1) is optim
    step = SVIStep(GuardedSVI(model, guide, optim, make_elbo("meanfield", 1, False), [loc]), 1)
    assert step.optimizer is None
    step.svi.step()
    state, after_one = copy.deepcopy(step.state_dict()), float(loc)  # (it holds live tensors)
    assert set(state) == {"pyro_optim"} and state["pyro_optim"]
    step.svi.step()  # a second step with Adam's moments from the first
    after_two = float(loc)
    fresh = pyro.optim.Adam({"lr": 0.1})
    resumed = SVIStep(GuardedSVI(model, guide, fresh, make_elbo("meanfield", 1, False), [loc]), 1)
    resumed.load_state_dict(state)
    with torch.no_grad():
        loc.fill_(after_one)
    resumed.svi.step()  # the same second step: the analytic KL's gradient is exact
    assert float(loc) == pytest.approx(after_two, abs=1e-7)


def test_make_elbo_builds_each_objective_and_refuses_what_it_cannot():
    from pyro.infer import TraceTailAdaptive_ELBO

    from bnn_pyro.methods.vi.svi import make_elbo

    vectorized = make_elbo("trace", 4, vectorize=True)
    assert vectorized.num_particles == 4 and vectorized.vectorize_particles
    one_by_one = make_elbo("trace", 4, vectorize=False)
    assert not one_by_one.vectorize_particles and one_by_one.max_plate_nesting == 1
    assert not make_elbo("trace", 1, vectorize=True).vectorize_particles
    assert make_elbo("alpha", 1, True).num_particles == 10
    assert make_elbo("alpha", 3, True).num_particles == 3
    with pytest.raises(ValueError) as caught:
        make_elbo("renyi", 1, True)
    assert str(caught.value) == (
        "elbo must be one of ('trace', 'meanfield', 'stl', 'alpha') or a pyro ELBO, got 'renyi'"
    )
    with pytest.raises(ValueError) as caught:
        make_elbo("trace", 0, True)
    assert str(caught.value) == "num_particles must be an int >= 1, got 0"
    with pytest.raises(ValueError) as caught:
        make_elbo(TraceTailAdaptive_ELBO(num_particles=2, vectorize_particles=True), 1, True)
    assert str(caught.value) == (
        "TraceTailAdaptive_ELBO gives gradients but no loss value, which fit's divergence guard "
        "and history read: run it in your own SVI loop on bnn.model and bnn.guide"
    )


def test_a_jit_elbo_is_checked_against_the_guide_too():
    """The same model with another guide is another compiled loss; an instance not yet
    compiled, or not a JIT ELBO, passes."""
    from pyro.infer import JitTrace_ELBO, Trace_ELBO

    from bnn_pyro.elbos.jit import check_jit_elbo

    bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
    X, y = torch.randn(8, 2), torch.randn(8)
    elbo = JitTrace_ELBO(ignore_jit_warnings=True)
    check_jit_elbo(elbo, bnn.model, bnn.guide)  # nothing compiled yet
    bnn.fit(X, y, epochs=1, elbo=elbo, progress=False)
    check_jit_elbo(Trace_ELBO(), bnn.model, lambda *a, **k: None)
    with pytest.raises(ValueError, match="^this JitTrace_ELBO has compiled another model's loss"):
        check_jit_elbo(elbo, bnn.model, lambda *a, **k: None)


def test_the_default_step_validates_only_the_first_step_and_guarded_svi_evaluates_losses():
    """``GuardedSVI`` is an ``SVI``: Pyro's ``evaluate_loss`` gives the ELBO's loss (the closed
    form 4.5 here); by default only the first step runs Pyro's validation."""
    import pyro

    model, guide, loc = _toy(scales=[1.0, 1.0, -1.0])
    svi = _svi(model, guide, [loc], elbo="trace")
    with pyro.validation_enabled(True):
        assert svi.evaluate_loss() == pytest.approx(4.5, abs=5.0)  # one draw of the Trace ELBO
        svi.step()
        with pytest.raises(bp.exceptions.TrainingDivergedError):
            svi.step()  # a NaN, not Pyro's ValueError: not validated
    model, guide, loc = _toy()
    assert _svi(model, guide, [loc]).evaluate_loss() == pytest.approx(4.5)


def test_an_svi_step_hands_the_model_its_data_size_and_kl_weight():
    """A step's loss is the ELBO at ``dataset_size`` and the epoch's ``kl_weight`` (here N/B =
    10 and beta = 0.5), the same draws computed directly."""
    from bnn_pyro.methods.vi.diagnostics import LayerDiagnostics
    from bnn_pyro.methods.vi.svi import SVIStep

    bnn = _bnn()
    X, y = torch.randn(8, 3), torch.randn(8, 1)
    bnn.setup_guide(X, y)
    params = list(bnn.parameters())
    svi = _svi(bnn.model, bnn.guide, params, elbo="trace")
    bnn.input_shape = (3,)  # as fit sets it: the diagnostics' probe row
    diag = LayerDiagnostics.for_model(bnn)
    step = SVIStep(svi, dataset_size=80, kl_weight=lambda epoch: 0.5, diagnostics=diag)
    step.start_epoch(0)
    torch.manual_seed(3)
    want = float(svi.elbo.differentiable_loss(bnn.model, bnn.guide, X, y, dataset_size=80,
                                              kl_weight=0.5))  # fmt: skip
    torch.manual_seed(3)
    assert step(X, y) == pytest.approx(want, rel=1e-6)
    row = step.end_epoch([want], [8])
    assert row["kl_weight"] == 0.5 and "kl/net.0.weight" in row and "std/net.0.weight" in row
    default = SVIStep(svi, dataset_size=8)
    default.start_epoch(0)
    assert default.end_epoch([1.0], [8])["kl_weight"] == 1.0 and default.diagnostics is None


def test_a_torch_optimizers_state_goes_through_the_steps_state_dict():
    from bnn_pyro.methods.vi.svi import SVIStep

    model, guide, loc = _toy()
    svi = _svi(model, guide, [loc])
    step = SVIStep(svi, 1)
    svi.step()
    state = copy.deepcopy(step.state_dict())
    other_loc = torch.nn.Parameter(torch.tensor(0.0))
    fresh = SVIStep(_svi(model, guide, [other_loc]), 1)
    fresh.load_state_dict(state)
    assert fresh.optimizer.state_dict()["state"] == step.optimizer.state_dict()["state"]


def test_two_particles_are_vectorized():
    from bnn_pyro.methods.vi.svi import make_elbo

    assert make_elbo("trace", 2, vectorize=True).vectorize_particles


def test_run_svi_decays_a_torch_optimizers_rate_by_default_and_keeps_a_pyro_ones():
    """``lr_schedule=None``: cosine decay to 0 with a torch optimizer (the default Adam), the
    rate as given with a ``pyro.optim`` optimizer; ``"constant"`` asks for no decay."""
    X, y = torch.randn(32, 3), torch.randn(32)
    lrs = {}
    for name, options in {
        "default": {},
        "constant": {"lr_schedule": "constant"},
        "pyro": {"optimizer": pyro.optim.Adam({"lr": 0.01})},
    }.items():
        history = _bnn().fit(X, y, epochs=4, batch_size=None, lr=0.01, progress=False, seed=0,
                             **options)  # fmt: skip
        lrs[name] = history.get("lr")
    assert lrs["default"][0] == pytest.approx(0.01) and lrs["default"][-1] < 0.002
    assert lrs["constant"] is None and lrs["pyro"] is None  # no schedule: no rate recorded


def test_run_svi_passes_averaging_and_resume_on(tmp_path):
    X, y = torch.randn(32, 3), torch.randn(32)
    averaged, last = _bnn(), _bnn()
    averaged.fit(X, y, epochs=4, batch_size=None, progress=False, seed=0, average=0.5)
    last.fit(X, y, epochs=4, batch_size=None, progress=False, seed=0)
    assert not torch.equal(
        averaged.guide.means()["net.0.weight"], last.guide.means()["net.0.weight"]
    )
    path = tmp_path / "run.pt"
    _bnn().fit(X, y, epochs=2, batch_size=None, progress=False, seed=0, resume=path)
    assert path.exists()


def test_run_svi_shows_a_bar_unless_told_not_to(capsys):
    from bnn_pyro.methods.vi.svi import SVIStep, run_svi

    model, guide, loc = _toy()
    holder = torch.nn.Module()
    holder.loc = loc
    step = SVIStep(_svi(lambda *a, **k: model(), lambda *a, **k: guide(), [loc]), 1)
    run_svi(holder, step, lambda: [(torch.zeros(1), torch.zeros(1))], epochs=1)
    assert "fit" in capsys.readouterr().err
    run_svi(holder, step, lambda: [(torch.zeros(1), torch.zeros(1))], epochs=1, progress=False)
    assert capsys.readouterr().err == ""


def test_an_elbo_with_loss_and_grads_only_is_handed_the_steps_keywords():
    """``TraceGraph_ELBO``'s own ``loss_and_grads`` gets ``dataset_size``: its loss is the ELBO
    of 80 rows from a batch of 8, the same draws computed by Pyro directly."""
    from pyro.infer import TraceGraph_ELBO

    bnn = _bnn()
    X, y = torch.randn(8, 3), torch.randn(8, 1)
    bnn.setup_guide(X, y)
    params = list(bnn.parameters())
    svi = _svi(bnn.model, bnn.guide, params, elbo=TraceGraph_ELBO())
    torch.manual_seed(3)
    want = TraceGraph_ELBO().loss(bnn.model, bnn.guide, X, y, dataset_size=80)
    torch.manual_seed(3)
    assert svi.step(X, y, dataset_size=80) == pytest.approx(want, rel=1e-6)


def test_a_jit_elbo_is_checked_against_the_model_and_reads_only_pyros_closures():
    """The same guide with another model is another compiled loss; a compiled loss that closes
    over no model or guide (a subclass's own) is not read as one."""
    import pyro.ops.jit
    from pyro.infer import JitTrace_ELBO

    from bnn_pyro.elbos.jit import check_jit_elbo

    bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
    other = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(0.1), guide="normal")
    elbo = JitTrace_ELBO(ignore_jit_warnings=True)
    bnn.fit(torch.randn(8, 2), torch.randn(8), epochs=1, elbo=elbo, progress=False)
    with pytest.raises(ValueError, match="^this JitTrace_ELBO has compiled another model's loss"):
        check_jit_elbo(elbo, other.model, bnn.guide)
    fresh = JitTrace_ELBO()  # its compiled loss made otherwise (a subclass's own): not judged
    fresh._loss_and_surrogate_loss = pyro.ops.jit.CompiledFunction(lambda: None)
    check_jit_elbo(fresh, other.model, other.guide)
