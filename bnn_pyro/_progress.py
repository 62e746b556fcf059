"""The progress bar: tqdm's notebook widget where ipywidgets is installed, its text bar elsewhere.

``tqdm.auto`` picks the widget in any Jupyter kernel and, without ipywidgets, warns
("IProgress not found") on every bar; this picks the text bar then, quietly.
"""

from __future__ import annotations

import importlib.util

from tqdm.std import tqdm as _text_tqdm

__all__ = ["tqdm"]


def _pick():  # noqa: ANN202 - a tqdm class
    if importlib.util.find_spec("ipywidgets") is None:
        return _text_tqdm
    from tqdm.auto import tqdm as auto_tqdm

    return auto_tqdm


tqdm = _pick()
