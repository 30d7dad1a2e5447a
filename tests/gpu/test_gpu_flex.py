"""The FlexAttention route (``backend="flex"``) on CUDA: the default paths' numbers for every mask
kind and modification, the forward in float64 (against the CPU's float64 answer) and in float32,
the backward too (the CPU kernel computes inference only; CUDA's computes gradients)."""

from __future__ import annotations

import pytest
import torch

from mha_lib import MultiHeadAttention
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.masks import causal, chunked, document, padding, prefix_lm, sinks, sliding_window
from mha_lib.scores import alibi, softcap, temperature

B, L, D, H = 2, 40, 32, 4
DOC_IDS = torch.tensor([[0] * 10 + [1] * 30, [0] * 5 + [1] * 15 + [2] * 20])
MASKS = {
    "none": lambda device: None,
    "causal": lambda device: causal(),
    "window_or_sinks": lambda device: sliding_window(5) | sinks(2),
    "causal_and_document": lambda device: causal() & document(DOC_IDS.to(device)),
    "prefix_lm": lambda device: prefix_lm(torch.tensor([7, 0], device=device)),
    "chunked": lambda device: chunked(8),
    "padding": lambda device: padding(torch.tensor([0, 24], device=device)),
}
OPTIONS = {
    "plain": {},
    "alibi": {"score_mod": alibi(H)},
    "softcap": {"score_mod": softcap(2.0)},
    "temperature_and_sinks": {"score_mod": temperature(4.0, 0.5), "sink_logits": True},
}


def _pair(kind, options, device, dtype):
    layers = []
    for backend in ("auto", "flex"):
        torch.manual_seed(0)
        layer = (MultiHeadAttention(D, D, D, D, H, 0.0, bias=True, backend=backend, **options)
                 if kind == "mha" else GroupedQueryAttention(D, H, 2, 0.0, rope=True, backend=backend, **options))
        if layer.sink_logits is not None:
            with torch.no_grad():
                layer.sink_logits.copy_(torch.linspace(-1, 1, H))
        layers.append(layer.to(device=device, dtype=dtype).eval())
    return layers


def _x(device, dtype):
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device, dtype) * 3


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_flex_equals_the_default_path(device, cuda_only, kind, mask_name, options, dtype):
    ref, flex = _pair(kind, OPTIONS[options], device, dtype)
    mask, x = MASKS[mask_name](device), _x(device, dtype)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    with torch.no_grad():
        got = flex(x, x, x, mask=mask)
        torch.testing.assert_close(got, ref(x, x, x, mask=mask), atol=tol, rtol=tol)
        if dtype == torch.float64:  # and the CPU's float64 answer
            cpu_ref, _ = _pair(kind, OPTIONS[options], "cpu", dtype)
            cpu_mask = MASKS[mask_name]("cpu")
            torch.testing.assert_close(got.cpu(), cpu_ref(x.cpu(), x.cpu(), x.cpu(), mask=cpu_mask),
                                       atol=tol, rtol=tol)


@pytest.mark.parametrize("mask_name", ["causal", "causal_and_document", "padding"])
def test_flex_backward_equals_the_default_path(device, cuda_only, mask_name):
    ref, flex = _pair("mha", OPTIONS["alibi"], device, torch.float64)
    mask = MASKS[mask_name](device)
    grads = []
    for layer in (ref, flex):
        x = _x(device, torch.float64).requires_grad_()
        layer(x, x, x, mask=mask).square().sum().backward()
        grads.append((x.grad, layer.W_q.weight.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)
