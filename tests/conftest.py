"""Fixtures every area of the tests shares.

* ``root``: the repository's root directory.
* ``chapter_path``: a test with this argument runs once per chapter notebook
  (``chapters/*.ipynb``, in file order; the test id is the file name).
* ``generator``: a ``torch.Generator`` seeded with 0, fresh for every test.
* ``mha_factory``: builds small :class:`mha_lib.MultiHeadAttention` modules with seeded
  weights, in eval mode, without touching the global random state.
* ``retraining``: what a run retrained from the seed must show on any machine: bit for bit
  against a second run on this machine; within measured bands of the shipped run.

Test modules never import each other (nor a conftest): what several modules need goes here or
in the conftest.py of their area.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mha_lib import MultiHeadAttention

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_PATHS = sorted((ROOT / "chapters").glob("*.ipynb"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chapter_path" in metafunc.fixturenames:
        metafunc.parametrize("chapter_path", CHAPTER_PATHS, ids=[p.name for p in CHAPTER_PATHS])


@pytest.fixture(scope="session")
def root() -> Path:
    """The repository's root directory (holds chapters/, mha_lib/, _toc.yml, ...)."""
    return ROOT


@pytest.fixture
def generator() -> torch.Generator:
    """A CPU generator seeded with 0: ``torch.randn(..., generator=generator)``."""
    return torch.Generator().manual_seed(0)


@pytest.fixture
def mha_factory():
    """``mha_factory(d_model=8, num_heads=2, sizes=None, bias=False, seed=0, dtype=float32)``.

    Returns an eval-mode MultiHeadAttention with ``sizes = (key_size, query_size, value_size)``
    (default all ``d_model``), no dropout, its weights drawn from ``seed``. The module is built
    positionally (d2l's order), and the global random state is left as it was.
    """

    def make(d_model: int = 8, num_heads: int = 2, sizes: tuple[int, int, int] | None = None,
             bias: bool = False, seed: int = 0,
             dtype: torch.dtype = torch.float32) -> MultiHeadAttention:
        key_size, query_size, value_size = sizes or (d_model, d_model, d_model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            mha = MultiHeadAttention(key_size, query_size, value_size, d_model, num_heads, 0.0,
                                     bias=bias)
        return mha.to(dtype).eval()

    return make


class _Retraining:
    """What a run retrained from the seed must show, on any machine.

    On one machine a run is deterministic: two runs from the seed agree bit for bit. Across
    machines they do not: PyTorch's kernels depend on the instruction set
    (``ATEN_CPU_CAPABILITY``) and its math libraries (MKL, oneDNN) choose kernels by processor
    model, so a rerun leaves the shipped record within a few steps, even at the same
    ``cpu_capability`` (which a checkpoint records as information). It must still reach what
    the shipped run reached: each test gives its bands, measured across kernel settings.
    """

    @staticmethod
    def deterministic(run: torch.Tensor, again: torch.Tensor) -> None:
        """Two runs from the seed on this machine (``again`` may be the shorter): the same
        values, bit for bit."""
        assert again.shape[1:] == run.shape[1:] and len(again) <= len(run)
        assert torch.equal(again, run[:len(again)]), "two runs from the seed differ on this machine"

    @staticmethod
    def near(rerun: float, shipped: float, what: str, *, rtol: float = 0.0, atol: float = 0.0) -> None:
        """``rerun`` within ``atol + rtol * |shipped|`` of what the shipped run reached."""
        rerun, shipped = float(rerun), float(shipped)
        band = atol + rtol * abs(shipped)
        assert abs(rerun - shipped) <= band, (
            f"{what}: {rerun:.6g} against the shipped run's {shipped:.6g}, off by "
            f"{abs(rerun - shipped):.3g} (band {band:.3g})")


@pytest.fixture
def retraining() -> _Retraining:
    """``retraining.deterministic(run, again)`` and ``retraining.near(rerun, shipped, what,
    rtol=, atol=)``: what a retraining run must show on this machine (see :class:`_Retraining`)."""
    return _Retraining()
