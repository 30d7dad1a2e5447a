"""The why experiments run on one thread, as `python -m mha_lib.why` runs them.

Every test here is marked ``training``: the experiments retrain at reduced steps, and the
portability pass (``make unit-portable``) skips them. Their claims stand on the eight shipped
seeds, counted as such; a ninth draw of floats in CI adds a long run, not a check.
"""

from pathlib import Path

import pytest
import torch

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.training)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
