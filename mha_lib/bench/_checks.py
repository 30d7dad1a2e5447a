"""Argument checks shared by the benchmarks and their figures (each raises a ValueError naming
the argument, what was expected and what came)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from mha_lib._checks import check_positive_int, check_sequence, check_size
from mha_lib.timing import Ratio

#: A check of one value: ``check(value, name)`` raises a ValueError naming ``name``.
Check = Callable[[object, str], object]


_MAX_SIZE = 2**31 - 1
"""The largest size a benchmark takes (a torch size must fit in 64 bits; products of sizes too)."""


def check_bench_size(value: object, name: str) -> int:
    """An integer in [1, 2**31 - 1]: a size torch can allocate a tensor of (memory permitting)."""
    if check_positive_int(value, name) > _MAX_SIZE:
        raise ValueError(f"{name} must be an integer in [1, 2**31 - 1], got {value!r}")
    return int(value)


def check_BDH(B: object, D: object, H: object) -> None:
    """B, D and H integers in [1, 2**31 - 1], with H dividing D."""
    for value, name in ((B, "B"), (D, "D"), (H, "H")):
        check_bench_size(value, name)
    if D % H:
        raise ValueError(f"D ({D}) must be divisible by H ({H})")


def check_lengths(lengths: object, name: str = "lengths") -> list[int]:
    """A non-empty sequence of integers in [1, 2**31 - 1]."""
    return [int(L) for L in check_sequence(lengths, name, "integers in [1, 2**31 - 1]", check_bench_size)]


def check_float_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """A floating-point ``torch.dtype``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


def check_instance(kind: type, what: str) -> Check:
    """A check that a value is a ``kind`` (``what`` says how to get one)."""

    def check(value: object, name: str) -> object:
        if not isinstance(value, kind):
            raise ValueError(f"{name} must be a {what}, got {type(value).__name__}")
        return value

    return check


check_ratio = check_instance(Ratio, "mha_lib.timing.Ratio")


def mapping_of(check: Check, *required: str) -> Check:
    """A check of a non-empty mapping whose values pass ``check`` and that has ``required`` keys."""

    def check_mapping(value: object, name: str) -> object:
        if not isinstance(value, Mapping) or not value:
            raise ValueError(f"{name} must be a non-empty mapping, got {value!r}")
        missing = [key for key in required if key not in value]
        if missing:
            raise ValueError(f"{name} must have the keys {list(required)}, it lacks {missing}")
        for key, entry in value.items():
            check(entry, f"{name}[{key!r}]")
        return value

    return check_mapping


def check_table(rows: object, columns: Mapping[str, Check], source: str) -> list[Mapping]:
    """A non-empty sequence of dicts with the keys of ``columns``, each value passing its check.

    ``source`` names the function whose rows these are, for the message.
    """

    def check_row(row: object, name: str) -> None:
        if not isinstance(row, Mapping):
            raise ValueError(f"{name} must be a dict (see {source}), got {type(row).__name__}")
        missing = [key for key in columns if key not in row]
        if missing:
            raise ValueError(
                f"{name} must have the keys {list(columns)} (see {source}), it lacks {missing}"
            )
        for key, check in columns.items():
            check(row[key], f"{name}[{key!r}]")

    return check_sequence(rows, "rows", f"rows of {source}", check_row)


def check_memory_rows(rows: object) -> list[Mapping]:
    """Rows of :func:`mha_lib.bench.cost.memory_table`."""
    columns = {"L": check_positive_int, "weights_bytes": check_size, "peak_weights": check_size,
               "peak_fast": check_size}
    return check_table(rows, columns, "memory_table")


def check_peak_rows(rows: object, *required: str) -> list[Mapping]:
    """Rows of :func:`mha_lib.bench.modern.flash_memory_table` (``required`` contenders)."""
    columns = {"L": check_positive_int, "peak": mapping_of(check_size, *required)}
    rows = check_table(rows, columns, "flash_memory_table")
    names = list(rows[0]["peak"])
    for i, row in enumerate(rows):
        if list(row["peak"]) != names:
            raise ValueError(
                f"rows[{i}]['peak'] must have the contenders of rows[0] {names}, "
                f"got {list(row['peak'])}"
            )
    return rows
