"""MkDocs hook: the executed notebooks ``notebooks/*.ipynb`` as pages, and the benchmark
results the pages show and link to (the files under ``benchmarks/results/``, as written by
the scripts: figures, the full reports, the JSON records; not the blocks' sources, which the
Results page shows).

The notebooks live outside ``docs/``; this hook adds every ``notebooks/*.ipynb`` (a glob, so a
new notebook is picked up, and the jupytext ``.py`` twins are not) to the build and to the
"Notebooks" section of the navigation. mkdocs-jupyter renders them from their committed outputs
(``execute: false``): nothing runs at build time.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
NAV_TITLE = "Notebooks"


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb"))


def on_config(config):
    for i, item in enumerate(config["nav"] or []):
        if isinstance(item, dict) and NAV_TITLE in item:
            config["nav"][i] = {NAV_TITLE: [f"notebooks/{nb.name}" for nb in notebooks()]}
    return config


def _file(path: str, config) -> File:
    return File(
        path,
        src_dir=str(ROOT),
        dest_dir=config["site_dir"],
        use_directory_urls=config["use_directory_urls"],
    )


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns them into notebook pages
def on_files(files, config):
    results = ROOT / "benchmarks" / "results"
    for path in sorted(p for p in results.rglob("*") if p.is_file() and p.suffix != ".jsonl"):
        if path.parent == results and path.suffix == ".md":
            continue  # a results block's source: the Results page shows it, its links resolved
        files.append(_file(path.relative_to(ROOT).as_posix(), config))
    for nb in notebooks():
        files.append(_file(f"notebooks/{nb.name}", config))
    return files
