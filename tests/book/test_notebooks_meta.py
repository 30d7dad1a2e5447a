"""Every chapter opens in Jupyter with the python3 kernel, without asking and without changes."""

from __future__ import annotations

import nbformat

from mha_lib.book import notebooks

def test_chapter_carries_the_python3_kernelspec(chapter_path):
    metadata = nbformat.read(chapter_path, as_version=4).metadata
    assert metadata.get("kernelspec") == notebooks.KERNELSPEC, (
        f"{chapter_path.name}: run 'python -m mha_lib.book.notebooks --metadata-only {chapter_path}'"
    )
    info = metadata.get("language_info", {})
    assert {k: v for k, v in info.items() if k != "version"} == {
        k: v for k, v in notebooks.language_info().items() if k != "version"
    }


def test_clean_sets_kernel_metadata_as_jupyterlab_stores_it():
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "other", "display_name": "X"}})
    notebooks.clean(nb)
    assert nb.metadata.kernelspec == {"display_name": "Python 3 (ipykernel)",
                                      "language": "python", "name": "python3"}
    assert nb.metadata.language_info["name"] == "python"
    assert nb.metadata.language_info["codemirror_mode"] == {"name": "ipython", "version": 3}


def test_metadata_only_touches_nothing_else(tmp_path):
    cell = nbformat.v4.new_code_cell("1 + 1", execution_count=3, outputs=[
        nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=3)])
    path = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    assert notebooks.main(["--metadata-only", str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.kernelspec == notebooks.KERNELSPEC
    assert nb.cells[0].outputs[0].data["text/plain"] == "2"
