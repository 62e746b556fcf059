"""``check_posterior_samples`` and ``model_site_shapes`` on their own: every refusal with its
whole message, what is converted and where it is put, the chain layouts, and the model's sites
read without touching the caller's random stream."""

import pyro
import pyro.distributions as dist
import pytest
import torch

from bnn_pyro.methods.vi.given_samples import check_posterior_samples, model_site_shapes

SHAPES = {"w": (2,), "b": (), "obs": (3,)}


def _check(samples, weights=("w",), **kwargs):
    return check_posterior_samples(samples, SHAPES, list(weights), **kwargs)


def _refusal(error, samples, weights=("w",), **kwargs) -> str:
    with pytest.raises(error) as caught:
        _check(samples, weights, **kwargs)
    return str(caught.value)


def test_not_a_dict_and_keys_that_are_not_names_are_refused():
    assert _refusal(TypeError, [torch.ones(5, 2)]) == (
        "posterior_samples must be a dict {site: (S, *shape)} such as mcmc.get_samples(), got list"
    )
    assert _refusal(TypeError, {"w": torch.ones(5, 2), 0: torch.ones(5)}) == (
        "posterior_samples must be keyed by site names, got keys [0]"
    )


def test_a_missing_latent_is_refused_only_where_a_call_reads_it():
    samples = {"w": torch.ones(5, 2)}
    assert set(_check(samples, latents=["b"])) == {"w"}  # nothing reads it: left out
    assert _refusal(ValueError, samples, latents=["b"], needed_by="predict") == (
        "predict needs the likelihood's site(s) ['b'] (a learned noise) in posterior_samples: "
        "add their draws (MCMC on bnn.model samples them)"
    )


def test_a_model_without_weight_sites_is_refused():
    assert _refusal(ValueError, {"obs": torch.ones(5, 3)}, weights=()) == (
        "posterior_samples: this model reads no site (it has no weight site)"
    )


@pytest.mark.parametrize(
    "value, got",
    [
        (3.0, "shape ()"),
        ("draws", "str"),
        (torch.ones(5, 2, dtype=torch.complex64), "shape (5, 2)"),
    ],
    ids=["a scalar", "a string", "complex draws"],
)
def test_what_is_not_real_draws_is_refused(value, got):
    assert _refusal(TypeError, {"w": value}) == (
        f"posterior_samples['w'] must be a real tensor or array of draws (S, *shape), got {got}"
    )


def test_lists_become_tensors_of_the_asked_dtype_on_the_asked_device():
    """A nested list is taken as an array; a scalar site's draws are a vector ``(S,)``. The
    draws are put on ``device`` in ``dtype``: on the meta device, where a tensor made on the
    default device and not moved would stay (and could not be copied out), and in float64."""
    out = _check({"w": [[1.0, 2.0]] * 4, "b": [0.5] * 4}, weights=("w", "b"), dtype=torch.float64)
    assert out["w"].dtype == torch.float64 and out["w"].tolist() == [[1.0, 2.0]] * 4
    assert out["b"].shape == (4,)
    with torch.device("meta"):  # the default device elsewhere: the draws still go to the CPU
        on_cpu = _check({"w": [[1.0, 2.0]] * 4})
    assert on_cpu["w"].device.type == "cpu" and on_cpu["w"].tolist() == [[1.0, 2.0]] * 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_draws_on_the_cpu_are_moved_to_the_models_device():
    moved = _check({"w": torch.ones(4, 2)}, device="cuda")
    assert moved["w"].device.type == "cuda"


def test_draws_are_detached():
    w = torch.ones(4, 2, requires_grad=True)
    assert not _check({"w": w})["w"].requires_grad


def test_a_wrong_shape_names_the_layout_a_scalar_site_included():
    samples = {"w": torch.ones(5, 2), "b": torch.ones(5, 2, 2)}
    assert _refusal(ValueError, samples, ("w", "b")) == (
        "posterior_samples['b'] must have shape (S,) (or (C, S,) with a chain dimension), "
        "got (5, 2, 2)"
    )
    # two leading dims but the wrong site shape: not a chain layout
    assert _refusal(ValueError, {"w": torch.ones(5, 3, 3)}, note="; see the docs") == (
        "posterior_samples['w'] must have shape (S, 2) (or (C, S, 2) with a chain dimension), "
        "got (5, 3, 3); see the docs"
    )


def test_chains_are_flattened_site_by_site():
    w = torch.arange(24.0).reshape(3, 4, 2)
    b = torch.arange(12.0).reshape(3, 4)
    out = _check({"w": w, "b": b}, weights=("w", "b"))
    assert torch.equal(out["w"], w.reshape(12, 2)) and torch.equal(out["b"], b.reshape(12))


def test_chains_mixed_with_plain_draws_are_refused_naming_both():
    samples = {"w": torch.ones(3, 4, 2), "b": torch.ones(12)}
    assert _refusal(ValueError, samples, ("w", "b")) == (
        "posterior_samples mixes sites with a chain dimension (C, S, ...) ['w'] and without "
        "['b']: pass mcmc.get_samples() (group_by_chain=False) for every site"
    )


def test_chains_of_different_lengths_are_refused_even_with_as_many_draws():
    """(2, 3) and (3, 2) chains both flatten to 6 draws, which would pair draws of different
    chains: refused with each site's (C, S)."""
    samples = {"w": torch.ones(2, 3, 2), "b": torch.ones(3, 2)}
    assert _refusal(ValueError, samples, ("w", "b")) == (
        "posterior_samples must hold one S for all sites, got {'w': (2, 3), 'b': (3, 2)}"
    )


def test_different_numbers_of_draws_and_none_are_refused():
    samples = {"w": torch.ones(5, 2), "b": torch.ones(4)}
    assert _refusal(ValueError, samples, ("w", "b")) == (
        "posterior_samples must hold one S for all sites, got {'w': 5, 'b': 4}"
    )
    assert _refusal(ValueError, {"w": torch.ones(0, 2)}) == (
        "posterior_samples must hold at least one draw (S >= 1), got S = 0"
    )


def test_non_finite_draws_are_counted_by_draw():
    w = torch.ones(5, 2)
    w[1, 0] = float("nan")
    w[3] = float("inf")  # both entries of one draw: one draw
    assert _refusal(ValueError, {"w": w}) == (
        "posterior_samples['w'] holds non-finite values in 2 of 5 draws: drop those draws "
        "(e.g. a diverged chain's) first"
    )


def test_model_site_shapes_of_a_model_without_tensor_arguments():
    def model(n):
        pyro.sample("z", dist.Normal(torch.zeros(n), 1.0).to_event(1))
        with pyro.plate("rows", 4, subsample_size=2):
            pyro.sample("obs", dist.Normal(0.0, 1.0))

    assert model_site_shapes(model, 3) == {"z": (3,), "obs": (2,)}  # no subsample site


def test_model_site_shapes_leaves_the_callers_random_stream_alone():
    def model(x):
        pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    model_site_shapes(model, torch.zeros(1))
    assert torch.equal(torch.rand(3), expected)
