"""Execute chapters and keep only the small text outputs that nbval should compare.

Usage::

    python -m mha_lib.book.notebooks chapters/03_implementation.ipynb ...   # run and clean
    python -m mha_lib.book.notebooks --check chapters/*.ipynb               # only check
    python -m mha_lib.book.notebooks --metadata-only chapters/*.ipynb       # kernelspec only

A cell keeps its outputs when every output is a stream or plain text, the cell is not tagged
``remove-output`` and has no ``NBVAL_IGNORE_OUTPUT`` marker, and the text is short. Any other
cell (a plotly figure, a widget, a timing) is stored unexecuted (``execution_count: null``),
which nbval reads as "run it, but do not compare its outputs". The website build executes
every notebook afresh, so nothing is lost there.

Every notebook gets the Python 3 kernelspec and the ``language_info`` that JupyterLab's
python3 kernel reports, exactly as JupyterLab stores them, so that Jupyter neither asks which
kernel to use nor marks a freshly opened notebook as modified.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

__all__ = ["main"]

MAX_TEXT_CHARS = 3000
MAX_NOTEBOOK_BYTES = 200_000
TEXT_DATA = {"text/plain"}
# What JupyterLab 4.6 stores once ipykernel's python3 kernel has started (checked by saving a
# notebook there): anything else, even display_name "Python 3", marks the notebook modified.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict:
    """The ``language_info`` an ipykernel running this Python reports (and JupyterLab stores)."""
    return {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": platform.python_version(),
    }


def _text_only(output: dict) -> bool:
    if output["output_type"] == "stream":
        return True
    if output["output_type"] in ("execute_result", "display_data"):
        return set(output.get("data", {})) <= TEXT_DATA
    return False  # errors never belong in a committed notebook


def _output_chars(output: dict) -> int:
    if output["output_type"] == "stream":
        text = output.get("text", "")
    else:
        text = output.get("data", {}).get("text/plain", "")
    return len("".join(text) if isinstance(text, list) else text)


def keeps_outputs(cell) -> bool:
    """Whether a code cell's outputs are small text worth storing and comparing."""
    tags = cell.get("metadata", {}).get("tags", [])
    source = cell.get("source", "")
    if "remove-output" in tags or "NBVAL_IGNORE_OUTPUT" in source or "nbval-ignore-output" in tags:
        return False
    outputs = cell.get("outputs", [])
    return all(_text_only(o) for o in outputs) and sum(map(_output_chars, outputs)) <= MAX_TEXT_CHARS


def set_kernel_metadata(nb) -> None:
    """Give a notebook the python3 kernelspec and this Python's ``language_info``, in place."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = language_info()


def clean(nb) -> None:
    """Strip bulky outputs and volatile metadata from a notebook, in place; set the kernel."""
    nb.metadata.pop("widgets", None)
    set_kernel_metadata(nb)
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
        if cell.cell_type != "code":
            continue
        if not keeps_outputs(cell):
            cell.outputs = []
            cell.execution_count = None


def problems(path: Path) -> list[str]:
    """What is wrong with a committed notebook (empty when it is clean)."""
    import nbformat

    found = []
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        found.append(f"{path} is {size} bytes (limit {MAX_NOTEBOOK_BYTES})")
    nb = nbformat.read(path, as_version=4)
    if "widgets" in nb.metadata:
        found.append(f"{path} stores widget state")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.outputs and not keeps_outputs(cell):
            found.append(f"{path} cell {i} stores outputs that are not small text")
    return found


def run(path: Path, timeout: int = 600) -> None:
    """Execute a notebook top to bottom in a fresh kernel (in its folder), clean it, save it."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    clean(nb)
    nbformat.write(nb, path)
    print(f"{path}: executed and cleaned, {path.stat().st_size} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only report problems")
    parser.add_argument("--metadata-only", action="store_true",
                        help="only set the kernelspec and language_info (no execution)")
    args = parser.parse_args(argv)
    if args.metadata_only:
        import nbformat

        for path in args.notebooks:
            nb = nbformat.read(path, as_version=4)
            set_kernel_metadata(nb)
            nbformat.write(nb, path)
        print(f"{len(args.notebooks)} notebooks carry the python3 kernelspec")
        return 0
    if args.check:
        found = [p for path in args.notebooks for p in problems(path)]
        print("\n".join(found) or f"{len(args.notebooks)} notebooks are clean")
        return 1 if found else 0
    for path in args.notebooks:
        run(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
