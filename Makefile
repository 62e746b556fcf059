# Two commands: `make demo` (the main job) and `make test`. Both create .venv on first use,
# installing torch (the version pinned in constraints.txt) before the project. Which build of
# torch that is depends on pip: on Linux, PyPI's torch is the CUDA build (a download of several
# GB); where pip is configured with PyTorch's CPU index it is the CPU build. TORCH_INDEX picks
# the index for torch alone, e.g. the CPU-only build on any machine:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
# The project comes with its dev extra and the peers the parity tests run beside (ood: laplace-
# torch; peers: posteriors, torch-uncertainty), resolved against the same torch.
PYTHON ?= python3
TORCH_INDEX ?=
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick mutate lint bench docs clean

PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) -e '.[dev,ood,peers]'
	# torch-uncertainty depends on torchvision, whose PyPI build is made for PyPI's CUDA torch:
	# beside a CPU torch its operators fail to load and importing it raises. Then it goes; what
	# the parity tests use of torch-uncertainty (its SGHMC and SGLD files) needs torch alone.
	$(PY) -c "import torchvision" 2>/dev/null || $(PY) -m pip uninstall --quiet -y torchvision
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bnn-pyro demo --out demo_output

# The suite on every core (pytest-xdist); TEST_WORKERS=0 runs it in this one process. Each test
# file runs whole on one worker (--dist loadfile), so a module fixture (the docs site, a benchmark's
# quick run, fitted models) is built once, not once per interleaving.
# The project's bytecode is compiled first: where PYTHONDONTWRITEBYTECODE is set, as on CI, every
# process the suite starts (the workers, subprocess and distributed tests, notebook kernels)
# would otherwise compile the package's source again on import (about a second each).
TEST_WORKERS ?= auto
test: $(STAMP)
	$(PY) -m compileall -q bnn_pyro benchmarks tests > /dev/null
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The edit-run loop: the library's doctests and the tests of its core (ELBOs, guides, likelihoods,
# priors, the training engine, layers, checkpoints, threads), of VI, of the demo and of the Pyro
# idioms, without the benchmarks, notebooks, documentation build, distributed runs and peer
# comparisons.
test-quick: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) bnn_pyro tests/elbos tests/guides tests/likelihoods tests/priors tests/training tests/nn tests/methods/vi tests/test_checkpoint.py tests/test_threads.py tests/test_learned_prior.py tests/cli/test_demo_cli.py tests/pyro_idioms

# Mutation testing of one module (benchmarks/mutation.py; needs pip install mutmut): the share of
# small bugs its tests catch, and every survivor, into benchmarks/results/mutation.md, e.g.
#   make mutate MODULE=bnn_pyro/metrics/ood.py TESTS=tests/metrics/test_metrics_ood.py
mutate: $(STAMP)
	$(PY) -c "import mutmut" 2>/dev/null || $(PY) -m pip install --quiet mutmut
	$(PY) benchmarks/mutation.py --module $(MODULE) --tests $(TESTS) $(if $(SURVIVORS),--survivors) $(if $(NO_DOCTESTS),--no-doctests) $(if $(JOBS),--jobs $(JOBS))

lint: $(STAMP)
	$(VENV)/bin/ruff check bnn_pyro tests benchmarks notebooks
	$(VENV)/bin/ruff format --check bnn_pyro tests benchmarks notebooks

bench: $(STAMP)
	$(PY) benchmarks/step_time.py

# The documentation site, built with warnings as errors into site/; read it served:
# python -m http.server --directory site 8000, then http://localhost:8000
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) demo_output .pytest_cache site
