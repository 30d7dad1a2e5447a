"""The contract for language models (issue 21): grouped-query attention with RoPE, head masks,
TransformerBlock pass-through, and batched greedy decoding with a KV cache.

Prompts of different lengths are right-padded and decoded as one batch: each example writes
its keys and values at its own positions, and the causal rule (valid length = position + 1)
hides the slots it has not written yet. Greedy decoding with the cache equals decoding without
it, and the batch equals one prompt at a time, token for token.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_lib import MultiHeadAttention
from mha_lib.block import TransformerBlock
from mha_lib.decoding import KVCache
from mha_lib.gqa import GroupedQueryAttention
from mha_lib.heads import merge_heads, split_heads
from mha_lib.masking import causal_valid_lens
from mha_lib.positions import rotary


class TinyLM(nn.Module):
    """Embedding, two pre-LN blocks (grouped-query attention with RoPE), a linear head."""

    def __init__(self, vocab=13, D=16, H=4, num_kv_heads=2, rope=True, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, D)
        self.blocks = nn.ModuleList(
            TransformerBlock(D, H, 32, 0.0, num_kv_heads=num_kv_heads, rope=rope) for _ in range(2)
        )
        self.head = nn.Linear(D, vocab)

    def forward(self, tokens, valid_lens=None, *, cache=None, positions=None):
        x = self.embed(tokens)  # (B, L) -> (B, L, D)
        for i, block in enumerate(self.blocks):
            x = block(x, valid_lens, cache=None if cache is None else cache[i], positions=positions)
        return self.head(x)  # (B, L, vocab)


def _greedy_without_cache(model, prompt, steps):
    tokens = prompt.clone()
    for _ in range(steps):
        L = tokens.shape[0]
        logits = model(tokens[None], causal_valid_lens(1, L))  # the whole prefix, causally
        tokens = torch.cat([tokens, logits[0, -1].argmax()[None]])
    return tokens[prompt.shape[0]:].tolist()


def _greedy_with_cache(model, prompt, steps):
    cache = KVCache(num_layers=2)
    logits = model(prompt[None], cache=cache)  # prefill: causal by default
    out = [int(logits[0, -1].argmax())]
    for _ in range(steps - 1):
        logits = model(torch.tensor([[out[-1]]]), cache=cache)  # positions: right after the cache
        out.append(int(logits[0, -1].argmax()))
    return out


def _greedy_batched(model, prompts, steps, pad=0):
    """All prompts at once: right-padded, each example at its own positions."""
    B, P = len(prompts), max(len(p) for p in prompts)
    lens = torch.tensor([len(p) for p in prompts])  # (B,)
    padded = torch.full((B, P), pad)
    for b, p in enumerate(prompts):
        padded[b, : len(p)] = p
    cache = KVCache(num_layers=2)
    logits = model(padded, lens, cache=cache)  # prefill, padding masked by the valid lengths
    nxt = logits[torch.arange(B), lens - 1].argmax(-1)  # (B,): each prompt's last real position
    out, positions = [nxt], lens[:, None].clone()  # (B, 1): where each example continues
    for _ in range(steps - 1):
        logits = model(nxt[:, None], cache=cache, positions=positions)  # (B, 1, vocab)
        nxt = logits[:, 0].argmax(-1)
        out.append(nxt)
        positions += 1
    return torch.stack(out, dim=1).tolist()  # (B, steps)


@pytest.mark.parametrize("num_kv_heads, rope", [(2, True), (4, True), (1, False)])
def test_greedy_decoding_with_and_without_cache_batched_and_alone(num_kv_heads, rope):
    model = TinyLM(num_kv_heads=num_kv_heads, rope=rope).double().eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 13, (n,), generator=g) for n in (5, 2, 7, 1)]
    steps = 6
    with torch.no_grad():
        alone = [_greedy_without_cache(model, p, steps) for p in prompts]
        cached = [_greedy_with_cache(model, p, steps) for p in prompts]
        batched = _greedy_batched(model, prompts, steps)
    assert cached == alone
    assert batched == alone
    assert len({tuple(t) for t in alone}) > 1  # the prompts lead to different continuations


def test_batched_prefill_logits_equal_each_prompt_alone():
    model = TinyLM().double().eval()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, 13, (n,), generator=g) for n in (4, 6, 1)]
    padded = torch.zeros(3, 6, dtype=torch.long)
    for b, p in enumerate(prompts):
        padded[b, : len(p)] = p
    lens = torch.tensor([4, 6, 1])
    with torch.no_grad():
        batched = model(padded, lens, cache=KVCache(2))
        for b, p in enumerate(prompts):
            torch.testing.assert_close(batched[b, : len(p)], model(p[None], cache=KVCache(2))[0])


def _rope_reference(gqa, x, positions):
    """Projections, RoPE and F.scaled_dot_product_attention(is_causal, enable_gqa), by hand."""
    q = rotary(split_heads(gqa.W_q(x), gqa.num_heads), positions)  # (B, H, L, d)
    k = rotary(split_heads(gqa.W_k(x), gqa.num_kv_heads), positions)  # (B, Hkv, L, d)
    v = split_heads(gqa.W_v(x), gqa.num_kv_heads)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return gqa.W_o(merge_heads(out))  # (B, H, L, d) -> (B, L, D)


def test_gqa_rope_equals_the_reference_and_decodes_step_by_step():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 2, 0.0, bias=True, rope=True).eval()
    x = torch.randn(2, 7, 16)
    want = _rope_reference(gqa, x, torch.arange(7))
    full = gqa(x, x, x, causal_valid_lens(2, 7))
    torch.testing.assert_close(full, want, atol=1e-5, rtol=1e-5)
    # positions are explicit too: the same numbers with positions (L,) or (B, L)
    torch.testing.assert_close(gqa(x, x, x, causal_valid_lens(2, 7), positions=torch.arange(7)), full)
    shifted = gqa(x, x, x, causal_valid_lens(2, 7), positions=torch.arange(7).expand(2, 7) + 5)
    torch.testing.assert_close(shifted, full, atol=1e-5, rtol=1e-5)  # RoPE sees only differences
    cache = KVCache()
    with torch.no_grad():
        steps = [gqa(x[:, :3], x[:, :3], x[:, :3], cache=cache)]
        steps += [gqa(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_gqa_head_mask_gates_query_heads_like_mha():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 4, 0.0, bias=True).eval()
    mha = MultiHeadAttention(16, 16, 16, 16, 4, 0.0, bias=True).eval()
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 5, 16)
    for gates in (torch.tensor([1.0, 0.0, 0.5, 1.0]), torch.tensor([[1.0, 1, 1, 1], [0, 1, 0, 1]])):
        for need_weights in (False, True):
            got = gqa(x, x, x, [5, 3], head_mask=gates, need_weights=need_weights)
            want = mha(x, x, x, [5, 3], head_mask=gates, need_weights=need_weights)
            for a, b in zip(*(t if need_weights else (t,) for t in (got, want))):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_valid_lens_with_a_cache_count_from_the_first_cached_position():
    """Prefill of padded prompts: each real query sees the same keys as its prompt alone."""
    torch.manual_seed(0)
    for layer in (MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval(), GroupedQueryAttention(8, 2, 1, 0.0).eval()):
        x = torch.randn(2, 5, 8)
        lens = torch.tensor([3, 5])
        with torch.no_grad():
            out = layer(x, x, x, lens, cache=KVCache())
            alone = layer(x[:1, :3], x[:1, :3], x[:1, :3], cache=KVCache())
            # per-query lengths are the minimum with the causal rule
            per_query = layer(x, x, x, torch.tensor([[5, 5, 2, 2, 2], [1] * 5]), cache=KVCache())
        torch.testing.assert_close(out[:1, :3], alone)
        torch.testing.assert_close(per_query[1], layer(x[1:, :1], x[1:, :1], x[1:, :1])[0].expand(5, 8))
        torch.testing.assert_close(per_query[0, :2], out[0, :2])


def test_need_weights_with_a_cache():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 8, 8, 2, 0.0).eval()
    x = torch.randn(1, 4, 8)
    full, full_w = mha(x, x, x, causal_valid_lens(1, 4), need_weights=True)
    cache = KVCache()
    mha(x[:, :3], x[:, :3], x[:, :3], cache=cache)
    out, w = mha(x[:, 3:], x[:, 3:], x[:, 3:], cache=cache, need_weights=True)
    assert w.shape == (1, 2, 1, 4)
    torch.testing.assert_close(out, full[:, 3:], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w, full_w[:, :, 3:], atol=1e-6, rtol=1e-5)


def test_transformer_block_passes_everything_through():
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, 0.0, num_kv_heads=2, rope=True).eval()
    assert isinstance(block.attention, GroupedQueryAttention) and block.attention.rope
    assert isinstance(TransformerBlock(16, 4, 32, 0.0).attention, MultiHeadAttention)
    x = torch.randn(2, 6, 16)
    causal = causal_valid_lens(2, 6)
    out, weights = block(x, causal, need_weights=True)
    assert weights.shape == (2, 4, 6, 6) and (weights.triu(1) == 0).all()
    torch.testing.assert_close(out, block(x, causal))
    gated = block(x, causal, head_mask=torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert not torch.allclose(gated, out)
    cache = KVCache()
    with torch.no_grad():
        steps = [block(x[:, t : t + 1], cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), out, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="num_kv_heads"):
        TransformerBlock(16, 4, 32, 0.0, num_kv_heads=3)
    with pytest.raises(ValueError, match="rope must be True or False"):
        TransformerBlock(16, 4, 32, 0.0, rope="yes")
