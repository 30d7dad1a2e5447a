"""Fixtures of the benchmark tests: a fake clock, so that no test depends on wall-clock time."""

import pytest


class FakeClock:
    """A clock that only moves when told to: ``advance(seconds)``, or ``step`` per reading."""

    def __init__(self, step: float = 0.0):
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def make_clock():
    """``make_clock(step=0.0)``: a new :class:`FakeClock`."""
    return FakeClock


@pytest.fixture
def costly():
    """``costly(clock, log, {name: seconds})``: functions that advance ``clock`` by their cost
    and append their name to ``log`` when called."""

    def build(clock, log, costs):
        def make(name, cost):
            def fn():
                log.append(name)
                clock.advance(cost)

            return fn

        return {name: make(name, cost) for name, cost in costs.items()}

    return build
