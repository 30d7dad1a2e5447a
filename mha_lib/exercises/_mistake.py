"""A classic mistake as the catalogue (:mod:`mha_lib.exercises.catalogue`) names it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class _Mistake:
    """A classic mistake: its name in plain words and how to find it in one's own code.

    ``convention`` marks a choice that is not wrong in itself but differs from the book's
    specification (d2l.ai's uniform rows for valid length 0); the checker says so.
    """

    title: str
    hint: str
    convention: bool = False
