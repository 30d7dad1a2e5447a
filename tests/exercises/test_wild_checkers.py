"""The checkers of chapter 5's exercises (mha_lib.exercises.wild): GPT-2's c_attn, Llama's q/k.

The wrong answers are written by hand, the way a student would write them (they do not reuse
the mistake models): a test passes only if the checker names the mistake from the numbers.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib.exercises import MISTAKES, check_gpt2_c_attn, check_llama_qk, grading
from mha_lib.exercises.catalogue import FAMILIES
from mha_lib.positions import rope_permutation


def c_attn_answer(*bugs):
    def split_c_attn(weight, bias):
        D = weight.shape[0]
        parts, biases = list(weight.split(D, dim=1)), list(bias.split(D))
        if "kqv" in bugs:
            parts[0], parts[1], biases[0], biases[1] = parts[1], parts[0], biases[1], biases[0]
        weights = [p if "not_transposed" in bugs else p.T for p in parts]
        if "ignored" in bugs:
            biases = [torch.zeros(D)] * 3
        return (*weights, *biases)
    return split_c_attn


def llama_answer(*bugs):
    def llama_qk(q_proj_weight, k_proj_weight, num_heads, num_kv_heads):
        H, Hkv = num_heads, num_kv_heads
        d = q_proj_weight.shape[0] // H
        heads = k_proj_weight.reshape(Hkv, d, -1)
        heads = heads.repeat(H // Hkv, 1, 1) if "tiled" in bugs else heads.repeat_interleave(H // Hkv, 0)
        W_k = heads.reshape(H * d, -1)
        if "not_permuted" in bugs:
            return q_proj_weight, W_k
        perm = rope_permutation(d, H)
        rows = perm if "wrong_way" in bugs else perm.argsort()
        return q_proj_weight[rows], W_k[rows]
    return llama_qk


def test_right_answers_pass(capsys):
    assert check_gpt2_c_attn(c_attn_answer())
    assert check_llama_qk(llama_answer())
    assert capsys.readouterr().out.count("all 3 cases pass") == 2


@pytest.mark.parametrize("check, answer, key", [
    (check_gpt2_c_attn, c_attn_answer("not_transposed"), ("conv1d", "not_transposed")),
    (check_gpt2_c_attn, c_attn_answer("kqv"), ("c_attn_split", "kqv")),
    (check_gpt2_c_attn, c_attn_answer("ignored"), ("c_attn_bias", "ignored")),
    (check_llama_qk, llama_answer("not_permuted"), ("rope_rows", "not_permuted")),
    (check_llama_qk, llama_answer("wrong_way"), ("rope_rows", "wrong_way")),
    (check_llama_qk, llama_answer("tiled"), ("kv_repeat", "tiled")),
], ids=lambda x: x if isinstance(x, tuple) else "")
def test_each_mistake_is_named_and_loses_its_family(check, answer, key, capsys):
    assert not check(answer)
    out = capsys.readouterr().out
    assert MISTAKES[key].title in out
    report = grading._run_checker(check.__name__, answer)
    assert report.runs and set(report.failed_families) == {FAMILIES[key[0]]}


def test_two_mistakes_at_once(capsys):
    assert not check_gpt2_c_attn(c_attn_answer("not_transposed", "kqv"))
    out = capsys.readouterr().out
    assert MISTAKES[("conv1d", "not_transposed")].title in out
    assert MISTAKES[("c_attn_split", "kqv")].title in out


def test_stub_crash_and_wrong_shapes(capsys):
    def stub(*args):
        raise NotImplementedError

    assert not check_gpt2_c_attn(stub) and not check_llama_qk(stub)
    assert capsys.readouterr().out.count("not implemented yet") == 2
    assert not check_llama_qk(lambda q, k, H, Hkv: (q, k))  # no repeat: W_k too short
    assert "one key head per query head" in capsys.readouterr().out
    assert not check_llama_qk(lambda q, k, H, Hkv: q)
    assert "expected (W_q, W_k)" in capsys.readouterr().out
    assert not check_gpt2_c_attn(lambda weight, bias: weight.split(8, dim=1))  # weights only
    assert "expected six tensors" in capsys.readouterr().out
