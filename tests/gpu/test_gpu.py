"""The library on a GPU: every path and mask kind equal to the CPU's float64 answer, half
precision no worse than PyTorch's own attention, the backward, the caches, generation,
``torch.compile`` and the host synchronisations of a forward (see conftest.py)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

from mha_lib import DotProductAttention, MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.flash import tiled_attention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.latent import LatentAttention
from mha_lib.masks import causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.attend import attend_heads

B, L, D, H = 2, 24, 32, 4
DOC_IDS = torch.tensor([[0] * 10 + [1] * 14, [0] * 5 + [1] * 9 + [2] * 10])
#: Each mask kind, with its data on ``device``.
MASKS = {
    "none": lambda device: None,
    "causal": lambda device: causal(),
    "sliding_window": lambda device: sliding_window(5),
    "window_or_sinks": lambda device: sliding_window(5) | sinks(2),
    "causal_and_document": lambda device: causal() & document(DOC_IDS.to(device)),
    "prefix_lm": lambda device: prefix_lm(7),
    "chunked": lambda device: chunked(8),
    "padding": lambda device: padding(torch.tensor([17, 24], device=device)),
}
LAYERS = {
    "mha": lambda: MultiHeadAttention(D, D, D, D, H, 0.0, bias=True),
    "gqa": lambda: GroupedQueryAttention(D, H, 2, 0.0, rope=True),
    "block": lambda: TransformerBlock(D, H, 2 * D, 0.0, norm_first=True, num_kv_heads=2, rope=True),
    "gated_gqa": lambda: GroupedQueryAttention(D, H, 2, 0.0, rope=True, gate="element"),
    "mla": lambda: LatentAttention(D, D, D, D, H, 0.0, True, rank=8, rope=True),
}


def _layer(name):
    torch.manual_seed(0)
    return LAYERS[name]().eval()


def _x(dtype=torch.float64, n=L):
    return torch.randn(B, n, D, generator=torch.Generator().manual_seed(1), dtype=dtype)


def _call(layer, x, mask, need_weights=False):
    if isinstance(layer, TransformerBlock):
        return layer(x, mask=mask, need_weights=need_weights)
    return layer(x, x, x, mask=mask, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("layer_name", list(LAYERS))
def test_every_path_and_mask_equals_the_cpu_float64_answer(device, layer_name, mask_name, need_weights):
    layer, x = _layer(layer_name), _x()
    with torch.no_grad():
        want = _call(layer.double(), x, MASKS[mask_name]("cpu"), need_weights)
        got = _call(copy.deepcopy(layer).float().to(device), x.float().to(device),
                    MASKS[mask_name](device), need_weights)
    for g, w in zip(*((got, want) if need_weights else ((got,), (want,)))):
        assert g.device.type == device.type
        torch.testing.assert_close(g.cpu().double(), w, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("mask_name", list(MASKS))
def test_attention_functions_equal_the_cpu_float64_answer(device, mask_name):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, L, 8, generator=g, dtype=torch.float64) for _ in range(3))
    for fn in (DotProductAttention(0.0), lambda q, k, v, mask: tiled_attention(q, k, v, mask=mask, block_size=8)):
        want = fn(q, k, v, mask=MASKS[mask_name]("cpu"))
        got = fn(*(t.float().to(device) for t in (q, k, v)), mask=MASKS[mask_name](device))
        torch.testing.assert_close(got.cpu().double(), want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask_name", ["none", "causal", "sliding_window", "padding"])
def test_half_precision_is_no_worse_than_pytorch_attention(device, dtype, mask_name):
    """The heads' attention in bf16/fp16: its error against float64 is at most that of
    ``F.scaled_dot_product_attention`` on the same inputs (with some slack for rounding)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, L, 16, generator=g, dtype=torch.float64) for _ in range(3))
    mask = MASKS[mask_name]("cpu")
    keep = None if mask is None else mask.dense(B, L, L)[:, None]  # (B, 1, L, L)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    low = [t.to(device, dtype) for t in (q, k, v)]
    ours, _ = attend_heads(*low, MASKS[mask_name](device), DotProductAttention(0.0))
    theirs = F.scaled_dot_product_attention(*low, attn_mask=None if keep is None else keep.to(device))
    err = {name: (out.cpu().double() - want).abs().max().item() for name, out in (("ours", ours), ("sdpa", theirs))}
    assert err["ours"] <= 1.5 * err["sdpa"] + 2 * torch.finfo(dtype).eps, err


@pytest.mark.parametrize("mask_name", ["none", "causal", "causal_and_document", "padding"])
def test_the_backward_equals_the_cpu_float64_gradients(device, mask_name):
    grads = []  # [float64 on the CPU, float32 on the device]
    for where, dtype in (("cpu", torch.float64), (device, torch.float32)):
        layer = _layer("mha").to(where, dtype)
        x = _x().to(where, dtype).requires_grad_()
        _call(layer, x, MASKS[mask_name](where)).square().sum().backward()
        grads.append([x.grad] + [p.grad for p in layer.parameters()])
    for w, g in zip(*grads):
        torch.testing.assert_close(g.cpu().double(), w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("layer_name", ["mha", "gqa"])
def test_decoding_with_a_cache_equals_full_recompute(device, layer_name, window):
    layer, x = _layer(layer_name).to(device), _x(torch.float32).to(device)
    mask = causal() if window is None else sliding_window(window)
    with torch.no_grad():
        full = layer(x, x, x, mask=mask)
        cache = KVCache(1, window=window)
        steps = [layer(x[:, :5], x[:, :5], x[:, :5], cache=cache[0])]  # the prompt, then a token at a time
        for t in range(5, L):
            steps.append(layer(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache[0]))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_generate_gives_the_cpu_greedy_tokens(device):
    from mha_lib.lm import load_pretrained
    from mha_lib.stories import Tokenizer

    model, tokenizer = load_pretrained()
    prompts = [tokenizer.encode(text) for text in ("Mia has a red kite.", "Tom went to the park with")]
    want = model.generate(prompts, 12)
    model.to(device)
    for use_cache in (True, False):
        assert model.generate(prompts, 12, use_cache=use_cache) == want


@pytest.mark.parametrize("mask_name", ["none", "causal", "sliding_window", "window_or_sinks", "chunked"])
def test_compiled_with_fullgraph_equals_eager(device, cuda_only, mask_name):
    layer, x = _layer("mha").to(device), _x(torch.float32).to(device)
    mask = MASKS[mask_name](device)
    compiled = torch.compile(layer, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, x, x, mask=mask), layer(x, x, x, mask=mask), atol=1e-5, rtol=1e-5)


def _syncs(fn) -> int:
    """Host synchronisations during fn, as CUDA's sync debug mode reports them."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@pytest.mark.parametrize("mask_name", ["none", "causal", "sliding_window", "window_or_sinks", "prefix_lm", "chunked"])
@pytest.mark.parametrize("layer_name", ["mha", "gqa"])
def test_a_forward_does_not_wait_for_the_gpu(device, cuda_only, layer_name, mask_name):
    layer, x = _layer(layer_name).to(device), _x(torch.float32).to(device)
    mask = MASKS[mask_name](device)
    with torch.no_grad():
        _call(layer, x, mask)  # warm-up
        assert _syncs(lambda: _call(layer, x, mask)) == 0
        assert _syncs(lambda: layer(x, x, x, torch.tensor([17, 24], device=device))) <= 1
