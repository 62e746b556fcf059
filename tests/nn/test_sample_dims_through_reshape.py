"""A Bayesian net keeps its weights' leading sample dims through flatten/view/reshape.

Under ``Predictive(parallel=True)``, vectorized ELBO particles and ``predict``, each weight
carries a leading sample dim. A ``nn.Flatten``, ``nn.Unflatten`` or a ``view``/``flatten`` in a
user's ``forward`` must not fold that dim into the features: each sample's outputs must equal
the net run on that one sample's weights (``poutine.condition`` on one draw, no sample dim).
"""

from __future__ import annotations

import warnings

import pyro
import pyro.poutine as poutine
import pytest
import torch
import torch.nn as nn
from pyro.infer import Predictive, Trace_ELBO

import bnn_pyro as bp
from bnn_pyro.nn.batched import StackedCall
from bnn_pyro.nn.folding import keeps_sample_dims, needs_folded_input
from bnn_pyro.poutine import LocalReparameterization

S, B = 4, 6


class ViewNet(nn.Module):
    """A conv net whose forward flattens by ``how``: ``view``, ``flatten`` or ``torch.flatten``."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        if self.how == "view":
            h = h.view(h.size(0), -1)
        elif self.how == "reshape":
            h = h.reshape(x.shape[0], -1)
        elif self.how == "flatten":
            h = h.flatten(1)
        else:
            h = torch.flatten(h, 1)
        return self.fc(h)


class InputSkipNet(nn.Module):
    """Adds its raw input to an activation: the input must have the activations' rows."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)) + x)


IMAGE = (1, 6, 6)
NETS = {
    "nn.Flatten": (
        lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32, 3)),
        IMAGE,
    ),
    "pool then nn.Flatten": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3)
        ),
        IMAGE,
    ),
    "x.view(x.size(0), -1)": (lambda: ViewNet("view"), IMAGE),
    "x.reshape(N, -1)": (lambda: ViewNet("reshape"), IMAGE),
    "x.flatten(1)": (lambda: ViewNet("flatten"), IMAGE),
    "torch.flatten(x, 1)": (lambda: ViewNet("torch"), IMAGE),
    "nn.Unflatten": (
        lambda: nn.Sequential(
            nn.Linear(5, 2 * 4 * 4),
            nn.Unflatten(1, (2, 4, 4)),
            nn.Conv2d(2, 3, 3),
            nn.Flatten(),
            nn.Linear(3 * 2 * 2, 2),
        ),
        (5,),
    ),
    "x + f(x)": (InputSkipNet, (3,)),
    "MLP (unchanged)": (lambda: bp.nn.mlp(3, [8], 2), (3,)),
}


@pytest.fixture(scope="module", params=list(NETS), ids=list(NETS))
def fitted(request):
    make, features = NETS[request.param]
    torch.manual_seed(0)
    pyro.set_rng_seed(0)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(B, *features, generator=g)
    bnn = bp.VariationalBNN(make(), bp.Gaussian(0.1), init_scale=0.1)
    out_dim = bnn.net(X).shape[-1]
    y = torch.randn(B, out_dim, generator=g)
    with warnings.catch_warnings():  # one epoch: the posterior-collapse warning is expected
        warnings.simplefilter("ignore")
        bnn.fit(X, y, epochs=1, batch_size=B, progress=False, seed=0)
    return request.param, bnn, X, y


def _one_at_a_time(bnn, samples, X, count):
    """The reference: the model run once per sample on that sample's weights (no sample dim)."""
    with torch.no_grad():
        return torch.stack(
            [poutine.condition(bnn.model, data={k: v[s] for k, v in samples.items()})(X)
             for s in range(count)]
        )  # fmt: skip


def test_predictive_parallel_matches_one_sample_at_a_time(fitted):
    name, bnn, X, _ = fitted
    samples = bnn.sample_posterior(S, seed=1)
    first = samples[bnn.site_names[0]]
    assert not torch.allclose(first[0], first[1])
    out = Predictive(
        bnn.model, posterior_samples=samples, parallel=True, return_sites=["_RETURN", "obs"]
    )(X)
    expected = _one_at_a_time(bnn, samples, X, S)
    assert out["_RETURN"].shape == expected.shape == (S, B, expected.shape[-1]), name
    torch.testing.assert_close(out["_RETURN"], expected, rtol=1e-4, atol=1e-5)
    sequential = Predictive(bnn.model, posterior_samples=samples, return_sites=["obs"])(X)
    assert out["obs"].shape == sequential["obs"].shape


def test_predictive_parallel_with_the_guide(fitted):
    """The call of the README: weights drawn by the guide under the vectorized plate."""
    name, bnn, X, _ = fitted
    sites = list(bnn.site_names)
    out = Predictive(
        bnn.model, guide=bnn.guide, num_samples=S, parallel=True, return_sites=[*sites, "_RETURN"]
    )(X)
    shapes = {s.name: s.shape for s in bnn.evaluator.sites}
    draws = {k: out[k].reshape(S, *shapes[k]) for k in sites}
    torch.testing.assert_close(
        out["_RETURN"], _one_at_a_time(bnn, draws, X, S), rtol=1e-4, atol=1e-5
    )


def test_predict_matches_one_sample_at_a_time_on_the_batched_path(fitted):
    name, bnn, X, _ = fitted
    samples = bnn.sample_posterior(S, seed=2)
    _, _, got = bnn.predict(X, return_samples=True, posterior_samples=samples)
    torch.testing.assert_close(got, _one_at_a_time(bnn, samples, X, S), rtol=1e-4, atol=1e-5)
    assert bnn.evaluator.batched, f"{name}: predict fell back to vmap"


def test_vectorized_particles_match_one_particle_at_a_time(fitted):
    """The ELBO's layout: the guide drawn under the particle plate, the model replayed on it."""
    name, bnn, X, y = fitted
    pyro.set_rng_seed(3)
    with torch.no_grad(), pyro.plate("num_particles_vectorized", 3, dim=-2):
        guide_trace = poutine.trace(bnn.guide).get_trace(X, y)
        model_trace = poutine.trace(poutine.replay(bnn.model, trace=guide_trace)).get_trace(X, y)
    shapes = {s.name: s.shape for s in bnn.evaluator.sites}
    draws = {k: guide_trace.nodes[k]["value"].reshape(3, *shapes[k]) for k in shapes}
    f = model_trace.nodes["_RETURN"]["value"]
    torch.testing.assert_close(f, _one_at_a_time(bnn, draws, X, 3), rtol=1e-4, atol=1e-5)
    loss = Trace_ELBO(num_particles=3, vectorize_particles=True).loss(bnn.model, bnn.guide, X, y)
    assert torch.isfinite(torch.tensor(loss)), name


@pytest.mark.parametrize("net", ["nn.Flatten", "x.view(x.size(0), -1)"])
def test_local_reparameterization_trains_with_vectorized_particles(net):
    make, features = NETS[net]
    torch.manual_seed(0)
    X, y = torch.randn(B, *features), torch.randn(B, 3)
    bnn = bp.VariationalBNN(make(), bp.Gaussian(0.1), local_reparameterization=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = bnn.fit(X, y, epochs=2, num_particles=3, progress=False, seed=0)
    assert all(torch.isfinite(torch.tensor(history["loss"])))
    bnn.local_reparameterization = None  # the handler around the ELBO instead, to count
    with LocalReparameterization("local") as handler:
        Trace_ELBO(num_particles=3, vectorize_particles=True).loss(bnn.model, bnn.guide, X, y)
    assert handler.num_reparameterized == len(bnn.site_names) // 2  # every layer


@pytest.mark.parametrize(
    "net, fold, fold_input",
    [("MLP (unchanged)", False, False), ("nn.Flatten", True, False), ("x + f(x)", True, True)],
)
def test_how_each_net_runs_on_sample_dims(net, fold, fold_input):
    """An MLP takes the sample dims as leading dims (as before); a chain of torch layers folds
    its activations; a forward of the user's own folds its input too."""
    bnn = bp.VariationalBNN(NETS[net][0](), bp.Gaussian(0.1))
    assert keeps_sample_dims(bnn.net) is not fold
    assert needs_folded_input(bnn.net) is fold_input


def test_stacked_weights_without_a_plate_fold_the_activations_only():
    """``poutine.condition`` on stacked draws with no plate around the net: the sample dims are
    found by the layers, the input stays shared, and flatten still sees a plain batch."""
    make, features = NETS["nn.Flatten"]
    bnn = bp.VariationalBNN(make(), bp.Gaussian(0.1))
    X = torch.randn(B, *features)
    samples = {s.name: s.init + 0.1 * torch.randn(S, *s.shape) for s in bnn.evaluator.sites}
    with torch.no_grad():
        got = poutine.condition(bnn.model, data=samples)(X)
    torch.testing.assert_close(got, _one_at_a_time(bnn, samples, X, S), rtol=1e-4, atol=1e-5)


def test_without_a_plate_a_forward_that_mixes_its_raw_input_names_the_cause():
    bnn = bp.VariationalBNN(InputSkipNet(), bp.Gaussian(0.1))
    X = torch.randn(B, 3)
    samples = {s.name: s.init + 0.1 * torch.randn(S, *s.shape) for s in bnn.evaluator.sites}
    with pytest.raises(RuntimeError) as info, torch.no_grad():
        poutine.condition(bnn.model, data=samples)(X)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "folded" in notes and "parallel=False" in notes, notes
    with torch.no_grad():  # one row: the input broadcasts against every sample's row
        got = poutine.condition(bnn.model, data=samples)(X[:1])
    torch.testing.assert_close(got, _one_at_a_time(bnn, samples, X[:1], S))


@pytest.mark.parametrize("net", ["nn.Flatten", "x.view(x.size(0), -1)", "nn.Unflatten"])
def test_stacked_call_of_the_classic_methods_matches_vmap(net):
    make, features = NETS[net]
    torch.manual_seed(0)
    plain = make()
    stacked = {k: v.detach() + 0.1 * torch.randn(S, *v.shape) for k, v in plain.named_parameters()}
    x = torch.randn(B, *features)
    got = StackedCall()(plain, stacked, x)
    torch.testing.assert_close(got, StackedCall.vmapped(plain, stacked, x), rtol=1e-4, atol=1e-5)
