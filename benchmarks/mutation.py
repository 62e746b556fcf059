"""Mutation testing of one module at a time: how many small, plausible bugs its tests catch.

``mutmut`` (on the package index) rewrites the module into hundreds of mutants, one small change
each (``<`` for ``<=``, ``+ 1``, a dropped argument, a changed constant), and runs the given
tests against each. A mutant the tests fail on is *killed*; one they pass is a *survivor*: a
bug of that shape would ship. A survivor is either a missing test (write it) or an
*equivalent* mutant, one that does not change what the code computes (say why in
``benchmarks/results/mutation_equivalent.md``, one line per mutant: ``name: reason``). A
mutant's name numbers it within its function, so an edit to the function renumbers its
mutants: after changing a module, read its equivalents against the new run's diffs.

The run happens in a temporary copy of the repository (the checkout is left alone): the
package, the tests, ``conftest.py`` and ``pyproject.toml``, with a ``setup.cfg`` telling
``mutmut`` what to mutate and which tests to run (the given test files plus the module's own
doctests; ``--no-doctests`` leaves those out, for a module whose examples are slow enough to
dominate a run that repeats them for every mutant). A mutant that makes the tests run past
``mutmut``'s time limit (its default, ``(tests' time + 1 s) x 15`` of wall-clock time) counts
as killed (``timeout``): a looping mutant would not pass unnoticed, though on a busy machine a
slow test can time out too, so the report gives timeouts their own column.

``mutmut`` runs each mutant's tests in a child forked from one process that has already run
torch, and a child forked from a process whose OpenMP thread pool is up hangs in its first
parallel torch operation. Such a hang reads as a timeout whatever the mutant does
(``self.factor = None`` in ``calibration/recalibration.py`` "timed out" after 38 s with 6 s of
CPU; on one thread it fails in 5 s), so the run keeps torch to one thread
(:func:`environment`), and a timeout means a slow or looping mutant again.

``mutmut`` mutates no function under a decorator other than ``staticmethod`` and
``classmethod`` (a ``@property``, a ``@torch.no_grad()`` function): each section names those
(:func:`unmutated`) and the table at the head counts them, so the blind spot stays in view.

The report (``--output``, default ``benchmarks/results/mutation.md``) holds one section per
module, replaced when the module is run again: the counts, the kill rate
``(killed + timeout) / (mutants - equivalent)`` and every survivor not listed as equivalent,
with its diff.
``make mutate MODULE=bnn_pyro/metrics/ood.py TESTS=tests/metrics/test_metrics_ood.py`` runs it.

Run: ``python benchmarks/mutation.py --module PATH --tests PATH [PATH ...] [--output PATH]``
(needs ``pip install mutmut``). After writing the tests that kill a run's survivors, add
``--survivors`` (and the new test files to ``--tests``): only the report's survivors of that
module run again, against the tests of the last run and the new ones, and its section is
updated. A full run of a module can take most of an hour on two cores; the survivors, minutes.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPORT = os.path.join(HERE, "results", "mutation.md")
EQUIVALENT = os.path.join(HERE, "results", "mutation_equivalent.md")
#: What a run copies: the package, the tests and what pytest reads to collect them (the
#: benchmarks too: some tests import the harness).
COPIED = ("bnn_pyro", "tests", "benchmarks", "conftest.py", "pyproject.toml")
#: Appended to the copied ``tests/conftest.py``: ``mutmut`` forks every mutant's run from one
#: process, and tqdm's default lock is a multiprocessing lock, one semaphore shared by all those
#: children. A child stopped at its time limit while holding it (inside a progress bar) leaves
#: it held, and every later child then hangs in its first bar until its own limit: a run of
#: timeouts whatever the mutants do (seen on ``training/loop.py``, whose doctests draw bars).
#: A lock of each process's own, and no monitor thread (which takes the lock while a fork may
#: happen).
FORK_SAFE_TQDM = """

# added by benchmarks/mutation.py: progress bars that a forked run cannot hang in
import threading as _threading

from tqdm.std import tqdm as _tqdm

_tqdm.set_lock(_threading.RLock())
_tqdm.monitor_interval = 0
"""
_RESULT = re.compile(r"^\s*(\S+): (\w[\w ]*)$")
_SECTION = re.compile(r"^## `(?P<module>[^`]+)`$", flags=re.M)


def setup_cfg(module: str, tests: list[str], doctests: bool = True) -> str:
    """The ``[mutmut]`` section for one module and its tests (and the module's doctests, unless
    ``doctests`` is false).

    ``mutmut`` copies the module's top-level folder (``bnn_pyro``, or ``benchmarks`` for the
    UCI harness's scoring) and mutates only the module in it; for a library module it copies
    ``benchmarks`` too, which tests import (a benchmark's judge, its problems).

    Example:
        >>> print(setup_cfg("bnn_pyro/metrics/ood.py", ["tests/metrics/test_metrics_ood.py"]))
        [mutmut]
        source_paths=bnn_pyro
        only_mutate=bnn_pyro/metrics/ood.py
        also_copy=benchmarks
        pytest_add_cli_args=-p no:xdist -p no:cacheprovider -q
        pytest_add_cli_args_test_selection=tests/metrics/test_metrics_ood.py
            bnn_pyro/metrics/ood.py
        <BLANKLINE>
        >>> setup_cfg("benchmarks/uci/protocol.py", ["t.py"]).splitlines()[1:3]
        ['source_paths=benchmarks', 'only_mutate=benchmarks/uci/protocol.py']
        >>> setup_cfg("bnn_pyro/m.py", ["t.py"], doctests=False).splitlines()[-1]
        'pytest_add_cli_args_test_selection=t.py'
    """
    selection = "\n    ".join([*tests, module] if doctests else tests)
    top = module.split("/")[0]
    return (
        "[mutmut]\n"
        f"source_paths={top}\n"
        f"only_mutate={module}\n"
        + ("also_copy=benchmarks\n" if top == "bnn_pyro" else "")
        + "pytest_add_cli_args=-p no:xdist -p no:cacheprovider -q\n"
        f"pytest_add_cli_args_test_selection={selection}\n"
    )


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``mutmut`` runs in: ``base`` (default ``os.environ``) with torch and its
    maths libraries kept to one thread, so that no forked test run inherits a thread pool it
    would hang in, and no bytecode written into the temporary copy.

    Example:
        >>> env = environment({"PATH": "/bin", "OMP_NUM_THREADS": "8"})
        >>> env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["PATH"]
        ('1', '1', '/bin')
    """
    one = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return {**(os.environ if base is None else base), **one, "PYTHONDONTWRITEBYTECODE": "1"}


def parse_results(text: str) -> dict[str, str]:
    """``mutmut results --all true`` as ``{mutant: status}``.

    Example:
        >>> parse_results("    m.x_f__mutmut_1: killed\\n    m.x_f__mutmut_2: survived\\n")
        {'m.x_f__mutmut_1': 'killed', 'm.x_f__mutmut_2': 'survived'}
    """
    found = {}
    for line in text.splitlines():
        match = _RESULT.match(line)
        if match:
            found[match[1]] = match[2]
    return found


def equivalent_mutants(path: str = EQUIVALENT) -> dict[str, str]:
    """The mutants recorded as equivalent, ``{name: reason}`` (lines ``- `name`: reason``).

    Example:
        >>> import tempfile, os
        >>> with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        ...     _ = f.write("# Equivalent\\n- `m.x_f__mutmut_3`: the interval is symmetric\\n")
        >>> equivalent_mutants(f.name)
        {'m.x_f__mutmut_3': 'the interval is symmetric'}
        >>> os.remove(f.name)
    """
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found = {}
    for line in lines:
        match = re.match(r"^- `([^`]+)`: (.+)$", line)
        if match:
            found[match[1]] = match[2]
    return found


def unmutated(source: str) -> list[str]:
    """The functions of a module that ``mutmut`` leaves alone: it mutates no function under a
    decorator other than ``staticmethod`` or ``classmethod`` (``@property``,
    ``@torch.no_grad()``, ...), so the report names them, a blind spot of the run.

    Example:
        >>> unmutated("@torch.no_grad()\\ndef f(): pass\\nclass A:\\n    @property\\n"
        ...           "    def g(self): pass\\n    @staticmethod\\n    def h(): pass\\n")
        ['A.g', 'f']
    """
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kinds = [d.id for d in child.decorator_list if isinstance(d, ast.Name)]
                plain = len(child.decorator_list) == 1 and kinds in (
                    ["staticmethod"],
                    ["classmethod"],
                )
                if child.decorator_list and not plain:
                    found.append(prefix + child.name)

    visit(ast.parse(source), "")
    return sorted(found)


def section(module: str, statuses: dict[str, str], equivalent: dict[str, str],
            diffs: dict[str, str], tests: list[str], skipped: list[str] = (),
            doctests: bool = True) -> str:  # fmt: skip
    """One module's part of the report (``doctests``: whether the module's doctests ran).

    Example:
        >>> s = section("bnn_pyro/m.py", {"a": "killed", "b": "timeout", "c": "survived",
        ...             "d": "survived"}, {"d": "same result"}, {"c": "-x\\n+y"}, ["t.py"])
        >>> "| 4 | 1 | 1 | 1 | 1 | 66.7% |" in s, "2 of 3 caught, **66.7%**" in s
        (True, True)
        >>> "`c`" in s, "`d`" not in s.split("Survivors")[1]
        (True, True)
    """
    kinds = {k: sum(1 for s in statuses.values() if s == k) for k in ("killed", "timeout")}
    survivors = sorted(n for n, s in statuses.items() if s == "survived" and n not in equivalent)
    # an equivalent mutant leaves the count only where it survived (a slow one can time out)
    judged = len(statuses) - sum(
        1 for n, s in statuses.items() if s == "survived" and n in equivalent
    )
    caught = kinds["killed"] + kinds["timeout"]
    rate = 100.0 * caught / judged if judged else float("nan")
    lines = [
        f"## `{module}`",
        "",
        f"Run {datetime.now(timezone.utc):%Y-%m-%d} with `python benchmarks/mutation.py "
        f"--module {module} --tests {' '.join(tests)}{'' if doctests else ' --no-doctests'}` "
        f"({'and' if doctests else 'without'} the module's doctests): "
        f"{caught} of {judged} caught, **{rate:.1f}%**.",
        "",
        "| mutants | killed | timeout | survived | equivalent | caught |",
        "|---|---|---|---|---|---|",
        f"| {len(statuses)} | {kinds['killed']} | {kinds['timeout']} | {len(survivors)} | "
        f"{len(statuses) - judged} | {rate:.1f}% |",
        "",
    ]
    if skipped:
        names = ", ".join(f"`{name}`" for name in skipped)
        lines += [f"Not mutated (decorated, which `mutmut` skips): {names}.", ""]
    other = sorted({s for s in statuses.values()} - {"killed", "timeout", "survived"})
    if other:
        counts = ", ".join(f"{k}: {sum(1 for s in statuses.values() if s == k)}" for k in other)
        lines += [f"Not run or not judged ({counts}):", ""]
        lines += [f"- `{n}`: {v}" for n, v in sorted(statuses.items()) if v in other] + [""]
    same = sorted(n for n, s in statuses.items() if s == "survived" and n in equivalent)
    if same:  # named, so that a later --survivors run still knows them if one leaves the list
        names = ", ".join(f"`{name}`" for name in same)
        lines += [f"{_EQUIVALENT_LINE} {names}.", ""]
    lines += ["Survivors (a missing test each, or an equivalent mutant to record):", ""]
    if not survivors:
        lines.append("none")
    for name in survivors:
        lines += [f"* `{name}`", "", "```diff", diffs.get(name, "").strip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


_EQUIVALENT_LINE = "Equivalent (reasons in `mutation_equivalent.md`):"


def _sections(report: str) -> tuple[str, dict[str, str]]:
    """The report's head and its ``{module: text after the section's title}``."""
    parts = _SECTION.split(report)
    return parts[0], dict(zip(parts[1::2], parts[2::2], strict=True))


def merge(report: str, new: str) -> str:
    """The report with ``new``'s module section replacing its earlier one (or appended).

    Example:
        >>> old = "# Mutation testing\\n\\n## `a.py`\\n\\nold a\\n\\n## `b.py`\\n\\nb\\n"
        >>> print(merge(old, "## `a.py`\\n\\nnew a\\n"))
        # Mutation testing
        <BLANKLINE>
        | module | mutants | killed | timeout | survived | equivalent | caught | not mutated |
        |---|---|---|---|---|---|---|---|
        | all | 0 | 0 | 0 | 0 | 0 | nan% | 0 |
        <BLANKLINE>
        ## `a.py`
        <BLANKLINE>
        new a
        <BLANKLINE>
        ## `b.py`
        <BLANKLINE>
        b
        <BLANKLINE>
    """
    module = _SECTION.search(new)["module"]
    head, sections = _sections(report)
    sections[module] = new[new.index("\n") :]
    body = "".join(f"## `{name}`{text.rstrip()}\n\n" for name, text in sections.items())
    head = head.split(_SUMMARY)[0].rstrip() + "\n\n" + summary(sections)
    return head.rstrip() + "\n\n" + body.rstrip() + "\n"


_SUMMARY = "| module | mutants |"


def summary(sections: dict[str, str]) -> str:
    """The report's table of modules: each one's counts row and share caught, and all of them
    together.

    Example:
        >>> a = section("a.py", {"x": "killed", "y": "survived"}, {}, {}, ["t.py"])
        >>> b = section("b.py", {"x": "timeout", "y": "survived"}, {"y": "same"}, {}, ["t.py"],
        ...             ["f", "A.g"])
        >>> print(summary(_sections(a + "\\n" + b)[1]))
        | module | mutants | killed | timeout | survived | equivalent | caught | not mutated |
        |---|---|---|---|---|---|---|---|
        | `a.py` | 2 | 1 | 0 | 1 | 0 | 50.0% | 0 |
        | `b.py` | 2 | 0 | 1 | 0 | 1 | 100.0% | 2 |
        | all | 4 | 1 | 1 | 1 | 1 | 66.7% | 2 |
        <BLANKLINE>
    """
    rows, total = [], [0] * 6
    for name, text in sections.items():
        counts = re.search(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", text, flags=re.M)
        if counts is None:  # not a section this script wrote
            continue
        skipped = re.search(r"^Not mutated \(decorated.*$", text, flags=re.M)
        values = [int(v) for v in counts.groups()]
        values.append(skipped[0].count("`") // 2 - 1 if skipped else 0)  # less `mutmut`
        total = [t + v for t, v in zip(total, values, strict=True)]
        rows.append((f"`{name}`", values))
    rows.append(("all", total))
    head = "killed | timeout | survived | equivalent | caught | not mutated |"
    lines = [f"{_SUMMARY} {head}", "|---" * 8 + "|"]
    for name, (mutants, killed, timeout, survived, equivalent, skipped) in rows:
        judged = mutants - equivalent
        rate = 100.0 * (killed + timeout) / judged if judged else float("nan")
        lines.append(
            f"| {name} | {mutants} | {killed} | {timeout} | {survived} | {equivalent} | "
            f"{rate:.1f}% | {skipped} |"
        )
    return "\n".join(lines) + "\n"


def earlier(report: str, module: str, equivalent: dict[str, str]) -> tuple[dict, list[str], bool]:
    """A module's section of ``report`` read back: ``(statuses, tests, doctests)``, where the
    statuses keep the survivors' and the equivalent mutants' names and stand in for the caught
    ones (whose names the report does not keep) by their counts, and ``doctests`` says whether
    the module's doctests ran.

    Example:
        >>> statuses = {"a": "killed", "b": "timeout", "c": "survived", "bnn_pyro.m.d": "survived",
        ...             "e": "no tests"}
        >>> s = section("bnn_pyro/m.py", statuses, {"bnn_pyro.m.d": "same"}, {}, ["t.py"])
        >>> statuses, tests, doctests = earlier("# head\\n\\n" + s, "bnn_pyro/m.py",
        ...                                     {"bnn_pyro.m.d": "same"})
        >>> sorted(statuses.values()), tests, doctests
        (['killed', 'no tests', 'survived', 'survived', 'timeout'], ['t.py'], True)
        >>> s = section("bnn_pyro/m.py", statuses, {}, {}, ["t.py", "u.py"], doctests=False)
        >>> earlier(s, "bnn_pyro/m.py", {})[1:]
        (['t.py', 'u.py'], False)
        >>> [n for n, v in statuses.items() if v == "survived"]
        ['c', 'bnn_pyro.m.d']
        >>> s = section("bnn_pyro/m.py", statuses, {"bnn_pyro.m.d": "same"}, {}, ["t.py"])
        >>> again = earlier(s, "bnn_pyro/m.py", {})[0]  # d left the list: it runs again
        >>> [n for n, v in again.items() if v == "survived"]
        ['c', 'bnn_pyro.m.d']
    """
    sections = _sections(report)[1]
    if module not in sections:
        raise SystemExit(f"no section for {module} in the report: run it in full first")
    text = sections[module]
    command = re.search(r"--tests (.+?)( --no-doctests)?` \((?:and|without)", text)
    tests, doctests = command[1].split(), command[2] is None
    row = re.search(r"^\| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", text, flags=re.M)
    killed, timeout = int(row[2]), int(row[3])
    statuses = {f"caught before {i}": "killed" for i in range(killed)}
    statuses |= {f"caught before {killed + i}": "timeout" for i in range(timeout)}
    statuses |= {name: "survived" for name in re.findall(r"^\* `([^`]+)`$", text, flags=re.M)}
    same = re.search(rf"^{re.escape(_EQUIVALENT_LINE)} (.*)\.$", text, flags=re.M)
    statuses |= {name: "survived" for name in re.findall(r"`([^`]+)`", same[1] if same else "")}
    statuses |= dict(re.findall(r"^- `([^`]+)`: (.+)$", text, flags=re.M))  # not run, not judged
    dotted = module.removesuffix(".py").replace("/", ".") + "."
    statuses |= {name: "survived" for name in equivalent if name.startswith(dotted)}
    return statuses, tests, doctests


#: How ``mutmut run`` says it stopped before any mutant: the tests fail on the unmutated copy
#: (while it records which tests reach which function, or in its clean run), or a forced
#: failure is not seen.
_MUTMUT_STOPS = (
    "failed to collect stats",
    "Failed to run clean test",
    "FAILED: Unable to force test failures",
)


def refuse_unclean(output: str) -> None:
    """Stop with ``mutmut``'s own account where it mutated nothing: the tests failed on the
    unmutated copy (``mutmut`` then marks every mutant "not checked", which a report would
    read as 0% caught), or its forced-fail check found tests that cannot fail. (A test that
    reads the caller's frame, such as a warning's location, fails under ``mutmut``'s
    trampolines: leave it out of the run.)

    Example:
        >>> refuse_unclean("Running mutation testing\\r74/74")  # it ran: nothing to say
        >>> refuse_unclean("E  assert 1 == 2\\nFAILED t.py::test_x\\nFailed to run clean test")
        Traceback (most recent call last):
        ...
        SystemExit: mutmut ran no mutant: Failed to run clean test; its last lines:
        E  assert 1 == 2
        FAILED t.py::test_x
        Failed to run clean test
    """
    lines = output.splitlines()  # (a spinner's carriage returns split too)
    stop = next((line for line in lines if line.startswith(_MUTMUT_STOPS)), None)
    if stop is None:
        return
    tail = "\n".join(line for line in lines[-25:] if line.strip())
    raise SystemExit(f"mutmut ran no mutant: {stop}; its last lines:\n{tail}")


def run(
    module: str,
    tests: list[str],
    names: list[str] | None = None,
    doctests: bool = True,
    jobs: int | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Mutate ``module`` in a temporary copy, run ``tests`` (and the module's doctests, unless
    ``doctests`` is false) on every mutant (or only on the mutants ``names``), ``jobs`` mutants
    at a time (``None``: ``mutmut``'s default, one per core): statuses, and the diff of every
    survivor."""
    mutmut = shutil.which("mutmut", path=os.path.dirname(sys.executable)) or shutil.which("mutmut")
    if mutmut is None:
        raise SystemExit("mutmut is not installed: pip install mutmut")
    for path in [module, *tests]:
        if not os.path.exists(os.path.join(ROOT, path.split("::")[0])):
            raise SystemExit(f"no such file in the repository: {path}")
    with tempfile.TemporaryDirectory(prefix="mutation-") as work:
        for name in COPIED:
            source = os.path.join(ROOT, name)
            if os.path.isdir(source):
                ignore = shutil.ignore_patterns("__pycache__", "results", "mutants")
                shutil.copytree(source, os.path.join(work, name), ignore=ignore)
            elif os.path.exists(source):
                shutil.copy(source, work)
        with open(os.path.join(work, "setup.cfg"), "w", encoding="utf-8") as handle:
            handle.write(setup_cfg(module, tests, doctests))
        # tests/conftest.py: mutmut runs pytest in its own copy of the package and the tests,
        # without the root conftest.py; this one is read before the first test runs
        with open(os.path.join(work, "tests", "conftest.py"), "a", encoding="utf-8") as handle:
            handle.write(FORK_SAFE_TQDM)
        env = environment()
        children = [] if jobs is None else ["--max-children", str(jobs)]
        ran = subprocess.run([mutmut, "run", *children, *(names or [])], cwd=work, env=env,
                             capture_output=True, text=True, check=False)  # fmt: skip
        refuse_unclean(ran.stdout + ran.stderr)
        listed = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, env=env,
                                capture_output=True, text=True, check=True)  # fmt: skip
        statuses = parse_results(listed.stdout)
        if names:
            statuses = {n: statuses.get(n, "not found") for n in names}
        diffs = {}
        for name, status in statuses.items():
            if status == "survived":
                shown = subprocess.run([mutmut, "show", name], cwd=work, env=env,
                                       capture_output=True, text=True, check=False)  # fmt: skip
                diffs[name] = "\n".join(
                    line
                    for line in shown.stdout.splitlines()
                    if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
                )
    return statuses, diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", required=True, help="the module to mutate, e.g. bnn_pyro/x.py")
    parser.add_argument(
        "--tests", nargs="+", required=True, help="the test files (or pytest node ids) to run"
    )
    parser.add_argument("--output", default=REPORT, help="the report to update")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run only the survivors of the report's last run of the module (after writing "
        "their tests; the module itself unchanged) and update its section",
    )
    parser.add_argument(
        "--no-doctests",
        action="store_true",
        help="leave the module's doctests out of every mutant's run (for a module whose "
        "examples are slow, e.g. one that runs NUTS: they would run once per mutant)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="mutants run at a time (default: one per core); 1 leaves the other cores free, "
        "e.g. for a timing run",
    )
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    title = "# Mutation testing\n\nOne section per module, from `benchmarks/mutation.py`.\n"

    def report() -> str:
        return open(args.output, encoding="utf-8").read() if os.path.exists(args.output) else title

    equivalent = equivalent_mutants()
    tests, doctests = list(args.tests), not args.no_doctests
    if args.survivors:
        statuses, before, doctests = earlier(report(), args.module, equivalent)
        tests = [*before, *(t for t in tests if t not in before)]
        names = [
            n
            for n, v in statuses.items()
            if v not in ("killed", "timeout") and not (v == "survived" and n in equivalent)
        ]
        fresh, diffs = run(args.module, tests, names, doctests, args.jobs) if names else ({}, {})
        statuses |= fresh
    else:
        statuses, diffs = run(args.module, tests, doctests=doctests, jobs=args.jobs)
    if not statuses:
        raise SystemExit("mutmut reported no mutants: see its output above")
    # read again: other modules' runs may have written the report (or the equivalent list)
    # while this one ran
    with open(os.path.join(ROOT, args.module), encoding="utf-8") as handle:
        skipped = unmutated(handle.read())
    new = section(args.module, statuses, equivalent_mutants(), diffs, tests, skipped, doctests)
    print(new)
    updated = merge(report(), new)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
