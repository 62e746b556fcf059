"""``fit(compile=True)``: the plain-torch ELBO of a mean-field ``VariationalBNN`` compiled by
``torch.compile``, checked against the eager loss it compiles (the reference), and its refusals
before any work; the stacked fit's compiled objective likewise.

The compiled graph draws with torch's generator in the eager order, so under one seed both
losses see the same weights; what differs is the order of float32 sums inside fused kernels.
Compiling takes seconds, about one C++ kernel per fused group of the graph's operations, so the
module compiles three fits and one loss, each once, on small nets: the trace fit's 3→8→1 graph
(the hidden layer and its activation inside the graph) serves the loss test too, the same model
and batch shape, from inductor's cache; the meanfield and stacked fits, which test their
objectives' own terms (the closed-form KL, a learned noise, the members' noise drawn outside the
graph), run a linear 3→1 net, whose graph has about half the kernels."""

from __future__ import annotations

import os
import warnings

import pyro
import pytest
import torch
from torch._dynamo.utils import counters

import bnn_pyro as bp
from bnn_pyro.methods.vi import compiled_loss
from bnn_pyro.methods.vi.compiled_loss import (
    COMPILED_ELBOS,
    CompiledLoss,
    CompiledStackedLoss,
    check_compile,
    compiled_objective,
)
from bnn_pyro.methods.vi.engine import direct_objective
from bnn_pyro.methods.vi.fast_loss import direct_loss_for
from bnn_pyro.methods.vi.stacked import StackedVI

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")


def _graph_breaks() -> dict:
    """Dynamo's graph breaks since ``counters.clear()``. Under mutation testing (``mutmut``
    sets ``MUTANT_UNDER_TEST``) every function of the mutated module is wrapped in a
    trampoline that dynamo cannot trace, so each call breaks the graph whatever the mutant:
    there, no break is counted (what the warm-up prevents is recorded as caught by these
    assertions outside mutmut, in ``benchmarks/results/mutation_equivalent.md``)."""
    if os.environ.get("MUTANT_UNDER_TEST"):
        return {}
    return dict(counters["graph_break"])


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    return x, x.sum(-1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g)


def _bnn(
    likelihood: bp.Likelihood | None = None, hidden: tuple[int, ...] = (8,)
) -> bp.VariationalBNN:
    torch.manual_seed(0)  # the same initial net for every fit
    return bp.VariationalBNN(bp.nn.mlp(3, list(hidden), 1), likelihood or bp.Gaussian(scale=0.5))


def _hooked() -> bp.VariationalBNN:
    net = bp.nn.mlp(3, [8], 1)
    net[0].register_forward_hook(lambda module, args, out: out)
    return bp.VariationalBNN(net, bp.Gaussian(0.5))


def _fit(compile: bool, **options) -> tuple[bp.VariationalBNN, bp.History, int]:
    """A fit, and how many steps ran the compiled loss (``hidden``: the net's hidden widths,
    3→8→1 unless given)."""
    x, y = _data()
    make = options.pop("likelihood", None)  # a fresh one: no cache warmed by another fit
    bnn = _bnn(None if make is None else make(), options.pop("hidden", (8,)))
    calls, call = [], CompiledLoss.__call__
    CompiledLoss.__call__ = lambda self, *a, **k: calls.append(1) or call(self, *a, **k)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history = bnn.fit(
                x, y, epochs=3, batch_size=32, progress=False, seed=0, compile=compile, **options
            )
    finally:
        CompiledLoss.__call__ = call
    return bnn, history, len(calls)


@pytest.mark.parametrize(
    "options",
    [
        # an annealed kl_weight: a new value each epoch, an input of the one graph
        dict(kl_weight=lambda epoch: 0.5 + 0.25 * epoch),
        # the closed-form KL and a learned noise, a latent of the likelihood
        dict(elbo="meanfield", likelihood=lambda: bp.Gaussian(scale="learned"), hidden=()),
    ],
    ids=["trace, annealed", "meanfield, learned noise"],
)
def test_a_compiled_fit_follows_the_eager_fit(options):
    eager, eager_history, none = _fit(False, **dict(options))
    counters.clear()
    compiled, compiled_history, steps = _fit(True, **dict(options))
    assert (none, steps) == (0, 6)  # the compiled loss ran every step (64 rows / 32, 3 epochs)
    # one graph: the objective's caches were warm when it was traced (a cache miss inside it
    # broke it in two and made a compiled learned-noise fit slower than the eager one)
    assert _graph_breaks() == {}
    # 6 Adam steps of the same draws, the sums in another order: float32 rounding (~1e-7
    # relative per sum) that Adam's normalised steps carry over, well inside 1e-4
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(compiled.state_dict()[key], value, rtol=1e-4, atol=1e-5)
    assert compiled_history["loss"] == pytest.approx(eager_history["loss"], rel=1e-5)
    assert compiled_history["nll"] == pytest.approx(eager_history["nll"], rel=1e-5)


def test_the_compiled_loss_and_its_gradients_are_the_eager_ones():
    # one batch of 32 rows, the shape every step of the fits above runs: the first call's graph
    # is the one the trace fit compiled (the same model, loss and input shapes), which inductor
    # then serves from its cache instead of compiling it again
    x, y = (t[:32] for t in _data())
    bnn = _bnn()
    bnn.setup_guide(x, y)
    eager = direct_loss_for(bnn)
    compiled = compiled_objective(bnn, "trace", direct_objective(bnn, "trace", 1))
    assert isinstance(compiled, CompiledLoss) and compiled.params == eager.params
    again = compiled_objective(bnn, "trace", direct_objective(bnn, "trace", 1))
    assert again is compiled  # kept on the model: one compilation
    other = compiled_objective(bnn, "meanfield", direct_objective(bnn, "meanfield", 1))
    assert other is not compiled  # another loss
    # the second weight: the same graph, another input; no dataset size: the rows unscaled
    for kl_weight, n in ((1.0, 640), (0.3, 640), (1.0, None)):
        pyro.set_rng_seed(1)
        got, got_nll = compiled(x, y, dataset_size=n, kl_weight=kl_weight)
        pyro.set_rng_seed(1)
        want, want_nll = eager(x, y, dataset_size=n, kl_weight=kl_weight)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(got_nll, want_nll, rtol=1e-5, atol=1e-4)
        for a, b in zip(
            torch.autograd.grad(got, compiled.params),
            torch.autograd.grad(want, eager.params),
            strict=True,
        ):  # each gradient to 1e-4 of its largest entry: the ELBO's own check's tolerance
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))


def test_each_elbo_keeps_its_own_compiled_loss_on_the_model():
    """One compiled loss per elbo name, each wrapping the objective it was handed, kept on the
    model while the guide's parameters are the same tensors, compiled anew once one is
    replaced (a fit that set the guide up afresh)."""
    x, y = _data()
    bnn = _bnn()
    bnn.setup_guide(x, y)
    made = {e: compiled_objective(bnn, e, direct_objective(bnn, e, 1)) for e in COMPILED_ELBOS}
    assert [(c.direct.stl, c.direct.analytic_kl) for c in made.values()] == [
        (False, False), (False, True), (True, False)
    ]  # fmt: skip
    for e, c in made.items():  # each kept, whatever objective object is handed in again
        assert compiled_objective(bnn, e, direct_objective(bnn, e, 1)) is c
    other = _bnn()
    other.setup_guide(x, y)
    assert (
        compiled_objective(other, "trace", direct_objective(other, "trace", 1)) is not made["trace"]
    )  # another model: its own
    key = next(iter(bnn.guide.locs))
    bnn.guide.locs[key] = torch.nn.Parameter(torch.zeros_like(bnn.guide.locs[key]))
    fresh = compiled_objective(bnn, "trace", direct_objective(bnn, "trace", 1))
    assert fresh is not made["trace"] and fresh.params[0] is bnn.guide.locs[key]
    # one parameter fewer (a guide over other sites) is not the same tensors either
    shorter = direct_objective(bnn, "trace", 1)
    shorter.params = shorter.params[1:]
    assert compiled_objective(bnn, "trace", shorter).params == shorter.params


def test_a_second_fit_with_another_elbo_steps_with_that_elbos_compiled_loss():
    """One model fitted compiled with ``"trace"``, then with ``"meanfield"``: the second fit's
    steps run the closed-form-KL loss, not the first fit's graph kept on the model."""
    x, y = _data()
    bnn = _bnn(hidden=())  # a linear net: half the kernels to compile
    ran, call = [], CompiledLoss.__call__
    CompiledLoss.__call__ = lambda self, *a, **k: (
        ran.append(self.direct.analytic_kl) or call(self, *a, **k)
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for elbo in ("trace", "meanfield"):
                bnn.fit(x, y, epochs=1, batch_size=32, elbo=elbo, compile=True, progress=False)
    finally:
        CompiledLoss.__call__ = call
    assert ran == [False, False, True, True]  # two steps an epoch: 64 rows / 32


@pytest.mark.parametrize(
    "make, options, exc, message",
    [
        (_bnn, dict(compile="yes"), TypeError, r"^compile must be a bool, got str \('yes'\)$"),
        (
            _bnn,
            dict(compile=True, elbo="alpha"),
            ValueError,
            r"^compile=True compiles the ELBOs \('trace', 'meanfield', 'stl'\) of one particle, "
            r"got elbo='alpha', num_particles=1$",
        ),
        (
            _bnn,
            dict(compile=True, num_particles=2),
            ValueError,
            r"got elbo='trace', num_particles=2$",
        ),
        (
            lambda: bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.5), guide="normal"),
            dict(compile=True),
            ValueError,
            r"^compile=True compiles the plain-torch loss, and here is none: guide='normal' is "
            r"not the library's mean-field guide \(guide='meanfield'\)$",
        ),
        (
            lambda: bp.VariationalBNN(
                bp.nn.mlp(3, [8], 1), bp.Gaussian(0.5), prior=bp.HierarchicalNormalPrior()
            ),
            dict(compile=True),
            ValueError,
            r"here is none: the prior has latent sites of its own \(a hierarchical scale\), which "
            r"Pyro scores$",
        ),
        (
            _hooked,
            dict(compile=True),
            ValueError,
            r"here is none: the net's modules have forward or backward hooks, which the "
            r"plain-torch twin skips$",
        ),
        (
            lambda: bp.HiddenLayerBNN(3, [8], 1, bp.Gaussian(0.5)),
            dict(compile=True),
            ValueError,
            r"here is none: HiddenLayerBNN has no plain-torch loss \(only VariationalBNN has\)$",
        ),
        (
            _bnn,
            dict(compile=True, optimizer=pyro.optim.Adam({"lr": 0.01})),
            ValueError,
            r"here is none: the optimizer is a pyro.optim one \(PyroOptim\), which SVI steps$",
        ),
    ],
    ids=[
        "not a bool",
        "alpha",
        "particles",
        "autoguide",
        "prior latents",
        "hooks",
        "hidden",
        "pyro.optim",
    ],
)
def test_fit_refuses_compile_before_any_work(make, options, exc, message):
    x, y = _data()
    model = make()
    with pytest.raises(exc, match=message):
        model.fit(x, y, epochs=1, progress=False, **options)
    assert not model.is_fitted()


def test_compile_false_asks_nothing():
    check_compile(object(), False, "alpha", 5)  # nothing to compile: nothing checked


def _stacked(compile: bool, **options):
    x, y = _data()
    torch.manual_seed(0)
    bnns = [bp.VariationalBNN(bp.nn.mlp(3, [], 1), bp.Gaussian("learned")) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = bp.fit_stacked(
            bnns,
            x,
            y,
            seeds=[0, 1],
            epochs=3,
            batch_size=32,
            progress=False,
            compile=compile,
            **options,
        )
    return bnns, history


def test_a_compiled_stacked_fit_follows_the_eager_one():
    """The members' noise drawn eagerly from their generators and handed to the graph: the
    same draws as the eager stacked fit, so float32 rounding of the sums alone separates the
    two (as for one model above); an annealed kl_weight is an input, a learned noise a site."""
    schedule = dict(kl_weight=lambda epoch: 0.5 + 0.25 * epoch)
    eager, eager_history = _stacked(False, **schedule)
    counters.clear()
    compiled, compiled_history = _stacked(True, **schedule)
    assert _graph_breaks() == {}  # the noise drawn outside, the caches warm
    for a, b in zip(eager, compiled, strict=True):
        for key, value in a.state_dict().items():
            torch.testing.assert_close(b.state_dict()[key], value, rtol=1e-4, atol=1e-5)
    for key in ("loss", "nll"):
        assert compiled_history[key] == pytest.approx(eager_history[key], rel=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: bp.VariationalBNN(
            bp.nn.mlp(3, [8], 1), bp.Gaussian(0.5), local_reparameterization=True
        ),
        lambda: bp.VariationalBNN(bp.nn.mlp(3, [8], 1, dropout=0.1), bp.Gaussian(0.5)),
    ],
    ids=["local reparameterization", "dropout"],
)
def test_a_stacked_fit_refuses_compile_where_the_net_draws_its_own_noise(make):
    x, y = _data()
    bnns = [make(), make()]
    with pytest.raises(ValueError, match=r"^compile=True compiles the stacked objective of "):
        bp.fit_stacked(bnns, x, y, seeds=[0, 1], epochs=1, progress=False, compile=True)
    assert not any(b.is_fitted() for b in bnns)


def _spy_warm_up(monkeypatch):
    """Replace the compiled loss's warm-up by one that records its device and the eager value
    it computes (from the random state it is handed, which it leaves as it found it)."""
    calls = []

    def spy(device, eager):
        with torch.random.fork_rng():
            calls.append((device, eager()))

    monkeypatch.setattr(compiled_loss, "_warm_up", spy)
    return calls


def test_the_warm_up_runs_once_on_the_calls_own_arguments(monkeypatch):
    """One eager pass before the first call and none after, on the first call's own
    arguments: its value is the loss the call returns (the graph replaced by the eager loss it
    compiles, so this test compiles nothing)."""
    calls = _spy_warm_up(monkeypatch)
    x, y = _data()
    bnn = _bnn()
    bnn.setup_guide(x, y)
    compiled = CompiledLoss(direct_objective(bnn, "trace", 1))
    compiled._fn = compiled._loss  # eager: the warm-up is what is tested here
    pyro.set_rng_seed(3)
    first = compiled(x, y, dataset_size=640, kl_weight=0.3)
    for _ in range(2):
        compiled(x, y, dataset_size=640, kl_weight=0.3)
    assert len(calls) == 1 and calls[0][0] == bnn.guide.locs[next(iter(bnn.guide.locs))].device
    for warm, got in zip(calls[0][1], first, strict=True):
        assert torch.equal(warm, got)


def test_the_stacked_warm_up_runs_once_on_the_calls_own_noise_and_arguments(monkeypatch):
    calls = _spy_warm_up(monkeypatch)
    x, y = _data()
    torch.manual_seed(0)
    bnns = [bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian("learned")) for _ in range(2)]
    for bnn in bnns:
        bnn.setup_guide(x, y)
    x, y = x.expand(2, *x.shape), y.expand(2, *y.shape)
    stacked = StackedVI(bnns, [torch.Generator().manual_seed(k) for k in range(2)], 640)
    compiled = CompiledStackedLoss(stacked)
    compiled._fn = compiled._loss  # eager, as above
    first = compiled(x, y, 0.3)
    for _ in range(2):
        compiled(x, y, 0.3)
    assert len(calls) == 1 and calls[0][0] == torch.device("cpu")
    for warm, got in zip(calls[0][1], first, strict=True):
        assert torch.equal(warm, got) and warm.shape == (2,)
