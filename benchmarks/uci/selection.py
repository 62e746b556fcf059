"""Parsing of the benchmark's subset options: ``--splits``, ``--methods``, ``--datasets``."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["parse_names", "parse_splits"]


def _check_text(text: object, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text.strip()


def parse_splits(text: str, n_splits: int | None = None) -> list[int]:
    """Parse a split selection such as ``"0-4"``, ``"0,3"``, ``"0-2,7"`` or ``"all"``.

    Ranges are inclusive; the result is sorted and free of repeats.

    Args:
        text: the selection; ``"all"`` needs ``n_splits``.
        n_splits: the number of splits of the data sets; when given, every split must lie in
            ``[0, n_splits)``.

    Returns:
        The split numbers, ascending.

    Raises:
        TypeError: if ``text`` is not a str or ``n_splits`` not an int.
        ValueError: on an empty or malformed selection, a reversed range, a negative split or a
            split ``>= n_splits``.

    Example:
        >>> parse_splits("0-2,7"), parse_splits("3, 1"), parse_splits("all", n_splits=3)
        ([0, 1, 2, 7], [1, 3], [0, 1, 2])
    """
    text = _check_text(text, "splits")
    if n_splits is not None and (
        isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 1
    ):
        raise TypeError(f"n_splits must be a positive int or None, got {n_splits!r}")
    if text.lower() == "all":
        if n_splits is None:
            raise ValueError("splits='all' needs n_splits (the number of splits in the folder)")
        return list(range(n_splits))
    if not text:
        raise ValueError("splits must not be empty; use e.g. '0-19', '0,3' or 'all'")
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        bounds = part.split("-")
        if len(bounds) > 2 or not all(b.strip().isdigit() for b in bounds):
            raise ValueError(
                f"splits must be non-negative ints or ranges like '0-4', separated by commas; "
                f"could not read {part!r} in {text!r}"
            )
        low, high = int(bounds[0]), int(bounds[-1])
        if low > high:
            raise ValueError(f"splits range {part!r} is reversed; write it as '{high}-{low}'")
        chosen.update(range(low, high + 1))
    if n_splits is not None and max(chosen) >= n_splits:
        raise ValueError(
            f"splits must be < n_splits = {n_splits} (splits run from 0 to {n_splits - 1}), "
            f"got {max(chosen)} in {text!r}"
        )
    return sorted(chosen)


def parse_names(text: str, choices: Sequence[str], what: str = "methods") -> list[str]:
    """Parse a comma-separated selection of names (or ``"all"``) against the allowed ``choices``.

    Args:
        text: e.g. ``"vi,dropout"`` or ``"all"``.
        choices: the allowed names, in the order ``"all"`` returns them.
        what: the option's name, for error messages.

    Returns:
        The chosen names, in the order given, without repeats.

    Raises:
        TypeError: if ``text`` is not a str.
        ValueError: on an empty selection or an unknown name.

    Example:
        >>> parse_names("dropout, vi", ["vi", "dropout", "swag"])
        ['dropout', 'vi']
        >>> parse_names("all", ["vi", "swag"])
        ['vi', 'swag']
    """
    text = _check_text(text, what)
    if text.lower() == "all":
        return list(choices)
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"{what} must name at least one of {list(choices)} (or 'all')")
    unknown = [name for name in names if name not in choices]
    if unknown:
        raise ValueError(f"{what}: unknown name(s) {unknown}; choose from {list(choices)} or 'all'")
    return list(dict.fromkeys(names))
