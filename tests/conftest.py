"""Fixtures every area of the tests shares.

* ``root``: the repository's root directory.
* ``chapter_path``: a test with this argument runs once per chapter notebook
  (``chapters/*.ipynb``, in file order; the test id is the file name).
* ``generator``: a ``torch.Generator`` seeded with 0, fresh for every test.
* ``mha_factory``: builds small :class:`mha_lib.MultiHeadAttention` modules with seeded
  weights, in eval mode, without touching the global random state.
* ``rerun_check``: compares a retraining run with a shipped one: bit for bit where the
  machine runs the kernels that made it, closely elsewhere.

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


class _RerunCheck:
    """How a retraining run must match a shipped checkpoint's training record.

    Float results depend on the CPU kernels PyTorch picks (``ATEN_CPU_CAPABILITY``: AVX512,
    AVX2, ...) and on its version. With the ones that made the shipped file (its record's
    ``cpu_capability`` and ``torch_version``) a rerun is the same bit for bit; with others it
    starts out equal to rounding and drifts slowly.
    """

    def __init__(self, record: dict):
        self.exact = (record.get("torch_version") == str(torch.__version__)
                      and record.get("cpu_capability") == torch.backends.cpu.get_cpu_capability())

    def losses(self, rerun: torch.Tensor, shipped: torch.Tensor) -> None:
        """The training losses, step by step: equal, or the first 10 steps to 1e-4 and the
        rest to 2% (relative)."""
        assert rerun.shape == shipped.shape
        if self.exact:
            assert torch.equal(rerun, shipped)
        else:
            torch.testing.assert_close(rerun[:10], shipped[:10], rtol=1e-4, atol=0)
            torch.testing.assert_close(rerun, shipped, rtol=2e-2, atol=0)

    def same(self, rerun, shipped) -> None:
        """Anything else (weights, metrics): equal with the shipped kernels; elsewhere not
        compared (the losses, and each test's own bounds, carry the claim)."""
        if self.exact:
            if isinstance(rerun, torch.Tensor):
                assert torch.equal(rerun, shipped)
            else:
                assert rerun == shipped


@pytest.fixture
def rerun_check():
    """``rerun_check(record)``, with ``record`` a shipped checkpoint's ``extra``: an object
    whose ``.losses(rerun, shipped)`` and ``.same(rerun, shipped)`` assert what a retraining
    run must reproduce on this machine (bit for bit only on the kernels that made the file)."""
    return _RerunCheck
