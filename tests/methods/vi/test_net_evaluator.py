"""``NetEvaluator``: the path a converted net is evaluated on for S weight samples (the chain
kernel of a plain MLP, the batched twin, the twin with the samples folded into the rows, or
``vmap``), decided once per model by a probe, and what each path gives against the user's own
net run one sample at a time (``functional_call``).

A wrong decision gives the same numbers on a slower path (``vmap`` runs the Pyro net once per
sample), so the tests pin the path each kind of net takes as well as the values."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

import bnn_pyro as bp


class Reshaping(nn.Module):
    """Reads its batch size off the input: the twin runs it only with the samples folded."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)).reshape(x.shape[0], 8))


class Functional(nn.Module):
    """Calls ``F.linear`` on its layer's weight itself: only ``vmap`` runs it on samples."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.a, self.b, self.drop = nn.Linear(3, 8), nn.Linear(8, 1), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.tanh(F.linear(x, self.a.weight, self.a.bias)))
        return self.b(h)


class Scaled(nn.Linear):
    """A linear layer with a forward of its own: in a chain of layers, but not one the chain
    kernel (which computes ``x W^T + b``) may run."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


class Doubled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return 2.0 * weight


def _parametrized() -> nn.Module:
    """A chain of layers whose first weight is parametrized (a point estimate, doubled): the
    twin runs it; the chain kernel, which reads ``0.weight``, may not."""
    first = nn.Linear(3, 8)
    torch.nn.utils.parametrize.register_parametrization(first, "weight", Doubled())
    return nn.Sequential(first, nn.ReLU(), nn.Linear(8, 1))


def _dropout_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 1))


def _normed() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 1))


#: net -> (batched, folded, chain): the path its evaluator takes
PATHS = {
    "mlp": (lambda: bp.nn.mlp(3, [8], 1), (True, False, True)),
    "mlp with dropout": (_dropout_mlp, (True, False, False)),
    "one linear layer": (lambda: nn.Linear(3, 1), (True, False, False)),
    "layer norm": (_normed, (True, False, False)),
    "reshaping": (Reshaping, (True, True, False)),
    "a parametrized layer": (_parametrized, (True, False, False)),
    "a linear subclass": (
        lambda: nn.Sequential(Scaled(3, 8), nn.ReLU(), nn.Linear(8, 1)),
        (False, False, False),
    ),
    "functional": (Functional, (False, False, False)),
}


def _model(make) -> tuple[bp.VariationalBNN, nn.Module]:
    torch.manual_seed(0)
    net = make()
    return bp.VariationalBNN(net, bp.Gaussian(0.1), init_scale=0.3), net


def _reference(net: nn.Module, samples: dict, x: torch.Tensor) -> torch.Tensor:
    """The user's net in eval mode, one sample at a time."""
    net = copy.deepcopy(net).eval()
    num = next(iter(samples.values())).shape[0]
    paths = {k: k.removeprefix("net.") for k in samples}
    with torch.no_grad():
        outputs = [
            functional_call(net, {paths[k]: v[s] for k, v in samples.items()}, (x,))
            for s in range(num)
        ]
    return torch.stack(outputs)


@pytest.mark.parametrize("name", list(PATHS))
def test_each_kind_of_net_takes_its_path_and_gives_its_own_nets_numbers(name):
    make, path = PATHS[name]
    bnn, net = _model(make)
    x = torch.randn(7, 3)
    bnn.setup_guide(x, torch.zeros(7))
    samples = bnn.sample_posterior(5, seed=0)
    bnn.eval()
    got = bnn.evaluator(samples, x)
    ev = bnn.evaluator
    assert (ev.batched, ev.twin.fold, ev._chain is not None) == path
    torch.testing.assert_close(got, _reference(net, samples, x), rtol=1e-5, atol=1e-6)
    one = {k: v[:1] for k, v in samples.items()}  # one sample: (1, n, O)
    torch.testing.assert_close(bnn.evaluator(one, x), got[:1], rtol=1e-5, atol=1e-6)


def test_the_path_is_decided_on_the_nets_arithmetic_not_its_dropout():
    """The first call comes from ``fit``'s check of the targets, in training mode: the probe
    runs in eval mode (dropout would differ between the paths and send every later call to
    ``vmap``), and the net's mode is given back."""
    bnn, net = _model(_dropout_mlp)
    X, y = torch.randn(32, 3), torch.randn(32)
    bnn.fit(X, y, epochs=1, progress=False, seed=0)
    assert bnn.net.training and bnn.evaluator.batched is True
    samples = bnn.sample_posterior(4, seed=1)
    bnn.eval()
    torch.testing.assert_close(
        bnn.evaluator(samples, X), _reference(net, samples, X), rtol=1e-5, atol=1e-6
    )


def test_dropout_in_training_mode_draws_its_masks_per_sample_on_the_vmap_path():
    """A net only ``vmap`` runs, with dropout, is called in training mode at the start of
    ``fit`` (the targets' check): each sample draws its own masks rather than failing."""
    bnn, _ = _model(lambda: Functional(dropout=0.5))
    X, y = torch.randn(32, 3), torch.randn(32)
    bnn.fit(X, y, epochs=1, progress=False, seed=0)  # it starts with that call
    assert bnn.evaluator.batched is False
    one = {k: v[:1].expand(6, *v.shape[1:]) for k, v in bnn.sample_posterior(1, seed=0).items()}
    bnn.train()
    out = bnn.evaluator(one, X[:4])
    assert not torch.allclose(out[0], out[1])  # the same weights, other masks


def test_the_twin_reads_the_nets_own_point_estimates_as_they_are_now():
    """Parameters that are not sampled (a layer norm's) are the Pyro net's own tensors, read
    at each call: a value changed after the model was built is the one used."""
    bnn, net = _model(_normed)
    x = torch.randn(6, 3)
    bnn.setup_guide(x, torch.zeros(6))
    samples = bnn.sample_posterior(3, seed=0)
    bnn.eval()
    bnn.evaluator(samples, x)  # the path decided with the values as built
    with torch.no_grad():
        bnn.net[1].weight.fill_(2.0)
        net[1].weight.fill_(2.0)
    torch.testing.assert_close(
        bnn.evaluator(samples, x), _reference(net, samples, x), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", ["mlp", "reshaping", "functional"])
def test_rows_taken_a_few_at_a_time_give_the_same_numbers(name):
    bnn, _ = _model(PATHS[name][0])
    x = torch.randn(9, 3)
    bnn.setup_guide(x, torch.zeros(9))
    samples = bnn.sample_posterior(4, seed=0)
    bnn.eval()
    whole = bnn.evaluator(samples, x)
    torch.testing.assert_close(bnn.evaluator(samples, x, chunk_size=2), whole)


def test_the_twin_runs_in_the_nets_mode():
    """Called in training mode, the twin's dropout draws masks (the same weights give other
    outputs); in eval mode it is off (they give the same)."""
    bnn, _ = _model(_dropout_mlp)
    x = torch.randn(5, 3)
    bnn.setup_guide(x, torch.zeros(5))
    one = {k: v[:1].expand(4, *v.shape[1:]) for k, v in bnn.sample_posterior(1, seed=0).items()}
    bnn.eval()
    evaluated = bnn.evaluator(one, x)
    assert bnn.evaluator.batched and torch.allclose(evaluated[0], evaluated[1])
    bnn.train()
    trained = bnn.evaluator(one, x)
    assert not torch.allclose(trained[0], trained[1])


def test_a_prediction_between_two_fits_changes_nothing_of_the_second():
    """The plain-torch objective runs the same twin as prediction, which leaves it in eval
    mode: the next fit still trains with the net's dropout on (the twin is put in the model's
    mode at every step), as a model that was never asked to predict does."""
    X, y = torch.randn(48, 3), torch.randn(48)
    asked, quiet = _model(_dropout_mlp)[0], _model(_dropout_mlp)[0]
    for bnn in (asked, quiet):
        bnn.fit(X, y, epochs=2, batch_size=16, progress=False, seed=0)
    asked.predict(X[:5], seed=0)
    for bnn in (asked, quiet):
        bnn.fit(X, y, epochs=2, batch_size=16, progress=False, seed=1)
    for a, b in zip(asked.predict(X[:5], seed=0), quiet.predict(X[:5], seed=0), strict=True):
        assert torch.equal(a, b)


def test_the_probe_gives_each_module_its_own_mode_back():
    """A module the user keeps in eval mode inside a net in training mode (a frozen layer)
    stays so after the probe, which runs every module in eval mode."""
    bnn, _ = _model(_dropout_mlp)
    x = torch.randn(5, 3)
    bnn.setup_guide(x, torch.zeros(5))
    bnn.train()
    bnn.net[2].eval()  # the dropout layer, held in eval mode
    bnn.evaluator(bnn.sample_posterior(2, seed=0), x)
    assert bnn.net.training and bnn.net[0].training and not bnn.net[2].training
