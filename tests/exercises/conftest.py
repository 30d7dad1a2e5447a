"""Fixtures of the exercise tests: wrong answers to the checked exercises, a demo chapter.

* ``wrong_answer``: a test with this argument runs once per checker with a wrong answer below; it gets
  a :class:`WrongAnswer`: ``source`` is an answer with one classic mistake, as a student would
  write it, with ``{name}`` for the name the chapter's checker cell checks; ``mistake`` is the
  key of that mistake in :data:`mha_lib.exercises.MISTAKES` (the family that loses its point).
* ``wrong_answers``: all of them, ``{checker: WrongAnswer}``.
* ``verdict``: ``verdict(checker, candidate)`` is ``(ok, printed, report)``: whether the checker
  passes ``candidate``, what it printed, and the grading's report of it.
* ``named_mistakes``: ``named_mistakes(checker, candidate, mistakes)`` asserts that the checker
  fails ``candidate``, names each of ``mistakes`` (keys of ``MISTAKES``) with its hint and no
  other, and takes one point per family they belong to.
* ``demo_chapter``: a small chapter notebook with three exercises (one checked by
  ``check_masked_softmax``, one written, one plain ``assert``), before any nbgrader marks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from mha_lib.exercises import MISTAKES, grading
from mha_lib.exercises.catalogue import FAMILIES

_WRONG = {
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
def {name}(query_size, key_size, value_size, d_model, num_heads, bias):
    D = d_model
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
    def __init__(self, key_size, query_size, value_size, d_model, num_heads, dropout,
                 bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, d_model, bias=bias)
        self.W_k = nn.Linear(key_size, d_model, bias=bias)
        self.W_v = nn.Linear(value_size, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, queries, keys, values, valid_lens=None):
        H = self.num_heads
        q = transpose_qkv(self.W_q(queries), H)
        k = transpose_qkv(self.W_k(keys), H)
        v = transpose_qkv(self.W_v(values), H)
        if valid_lens is not None:
            valid_lens = valid_lens.repeat(H, *[1] * (valid_lens.dim() - 1))  # the mistake
        return self.W_o(transpose_output(self.attention(q, k, v, valid_lens), H))
''',
    "check_tiled_attention": '''\
import math

import torch


def {name}(q, k, v, block_size):
    B, Lq, d = q.shape
    m = torch.full((B, Lq), -math.inf)
    total = torch.zeros(B, Lq)
    acc = torch.zeros(B, Lq, v.shape[-1])
    for start in range(0, k.shape[1], block_size):
        scores = q @ k[:, start:start + block_size].transpose(1, 2) / math.sqrt(d)
        m_new = torch.maximum(m, scores.amax(dim=-1))
        p = torch.exp(scores - m_new[..., None])
        total = total * torch.exp(m - m_new) + p.sum(dim=-1)
        acc = acc + p @ v[:, start:start + block_size]  # the mistake: not rescaled
        m = m_new
    return acc / total[..., None]
''',
    "check_rotary": '''\
import torch


def {name}(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-2 * torch.arange(d // 2, dtype=x.dtype) / d)  # (d/2,)
    angle = positions.to(x.dtype)[:, None] * theta  # (L, d/2)
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., : d // 2], x[..., d // 2:]  # the mistake: halves, not pairs (2i, 2i+1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
''',
    "check_gqa_from_mha": '''\
import torch
from mha_lib.gqa import GroupedQueryAttention


def {name}(mha, num_kv_heads):
    H, D = mha.num_heads, mha.W_q.out_features
    d, g = D // H, H // num_kv_heads
    gqa = GroupedQueryAttention(D, H, num_kv_heads, dropout=0.0)
    with torch.no_grad():
        gqa.W_q.weight.copy_(mha.W_q.weight)
        gqa.W_o.weight.copy_(mha.W_o.weight)
        for name in ("W_k", "W_v"):
            heads = getattr(mha, name).weight.reshape(g, num_kv_heads, d, D)  # the mistake: h % Hkv
            getattr(gqa, name).weight.copy_(heads.mean(0).reshape(num_kv_heads * d, D))
    return gqa
''',
    "check_gpt2_c_attn": '''\
def {name}(weight, bias):
    D = weight.shape[0]
    w_q, w_k, w_v = weight.split(D, dim=1)  # (D, 3D) -> 3 x (D, D)
    b_q, b_k, b_v = bias.split(D)
    return w_q, w_k, w_v, b_q, b_k, b_v
''',
    "check_llama_qk": '''\
from mha_lib.positions import rope_permutation


def {name}(q_proj_weight, k_proj_weight, num_heads, num_kv_heads):
    d = q_proj_weight.shape[0] // num_heads
    g = num_heads // num_kv_heads
    W_k = k_proj_weight.reshape(num_kv_heads, d, -1).repeat(g, 1, 1).reshape(num_heads * d, -1)
    back = rope_permutation(d, num_heads).argsort()
    return q_proj_weight[back], W_k[back]
''',
    "check_delta_step": '''\
def {name}(S, q, k, v, beta):
    stored = (k[..., None, :] @ S)[..., 0, :]  # k S, (B, H, d)
    new = S + k[..., :, None] * (v - stored)[..., None, :]  # the step beta left out
    return new, (q[..., None, :] @ new)[..., 0, :]
''',
    "check_delta_chunk": '''\
import torch


def {name}(S, Q, K, V, beta):
    C = Q.shape[2]
    b = beta[..., None]  # (B, H, C, 1)
    system = torch.eye(C, dtype=Q.dtype) + (b * (K @ K.mT)).tril(-1)  # (B, H, C, C)
    U = torch.linalg.solve_triangular(system, b * (V - K @ S), upper=False)  # (B, H, C, d)
    O = Q @ S + (Q @ K.mT).tril(-1) @ U  # the strict triangle: token t misses its own correction
    return O, S + K.mT @ U
''',
}

_MISTAKE = {
    "check_masked_softmax": ("axis", "queries"),
    "check_dot_product_attention": ("scale", "none"),
    "check_num_parameters": ("params", "no_W_o"),
    "check_transpose_qkv": ("fold", "head_major"),
    "check_transpose_output": ("fold", "head_major"),
    "check_multihead_attention": ("lens", "repeat"),
    "check_tiled_attention": ("accumulator", "not_rescaled"),
    "check_gqa_from_mha": ("kv_groups", "tiled"),
    "check_rotary": ("pairs", "halves"),
    "check_gpt2_c_attn": ("conv1d", "not_transposed"),
    "check_llama_qk": ("kv_repeat", "tiled"),
    "check_delta_step": ("delta_beta", "forgotten"),
    "check_delta_chunk": ("chunk_output", "strict"),
}


@dataclass(frozen=True)
class WrongAnswer:
    """A wrong answer to the exercise of ``checker``, with the classic mistake ``mistake``."""

    checker: str
    source: str
    mistake: tuple[str, str]

    def define(self, name: str):
        """The object ``name`` that the source defines."""
        namespace: dict = {}
        exec(self.source.format(name=name), namespace)
        return namespace[name]


_ANSWERS = {checker: WrongAnswer(checker, _WRONG[checker], _MISTAKE[checker])
            for checker in sorted(_WRONG)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "wrong_answer" in metafunc.fixturenames:
        metafunc.parametrize("wrong_answer", list(_ANSWERS.values()), ids=list(_ANSWERS))


@pytest.fixture(scope="session")
def wrong_answers() -> dict[str, WrongAnswer]:
    return dict(_ANSWERS)



@pytest.fixture
def verdict(capsys):
    def run(checker, candidate):
        ok = checker(candidate)
        return ok, capsys.readouterr().out, grading._run_checker(checker.__name__, candidate)

    return run


@pytest.fixture
def named_mistakes(verdict):
    def check(checker, candidate, mistakes):
        ok, out, report = verdict(checker, candidate)
        titles = [MISTAKES[m].title for m in mistakes]
        assert not ok and "match none of the classic mistakes" not in out
        assert all(MISTAKES[m].title in out and MISTAKES[m].hint[:40] in out for m in mistakes)
        assert report.runs and sorted(report.named) == sorted(titles)
        lost = {FAMILIES[setting] for setting, _ in mistakes}
        assert set(report.failed_families) == lost
        assert report.score == grading.max_points(checker.__name__) - len(lost)
        return out

    return check


def _solution_cell(source: str):
    return new_code_cell(source, metadata={"tags": ["solution"]})


def _exercise_block(label: str, question: str, solution: list, test: str | None) -> list:
    cells = [
        new_markdown_cell(f"```{{exercise}} {label.title()}\n:label: {label}\n\n{question}\n```"),
        new_markdown_cell(f"```{{solution-start}} {label}\n:class: dropdown\n```"),
        *solution,
        new_markdown_cell("```{solution-end}\n```"),
    ]
    return cells + ([new_code_cell(test)] if test else [])


@pytest.fixture
def demo_chapter():
    cells = [
        new_markdown_cell("# A demo chapter\n\nSome prose."),
        new_code_cell("import torch"),
        *_exercise_block(
            "ex-softmax", "Write `my_masked_softmax`.",
            [_solution_cell(
                "import torch\nfrom mha_lib import masked_softmax\n\n\n"
                "def my_masked_softmax(X, valid_lens=None):\n"
                '    """Softmax over the last axis that skips the keys past the valid length."""\n'
                "    # SECRET COMMENT\n"
                "    return masked_softmax(X, valid_lens)"),
             new_markdown_cell("SECRET PROSE: multiplying by the mask zeroes empty rows.")],
            "from mha_lib.exercises import check_masked_softmax\n\n"
            "assert check_masked_softmax(my_masked_softmax)"),
        *_exercise_block(
            "ex-why", "Why?",
            [new_markdown_cell("SECRET ANSWER: because.")], None),
        *_exercise_block(
            "ex-assert", "Compute twice.",
            [_solution_cell("def twice(x):\n    return 2 * x")], "assert twice(2) == 4"),
        new_code_cell("print('after the exercises')"),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
