"""The mask lab's checker (check_left_padding_mask): hand-written wrong answers, each named,
each losing its family's point."""

import pytest
import torch

from mha_lib.exercises import MISTAKES, check_left_padding_mask, grading
from mha_lib.exercises.catalogue import FAMILIES


def student_mask(pad_lens, L, *bugs):
    """A student's left-padding mask, with the bugs named (written by hand, not the models)."""
    positions = torch.arange(L)
    if "right" in bugs:
        real = positions < (L - pad_lens).unsqueeze(1)
    elif "one_more" in bugs:
        real = positions > pad_lens.unsqueeze(1)
    else:
        real = positions >= pad_lens.unsqueeze(1)
    keep = real.unsqueeze(1).repeat(1, L, 1)  # (B, L, L)
    if "forgotten" not in bugs:
        keep = keep & torch.tril(torch.ones(L, L, dtype=torch.bool))
    if "inverted" in bugs:
        keep = keep.logical_not()
    return keep.to(torch.float32) if "float01" in bugs else keep


def test_reference_passes_with_full_marks(capsys):
    assert check_left_padding_mask(student_mask)
    assert "all 3 cases pass" in capsys.readouterr().out
    assert grading.partial_credit("check_left_padding_mask", student_mask) == grading.max_points(
        "check_left_padding_mask")


@pytest.mark.parametrize("bug, key", [
    ("right", ("padding_side", "right")),
    ("one_more", ("pad_start", "one_more")),
    ("forgotten", ("causal", "forgotten")),
    ("inverted", ("mask_convention", "inverted")),
    ("float01", ("mask_dtype", "float01")),
])
def test_mistake_is_named_and_loses_its_family(bug, key, capsys):
    def answer(pad_lens, L):
        return student_mask(pad_lens, L, bug)

    assert not check_left_padding_mask(answer)
    out = capsys.readouterr().out
    assert MISTAKES[key].title in out
    points = grading.partial_credit("check_left_padding_mask", answer)
    assert FAMILIES[key[0]] in capsys.readouterr().out  # the family that loses its point
    assert points == grading.max_points("check_left_padding_mask") - 1


def test_two_mistakes_at_once_are_both_named(capsys):
    assert not check_left_padding_mask(lambda p, L: student_mask(p, L, "right", "forgotten"))
    out = capsys.readouterr().out
    assert MISTAKES[("padding_side", "right")].title in out
    assert MISTAKES[("causal", "forgotten")].title in out


def test_a_stub_and_a_wrong_kind_of_result(capsys):
    def stub(pad_lens, L):
        raise NotImplementedError

    assert not check_left_padding_mask(stub)
    assert "not implemented yet" in capsys.readouterr().out
    assert not check_left_padding_mask(lambda p, L: [[True]])
    assert "returned list, not a tensor" in capsys.readouterr().out
    # None must not pass for "no mask" (F.scaled_dot_product_attention's attn_mask=None)
    assert not check_left_padding_mask(lambda p, L: None)
    assert "returned NoneType, not a tensor" in capsys.readouterr().out


def test_the_checker_leaves_pad_lens_alone(capsys):
    def in_place(pad_lens, L):
        pad_lens += 1
        return student_mask(pad_lens - 1, L)

    assert not check_left_padding_mask(in_place)
    assert "modified its input in place" in capsys.readouterr().out
