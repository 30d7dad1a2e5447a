"""check_interpolation (chapter 12c): RoPE with position interpolation from L to L'. The
references pass; each hand-written mistake is named and loses its family's point."""

import pytest
import torch

from mha_lib.exercises import check_interpolation, grading
from mha_lib.positions import rotary


def student_interpolate(x, positions, train_len, new_len, *bugs):
    d = x.shape[-1]
    scale = new_len / train_len if "inverted" in bugs else train_len / new_len
    pos = positions.double() * scale  # (L,) fractions
    if "rounded" in bugs:
        pos = pos.round()
    theta = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    angle = pos[:, None] * theta  # (L, d/2)
    if "some_pairs" in bugs:  # the slow half of the pairs at the unscaled position
        angle[:, d // 4:] = positions.double()[:, None] * theta[d // 4:]
    if "halves" in bugs:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def with_bugs(*bugs):
    return lambda x, p, L, L_new: student_interpolate(x, p, L, L_new, *bugs)


@pytest.mark.parametrize("candidate", [
    lambda x, p, L, L_new: rotary(x, p, scale=L / L_new), with_bugs()], ids=["library", "student"])
def test_a_right_answer_passes_with_full_marks(candidate, capsys):
    assert check_interpolation(candidate) is True
    assert "cases pass" in capsys.readouterr().out
    assert grading.partial_credit("check_interpolation", candidate) == grading.max_points("check_interpolation")


@pytest.mark.parametrize("bug, mistake", [
    ("inverted", ("interp", "inverted")), ("rounded", ("interp", "rounded")),
    ("some_pairs", ("interp", "some_pairs")), ("halves", ("pairs", "halves"))])
def test_each_mistake_is_named_and_loses_its_family(bug, mistake, named_mistakes):
    named_mistakes(check_interpolation, with_bugs(bug), [mistake])


def test_plain_rope_without_interpolation_is_not_right(capsys):
    assert check_interpolation(lambda x, p, L, L_new: rotary(x, p)) is False
