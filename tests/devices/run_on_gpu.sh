#!/usr/bin/env bash
# The GPU checks in one script, for a CUDA machine whose Python has torch but not Pyro:
#   bash tests/devices/run_on_gpu.sh [OUT_DIR]
# Put the pyro-ppl and pyro-api wheels in .whl/ first (installed with pip, with the project
# editable; --no-index: nothing is downloaded), e.g. on a machine with the package index:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl pyro-ppl==1.9.2 pyro-api==0.1.2
# Without mapie and dask (the dev extra's, absent from that image) their tests skip, except two
# doctests of benchmarks/uci/intervals.py that need mapie: add its wheel to run those too. Sections, each under its own time limit, chosen by
# SECTIONS (default: devices, suite, bench, proj, in this order):
#   devices  pytest tests/devices                    (the CUDA end-to-end tests)
#   suite    the whole suite with CUDA visible       (pytest-xdist, XDIST workers)
#   bench    python benchmarks/gpu.py --device cuda  (its table to OUT_DIR/gpu.md)
#   proj     python -m benchmarks.uci.projection --device cuda --sets $PROJ_SETS
#   order    the estimators' CPU-by-name test alone, then after the CUDA estimator test (it
#            failed after tests/devices/test_cuda.py on an H100 and passes alone on a CPU)
# SUITE_ARGS adds pytest options to the suite (e.g. "-v --durations=20": each outcome by name as
# it lands, so a run stopped by its time limit still says which tests failed).
# Logs go to OUT_DIR (default: $OUT, else ./gpu_run).
set -u
out=${1:-${OUT:-gpu_run}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# Into the interpreter itself, not a --target folder on PYTHONPATH: the suite's subprocesses
# (torchrun workers, the installed CLI, the wheel test) replace PYTHONPATH, and the version test
# reads the installed distribution's metadata.
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 3
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 4
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, pyro; print('torch', torch.__version__, 'pyro', pyro.__version__,
'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
    nproc
} 2>&1 | tee "$out/env.txt"

run() {  # run NAME SECONDS COMMAND...: the log to $out/NAME.log, its last lines to stdout
    local name=$1 limit=$2
    shift 2
    local began=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - began)) s (limit $limit s)"
    tail -n "${TAIL:-25}" "$out/$name.log"
}

for section in ${SECTIONS:-devices suite bench proj}; do
    case $section in
    devices) run devices "${T_DEVICES:-150}" python3 -m pytest -q -rfE -p no:cacheprovider \
        tests/devices ;;
    suite) run suite "${T_SUITE:-330}" python3 -m pytest -q -rfE -p no:cacheprovider \
        -n "${XDIST:-14}" --dist load --ignore=tests/devices ${SUITE_ARGS:-} ;;
    bench) run bench "${T_BENCH:-150}" python3 benchmarks/gpu.py --device cuda --out "$out/gpu.md" ;;
    proj) run proj "${T_PROJ:-200}" python3 -m benchmarks.uci.projection --device cuda \
        --sets "${PROJ_SETS:-kin8nm,protein}" --output "$out/uci_projection_gpu.md" ;;
    order)
        run order-alone 60 python3 -m pytest -q -p no:cacheprovider tests/devices/test_device_guards.py \
            -k default_numbers
        run order-after 90 python3 -m pytest -q -p no:cacheprovider tests/devices/test_cuda.py \
            tests/devices/test_device_guards.py -k "estimators_run_on_cuda or default_numbers" ;;
    *) echo "unknown section $section" ;;
    esac
done
