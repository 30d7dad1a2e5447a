"""Right and wrong answers to the checked exercises, shared by the grading tests.

``WRONG[checker]`` is the source of an answer with one classic mistake, as a student would write
it, with ``{name}`` for the name the chapter's checker cell checks; ``MISTAKE[checker]`` is the
key of that mistake in :data:`mha_lib.exercises.MISTAKES` (the family that loses its point).
"""

from __future__ import annotations

WRONG = {
    "check_masked_softmax": '''\
import torch
from mha_lib import keep_mask_from_valid_lens


def {name}(X, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(X, dim=-2)
    keep = keep_mask_from_valid_lens(valid_lens, X.shape[1], X.shape[2])  # (B, Lq, Lk)
    return torch.softmax(torch.where(keep, X, torch.finfo(X.dtype).min), dim=-2) * keep
''',
    "check_dot_product_attention": '''\
from mha_lib import masked_softmax


def {name}(queries, keys, values, valid_lens=None):
    return masked_softmax(queries @ keys.transpose(1, 2), valid_lens) @ values
''',
    "check_num_parameters": '''\
def {name}(query_size, key_size, value_size, num_hiddens, num_heads, bias):
    D = num_hiddens
    return (query_size + key_size + value_size) * D + (3 * D if bias else 0)
''',
    "check_transpose_qkv": '''\
def {name}(X, num_heads):
    B, L, D = X.shape
    X = X.reshape(B, L, num_heads, D // num_heads)  # (B, L, H, d)
    return X.permute(2, 0, 1, 3).reshape(num_heads * B, L, D // num_heads)  # (H*B, L, d)
''',
    "check_transpose_output": '''\
def {name}(X, num_heads):
    HB, L, d = X.shape
    X = X.reshape(num_heads, HB // num_heads, L, d).permute(1, 2, 0, 3)  # (B, L, H, d)
    return X.reshape(HB // num_heads, L, num_heads * d)
''',
    "check_multihead_attention": '''\
from torch import nn
from mha_lib import DotProductAttention, transpose_output, transpose_qkv


class {name}(nn.Module):
    def __init__(self, key_size, query_size, value_size, num_hiddens, num_heads, dropout,
                 bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens=None):
        H = self.num_heads
        q = transpose_qkv(self.W_q(queries), H)
        k = transpose_qkv(self.W_k(keys), H)
        v = transpose_qkv(self.W_v(values), H)
        if valid_lens is not None:
            valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))  # the mistake
        return self.W_o(transpose_output(self.attention(q, k, v, valid_lens), H))
''',
}

MISTAKE = {
    "check_masked_softmax": ("axis", "queries"),
    "check_dot_product_attention": ("scale", "none"),
    "check_num_parameters": ("params", "no_W_o"),
    "check_transpose_qkv": ("fold", "head_major"),
    "check_transpose_output": ("fold", "head_major"),
    "check_multihead_attention": ("lens", "repeat"),
}


def wrong_answer(checker: str, name: str):
    """The object ``name`` defined by ``WRONG[checker]``."""
    namespace: dict = {}
    exec(WRONG[checker].format(name=name), namespace)
    return namespace[name]
