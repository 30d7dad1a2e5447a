"""The student edition: the chapters' nbgrader release versions, gathered in one folder.

Usage::

    python -m mha_lib.book.student chapters student     # or: make student

A thin wrapper over :mod:`mha_lib.book.assignments`: it builds the course in a temporary folder
with ``nbgrader generate_assignment`` and copies each released notebook to
``student/<chapter>.ipynb``. In them every solution body is ``# YOUR CODE HERE`` /
``raise NotImplementedError()`` (the ``def`` lines stay), the solutions' prose
is gone, written answers say ``YOUR ANSWER HERE``, and the checker cells stay. For a class,
use the course folder itself (``make assignments``, see teaching.md).

The output folder may not be, contain or lie inside the chapters' folder.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from mha_lib.book.assignments import OverlapError, build as build_course, refuse_overlap

__all__ = ["build", "main"]


def build(source_dir: Path, out_dir: Path) -> list[Path]:
    """Write the student edition of every chapter with exercises of ``source_dir`` into
    ``out_dir``; return the written notebooks."""
    refuse_overlap(out_dir, source_dir, what="out")
    out_dir = Path(out_dir)
    written = []
    with tempfile.TemporaryDirectory(prefix="mha-course-") as course:
        for released in build_course(Path(source_dir), Path(course)):
            out_dir.mkdir(parents=True, exist_ok=True)
            target = out_dir / released.name
            shutil.copyfile(released, target)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder of the chapters (chapters)")
    parser.add_argument("out", type=Path, help="folder to write the student edition to (student)")
    args = parser.parse_args(argv)
    try:
        written = build(args.source, args.out)
    except OverlapError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for target in written:
        print(target)
    print(f"{len(written)} notebooks written to {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
