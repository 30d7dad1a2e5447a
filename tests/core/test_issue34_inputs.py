"""Every dtype and device a reader can pass gets an answer or a ValueError that names it
(found by a fuzz of the public API: float8 inputs, half precision where the Stiefel step
cannot run, unknown device strings, numpy prompts)."""

import numpy as np
import pytest
import torch

from mha_lib import DotProductAttention, MultiHeadAttention, masked_softmax, softmax_over_kept
from mha_lib._checks import check_device
from mha_lib.masks import causal, sliding_window
from mha_lib.variants.column_major import ColumnMajorMultiHeadAttention

FLOAT8 = [getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name)]


@pytest.mark.parametrize("dtype", FLOAT8)
def test_float8_inputs_are_refused_by_name(dtype):
    x = torch.randn(2, 3, 4).to(dtype)
    mha = MultiHeadAttention(4, 4, 4, 4, 2, 0.0).to(dtype)
    calls = {
        "masked_softmax": lambda: masked_softmax(x, torch.tensor([2, 3])),
        "softmax_over_kept": lambda: softmax_over_kept(x, torch.ones(2, 3, 4, dtype=torch.bool)),
        "DotProductAttention": lambda: DotProductAttention(0.0)(x, x, x),
        "MultiHeadAttention": lambda: mha(x, x, x),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="float8 is a storage format"):
            call()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_stiefel_step_refuses_half_precision_and_the_plain_variant_runs_it(dtype):
    z = torch.randn(4, 5)
    with pytest.raises(ValueError, match="stiefel=True needs float32 or float64"):
        ColumnMajorMultiHeadAttention(4, 2, stiefel=True)(z.to(dtype))
    with pytest.raises(ValueError, match="stiefel=True needs float32 or float64"):
        ColumnMajorMultiHeadAttention(4, 2, stiefel=True).to(dtype)(z.to(dtype))
    assert ColumnMajorMultiHeadAttention(4, 2).to(dtype)(z.to(dtype)).dtype == dtype


def test_the_column_major_variant_checks_need_weights():
    with pytest.raises(ValueError, match="need_weights"):
        ColumnMajorMultiHeadAttention(4, 2)(torch.randn(4, 5), need_weights="x")


@pytest.mark.parametrize("device", ["nonsense", "cuda:99", "meta", 3.5])
def test_an_unknown_or_missing_device_is_a_value_error(device):
    with pytest.raises(ValueError, match="device"):
        check_device(device)
    with pytest.raises(ValueError, match="device"):
        causal().dense(1, 3, 3, device=device)
    with pytest.raises(ValueError, match="device"):
        (sliding_window(2) & causal()).tiles(1, 4, 4, 2, device=device)


def test_an_experiment_refuses_an_unknown_device_before_it_trains():
    from mha_lib import digits

    with pytest.raises(ValueError, match="device"):
        digits.train(digits.Config(steps=1, warmup=0), progress=False, device="nonsense")


def test_generate_takes_numpy_and_tensor_prompts():
    from mha_lib.lm import Config, StoryLM

    torch.manual_seed(0)
    lm = StoryLM(Config(d_model=16, num_heads=2, num_kv_heads=1, num_layers=1, d_ff=16)).eval()
    prompt = [5, 6, 7]
    want = lm.generate([prompt, prompt], 3)
    for prompts in ([np.array(prompt), np.array(prompt)], np.array([prompt, prompt]),
                    torch.tensor([prompt, prompt]), [[np.int64(i) for i in prompt]] * 2):
        assert lm.generate(prompts, 3) == want
