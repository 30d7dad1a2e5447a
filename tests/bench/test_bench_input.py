"""Bad input to the benchmarks (mha_lib.bench): sizes torch cannot hold are a ValueError.

Hypothesis draws the sizes of the cheap entry points (no timing) from junk and huge integers:
a size of 2**63 used to reach torch as an overflow TypeError, and ``decoding_flops`` summed
2**63 terms; now every size is checked (an integer in [1, 2**31 - 1]) and the sum is closed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_lib.bench import cost, modern

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                 st.sampled_from([0, -1, 2**31, 2**63, 2**64]), st.floats(allow_nan=True), st.text(max_size=3),
                 st.just([]), st.just([2**63]))
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
TARGETS = {
    "Sizes": (cost.Sizes, dict(B=1, Lq=4, Lk=4, D=8, H=2)),
    "decoding_flops": (modern.decoding_flops, dict(L=4, D=8, cached=True)),
    "step_flops": (modern.step_flops, dict(t=4, D=8, cached=False)),
    "flash_memory_table": (modern.flash_memory_table, dict(lengths=[8], B=1, d=4, block_size=4)),
    "cache_memory_table": (modern.cache_memory_table, dict(lengths=[4], B=1, D=8, H=2, kv_heads=(2,), num_layers=1)),
    "memory_table": (cost.memory_table, dict(lengths=[8], B=1, D=8, H=2)),
    "decoding_contenders": (modern.decoding_contenders, dict(L=4, B=1, D=8, H=2, seed=0)),
}
CASES = [(name, arg) for name, (_, valid) in TARGETS.items() for arg in valid]


@FUZZ
@given(case=st.sampled_from(CASES), junk=JUNK)
def test_junk_in_one_size_is_a_value_error_or_works(case, junk):
    name, arg = case
    fn, valid = TARGETS[name]
    if isinstance(junk, int) and not isinstance(junk, bool) and 64 < junk < 2**31 and arg != "t" \
            and not (name == "decoding_flops"):
        return  # a valid size, but a slow or large run
    try:
        fn(**dict(valid, **{arg: junk}))
    except ValueError as err:
        assert str(err)


@pytest.mark.parametrize("call, match", [
    (lambda: cost.Sizes(1, 2**63, 4, 8, 2), "Lq must be"),
    (lambda: modern.flash_memory_table([8], B=2**63), "B must be"),
    (lambda: modern.cache_memory_table([4], num_layers=2**63), "num_layers must be"),
    (lambda: modern.decoding_contenders(2**63), "L must be"),
    (lambda: cost.memory_table([2**63]), "lengths"),
])
def test_sizes_torch_cannot_hold_are_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_decoding_flops_is_the_sum_of_the_steps_and_instant_for_huge_L():
    for L in (1, 2, 7, 30):
        for cached in (True, False):
            assert modern.decoding_flops(L, 8, cached=cached) == sum(
                modern.step_flops(t, 8, cached=cached) for t in range(L))
    assert modern.decoding_flops(2**62, 8, cached=False) > 0
