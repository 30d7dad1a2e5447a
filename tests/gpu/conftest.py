"""The GPU suite: the library on CUDA, against a float64 reference on the CPU.

Skipped without a CUDA GPU; ``make test-gpu`` runs it. ``MHA_TEST_DEVICE=cpu`` runs the same
tests on the CPU (a smoke test of the suite itself: the checks that need CUDA, host
synchronisations and compiling, are then skipped).
"""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = os.environ.get("MHA_TEST_DEVICE", "cuda")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    usable = DEVICE == "cpu" or torch.cuda.is_available()
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            if not usable:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (make test-gpu)"))


@pytest.fixture(scope="session")
def device() -> torch.device:
    """Where the suite runs, with float32 matmuls in full float32 (TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device(DEVICE)


@pytest.fixture
def cuda_only(device):
    if device.type != "cuda":
        pytest.skip("needs CUDA itself")
