"""Checkers for the book's coding exercises: run the student's code, name the mistake.

Each ``check_*`` function runs a student's implementation on a few small cases chosen to expose
the classic mistakes, and compares it with mha_lib's reference. When every case passes it
prints one line and returns ``True``. Otherwise it prints, in plain words, which mistake it
sees and where to look for it, and returns ``False``. A stub that raises
``NotImplementedError`` is reported as "not implemented yet"; any other exception of the
student's code is reported with the case that triggered it. A checker never raises because of
the code it checks.

How a mistake gets its name: the student's source is never read. For every classic mistake a
checker builds, from mha_lib's own pieces, an implementation that makes exactly that mistake
(or two of them at once) and runs it on the same cases. The mistake whose outputs match the
student's outputs on every case is the diagnosis.

The package:

* :mod:`~mha_lib.exercises.catalogue`  :data:`MISTAKES`, every mistake a checker can name
  (title and hint), and the family of each mistake setting;
* :mod:`~mha_lib.exercises.runner`     the engine every checker shares (cases, diagnosis,
  printed verdict);
* :mod:`~mha_lib.exercises.core`       the checkers of chapters 1-3;
* :mod:`~mha_lib.exercises.later`      the checkers of chapters 4-7;
* :mod:`~mha_lib.exercises.modern`     the checkers of RoPE (chapter 3b), grouped-query
  attention (chapter 10), tiled attention (chapter 11) and the mask lab's left padding;
* :mod:`~mha_lib.exercises.today`      the checkers of chapter 12c's experiments: StreamingLLM's
  mask, the absorbed scores of multi-head latent attention, gated attention's output;
* :mod:`~mha_lib.exercises.linear`     the checkers of chapter 12d: one token of the delta rule,
  one chunk of it at once;
* :mod:`~mha_lib.exercises.wild`       the checkers of chapter 5's conversions: GPT-2's fused
  ``c_attn``, Llama's queries and keys;
* :mod:`~mha_lib.exercises.grading`    partial credit per mistake family, for nbgrader;
* :mod:`~mha_lib.exercises.bug_zoo`    the bug zoo: attention layers with one real bug each;
  :mod:`~mha_lib.exercises.probes` the symptom probes that expose them;
  :mod:`~mha_lib.exercises.zoo_grading` the grading of the diagnoses and of a student's test;
* :mod:`~mha_lib.exercises.judgement`  chapter 13's judgement exercise: a student's design of
  the run that would overturn a claim, run and graded (controls, seeds, conclusion);
* :mod:`~mha_lib.exercises.capstone`   the capstone's grader (chapter 12b): a story model the
  student built and trained, graded by its components, decoding, quality and heads.
* :mod:`~mha_lib.exercises.find_the_head`   find the head: shipped models nobody has looked at,
  graded by ablating the heads the student names (chapters 7, 8, 12 and 12b).

Adding a checker ``check_x``:

1. its mistakes: entries ``("setting", "value"): _Mistake(title, hint)`` in
   ``catalogue.MISTAKES``, and each new setting's family in ``catalogue.FAMILIES``;
2. the checker, in the module of its chapters (or a new module of that kind, each under 600
   lines): a mistake model ``_x_variant(..., spec)`` that is the reference for ``spec == {}``,
   a list of ``runner.Case``, and ``return runner.run_cases("check_x", cases, settings,
   general_hint)``, the function decorated with ``@runner.checker`` (it refuses an answer that
   cannot be called and reports whatever still escapes); export it below;
3. its families in ``grading.CHECKER_FAMILIES`` (without it the exercise gets no partial
   credit cell), then ``python -m mha_lib.book.assignments mark chapters/*.ipynb``.

The tests (``tests/exercises/``) then ask for a reference that passes and one hand-written
wrong answer per mistake.
"""

from mha_lib.exercises.catalogue import MISTAKES
from mha_lib.exercises.core import (
    check_dot_product_attention,
    check_masked_softmax,
    check_multihead_attention,
    check_num_parameters,
    check_transpose_output,
    check_transpose_qkv,
)
from mha_lib.exercises.later import (
    check_crossover_length,
    check_longest_sequence,
    check_mean_entropy,
    check_prune_heads,
    check_stiefel_dimension,
)
from mha_lib.exercises.modern import (
    check_gqa_from_mha,
    check_interpolation,
    check_left_padding_mask,
    check_rotary,
    check_tiled_attention,
)
from mha_lib.exercises.judgement import check_threat_design
from mha_lib.exercises.linear import check_delta_chunk, check_delta_step
from mha_lib.exercises.today import check_absorbed_scores, check_gated_output, check_streaming_mask
from mha_lib.exercises.wild import check_gpt2_c_attn, check_llama_qk

__all__ = [
    "MISTAKES",
    "check_absorbed_scores",
    "check_crossover_length",
    "check_delta_chunk",
    "check_delta_step",
    "check_dot_product_attention",
    "check_gated_output",
    "check_gpt2_c_attn",
    "check_gqa_from_mha",
    "check_interpolation",
    "check_left_padding_mask",
    "check_llama_qk",
    "check_longest_sequence",
    "check_masked_softmax",
    "check_mean_entropy",
    "check_multihead_attention",
    "check_num_parameters",
    "check_prune_heads",
    "check_rotary",
    "check_stiefel_dimension",
    "check_streaming_mask",
    "check_threat_design",
    "check_tiled_attention",
    "check_transpose_output",
    "check_transpose_qkv",
]
