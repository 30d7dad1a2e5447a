"""The catalogue of classic mistakes: every mistake a checker can name, and its family.

A checker of :mod:`mha_lib.exercises` names a student's mistake by a key ``(setting, value)``
of :data:`MISTAKES`, e.g. ``("mask", "one_more")``: the *setting* is the part of the code
that goes wrong (the mask, the softmax axis, the scaling, ...), the *value* how it goes wrong.
A checker's mistake models (:mod:`mha_lib.exercises.core`, :mod:`mha_lib.exercises.later`,
:mod:`mha_lib.exercises.modern`) build one implementation per key; the entry here says, in
plain words, what the mistake is and how to find it in one's own code.

:data:`FAMILIES` puts every setting in a *mistake family* (masking, scores, heads, ...):
:mod:`mha_lib.exercises.grading` gives one point per family a checker covers, so a new
setting needs its family here as well (a test says so).

The hints' shapes are in the book's notation (:mod:`mha_lib`): B batch, H heads, Lq queries, Lk key-value
pairs, d head size, D = H*d = ``d_model``.
"""

from __future__ import annotations

from mha_lib.exercises._catalogue_today import _TODAY_MISTAKES
from mha_lib.exercises._mistake import _Mistake

__all__ = ["FAMILIES", "MISTAKES"]


#: The mistake family of every setting (the first part of a key of :data:`MISTAKES`).
FAMILIES: dict[str, str] = {
    # chapters 1-3 (mha_lib.exercises.core)
    "mask": "masking",
    "axis": "masking",
    "empty": "masking",
    "scale": "scores",
    "scores": "scores",
    "lens": "heads",
    "fold": "heads",
    "split": "heads",
    "merge": "heads",
    "W_o": "output projection",
    "params": "counting",
    "bias": "counting",
    # chapters 4-7 (mha_lib.exercises.later)
    "entropy": "entropy",
    "stiefel": "counting",
    "crossover": "formula",
    "memory": "formula",
    "prune": "pruning",
    # RoPE, GQA, tiled attention (mha_lib.exercises.modern)
    "pairs": "rotation pairs",
    "angle": "angles",
    "exponent": "angles",
    "offset": "positions",
    "interp": "interpolation",
    "accumulator": "online softmax",
    "running_sum": "online softmax",
    "blocks": "online softmax",
    "kv_groups": "grouping",
    "pool": "pooling",
    # attention code in the wild (mha_lib.exercises.wild)
    "conv1d": "weight layout",
    "c_attn_split": "fused projections",
    "c_attn_bias": "fused projections",
    "rope_rows": "rotation pairs",
    "kv_repeat": "grouping",
    # the mask lab (mha_lib.exercises.modern)
    "padding_side": "padding",
    "pad_start": "padding",
    "causal": "causality",
    "mask_convention": "mask convention",
    "mask_dtype": "mask convention",
    # today's attention, chapter 12c (mha_lib.exercises.today)
    "window": "window",
    "sink_keys": "sinks",
    "window_causal": "causality",
    "uk_heads": "heads",
    "uk_layout": "weight layout",
    "gate_fn": "gate function",
    "gate_place": "output projection",
    "gate_axes": "heads",
    # linear attention and the delta rule, chapter 12d (mha_lib.exercises.linear)
    "delta_beta": "delta rule",
    "delta_read": "state layout",
    "delta_write": "state layout",
    "delta_output": "update order",
    "chunk_system": "triangular system",
    "chunk_output": "chunk output",
    "chunk_state": "update order",
    # designing a threat run (mha_lib.exercises.judgement)
    "design_seeds": "seeds",
    "design_steps": "controls",
    "design_params": "controls",
    "design_lr": "learning rate",
    "design_conclusion": "conclusion",
}

#: Every mistake a checker can name, keyed by ``(setting, wrong value)``. A *spec* is a dict of
#: such settings; the empty spec is the correct implementation.
MISTAKES: dict[tuple[str, str], _Mistake] = {
    # ---------------------------------------------------------------- chapters 1-3 (core)
    ("mask", "none"): _Mistake(
        "no masking: the valid lengths are ignored",
        "Every key gets a weight, even those past the valid length. Build a mask from "
        "valid_lens (key position j is kept when j < valid_len) and fill the scores outside it "
        "with a very negative number before the softmax.",
    ),
    ("mask", "one_more"): _Mistake(
        "mask off by one: one key too many is kept",
        "Key positions run from 0, so a valid length of 3 keeps keys 0, 1, 2. Look for `<=` "
        "where `<` belongs (or a `+ 1`) in the comparison that builds the mask.",
    ),
    ("mask", "after_softmax"): _Mistake(
        "masked after the softmax, without renormalising",
        "Zeroing the padded keys' weights after the softmax leaves each row summing to less "
        "than 1: the weight the padding received is lost, not given to the valid keys. Mask the "
        "scores before the softmax (fill them with a very negative number), or divide each row "
        "by its new sum.",
    ),
    ("mask", "one_less"): _Mistake(
        "mask off by one: one key too few is kept",
        "A valid length of 3 keeps keys 0, 1 and 2, three keys. Look for a `- 1` or for `<` "
        "where the comparison should be `j < valid_len` on 0-based positions.",
    ),
    ("axis", "queries"): _Mistake(
        "softmax over the wrong axis (over the queries)",
        "Each query distributes its attention over the keys, so the softmax runs over the last "
        "axis (dim=-1): every row of the (B, Lq, Lk) weights sums to 1. Yours makes the columns "
        "sum to 1 (dim=1 or dim=-2).",
    ),
    ("axis", "batch"): _Mistake(
        "softmax over the wrong axis (over the batch)",
        "The softmax must run over the keys, the last axis (dim=-1); yours normalises across "
        "the examples of the batch (dim=0). Check the `dim` argument of your softmax.",
    ),
    ("empty", "nan"): _Mistake(
        "NaN on a row with valid length 0",
        "When a query may attend to no key, every score of its row is masked. Filling with "
        "-inf then makes the softmax compute 0/0 = NaN. Fill with a finite very negative number "
        "(torch.finfo(X.dtype).min) and set such rows to zero afterwards.",
    ),
    ("empty", "uniform"): _Mistake(
        "another convention for a row with valid length 0: uniform weights instead of zeros",
        "Every row with at least one valid key is right. Filling masked scores with a finite "
        "number such as -1e6, as d2l.ai's masked_softmax does, makes a fully masked row a "
        "uniform average over all keys, padding included: that is d2l.ai's convention. This "
        "book's convention is that a query with valid length 0 attends to nothing; to follow "
        "it, multiply the weights by the mask so that row is all 0.",
        convention=True,
    ),
    ("scale", "none"): _Mistake(
        "missing 1/sqrt(d) scaling",
        "The scores are Q K^T / sqrt(d), with d the size of a query/key (of one head). Without "
        "the division, large d makes the softmax saturate.",
    ),
    ("scale", "d"): _Mistake(
        "scaling by 1/d instead of 1/sqrt(d)",
        "Divide the scores by math.sqrt(d), not by d: the dot product of two random vectors "
        "with d unit-variance entries has standard deviation sqrt(d).",
    ),
    ("scale", "sqrt_Lk"): _Mistake(
        "scaling by 1/sqrt(Lk), the number of keys, instead of 1/sqrt(d)",
        "The scale comes from the size of one dot product: d, the last axis of the queries "
        "and keys (queries.shape[-1]), not the number of keys (keys.shape[1]). The variance of "
        "a score grows with d, whatever the number of keys.",
    ),
    ("scale", "sqrt_D"): _Mistake(
        "scaling by 1/sqrt(D), the model width d_model, instead of 1/sqrt(d)",
        "Each head computes dot products of size d = D / H (D = d_model, the width of the "
        "projections), so the scores of a head are divided by sqrt(d), the head size, not by "
        "sqrt(D).",
    ),
    ("lens", "repeat"): _Mistake(
        "repeat instead of repeat_interleave for the valid lengths",
        "After transpose_qkv, row b*H + h holds head h of example b, so each example's valid "
        "length must appear H times in a row: valid_lens.repeat_interleave(H, dim=0) turns "
        "[3, 2] into [3, 3, 2, 2]. `repeat` gives [3, 2, 3, 2] and hands the heads of one "
        "example the lengths of another.",
    ),
    ("fold", "no_permute"): _Mistake(
        "reshape without the permute: positions mixed with heads",
        "Reshaping (B, L, D) straight to (B*H, L, d) cuts the memory in the wrong places: one "
        "'head' then holds pieces of several positions. Reshape to (B, L, H, d), permute to "
        "(B, H, L, d), and only then merge B and H (and the reverse in transpose_output).",
    ),
    ("scores", "no_transpose"): _Mistake(
        "Q @ K without the transpose",
        "The scores are Q K^T: (B, Lq, d) @ (B, d, Lk) -> (B, Lq, Lk). Multiplying by the keys "
        "themselves, (B, Lk, d), fails as soon as Lk differs from d, and silently computes "
        "something else when they happen to be equal. Use keys.transpose(-2, -1) (or keys.mT).",
    ),
    ("fold", "permute_0231"): _Mistake(
        "permute(0, 2, 3, 1) instead of permute(0, 2, 1, 3)",
        "After reshaping (B, L, D) to (B, L, H, d), permute(0, 2, 1, 3) gives (B, H, L, d). "
        "permute(0, 2, 3, 1) gives (B, H, d, L); the final reshape to (B*H, L, d) still "
        "succeeds (L*d = d*L) but every row now mixes positions and features. Write the shape "
        "after each step in a comment.",
    ),
    ("merge", "reshape"): _Mistake(
        "transpose_output as a plain reshape",
        "(B*H, Lq, d) cannot go straight to (B, Lq, D) by reshape: the heads of one example sit "
        "in consecutive rows, so a reshape glues positions of one head together. Reshape to "
        "(B, H, Lq, d), permute to (B, Lq, H, d), then merge the last two axes.",
    ),
    ("fold", "head_major"): _Mistake(
        "heads ordered head-major instead of batch-major",
        "The folded batch must be ordered example by example: row b*H + h is head h of example "
        "b (permute to (B, H, L, d) before merging the first two axes). Yours puts all "
        "examples of head 0 first (row h*B + b), which no longer matches valid lengths "
        "repeated with repeat_interleave.",
    ),
    ("split", "interleaved"): _Mistake(
        "heads take every H-th feature instead of a block of d features",
        "Split the features as (H, d): head h owns features h*d .. h*d + d - 1. Reshaping to "
        "(B, L, d, H) gives head h the features h, h + H, h + 2H, ... instead.",
    ),
    ("W_o", "skip"): _Mistake(
        "forgot the output projection W_o",
        "After transpose_output concatenates the heads, the result still goes through W_o, "
        "which mixes the heads: return self.W_o(output_concat).",
    ),
    ("params", "no_W_o"): _Mistake(
        "forgot the output projection W_o",
        "Multi-head attention has four projections: W_q, W_k, W_v and the output projection "
        "W_o of shape (D, D), D = d_model.",
    ),
    ("params", "per_head"): _Mistake(
        "counted a full-size projection for every head",
        "The heads share the projections: W_q maps query_size to D = H*d once, and "
        "head h uses its own d output columns. The count does not depend on num_heads.",
    ),
    ("bias", "ignored"): _Mistake(
        "the biases are not counted",
        "With bias=True each of the four nn.Linear layers has a bias of D = d_model entries.",
    ),
    ("bias", "always"): _Mistake(
        "biases counted although bias=False",
        "With bias=False the four projections are plain matrices without a bias vector.",
    ),
    # ---------------------------------------------------------------- chapters 4-7 (later)
    ("entropy", "nan"): _Mistake(
        "NaN from 0 * log(0) on masked keys",
        "A masked key has weight exactly 0, and w * torch.log(w) is then 0 * (-inf) = NaN. By "
        "convention 0 log 0 = 0: use torch.xlogy(w, w), or torch.special.entr(w).",
    ),
    ("entropy", "log2"): _Mistake(
        "entropy in bits (log2) instead of nats (natural log)",
        "The exercise compares with log 6, the natural logarithm: use torch.log (or xlogy), "
        "not torch.log2.",
    ),
    ("entropy", "sign"): _Mistake(
        "the minus sign is missing",
        "Entropy is -sum w log w; every log w <= 0, so without the minus the result is negative.",
    ),
    ("entropy", "queries"): _Mistake(
        "summed over the queries instead of over the keys",
        "Each row (one query, over the keys) is a distribution: sum over the last axis "
        "(dim=-1), then average the rows of each head (dim=-1 of the result).",
    ),
    ("stiefel", "d_squared"): _Mistake(
        "d*d constraints instead of d(d+1)/2",
        "P^T P = I is a symmetric d x d equation: entry (i, j) and entry (j, i) are the same "
        "equation, so only d(d+1)/2 of the d*d entries constrain P.",
    ),
    ("stiefel", "antisymmetric"): _Mistake(
        "d(d-1)/2 constraints instead of d(d+1)/2",
        "d(d-1)/2 is the dimension of the orthogonal group (the off-diagonal equations only). "
        "The diagonal equations |p_i| = 1 constrain P too: d(d+1)/2 in all.",
    ),
    ("stiefel", "free"): _Mistake(
        "no constraint counted: N*d",
        "N*d is the size of an unconstrained N x d matrix. The rank of the Jacobian of the "
        "parametrization is smaller, because the map lands on the manifold P^T P = I.",
    ),
    ("crossover", "half"): _Mistake(
        "L = D: only two of the four projections counted",
        "Self-attention has four D x D projections (W_q, W_k, W_v on L tokens each, W_o on the "
        "L outputs), 8 L D^2 FLOPs in all, against 4 L^2 D for the scores and the weighted sum.",
    ),
    ("crossover", "double"): _Mistake(
        "L = 4D: only the scores counted, not the weighted sum",
        "The attention part is two matrix products of the same size, the scores Q K^T and the "
        "weighted sum of the values: 2 L^2 D FLOPs each, 4 L^2 D together.",
    ),
    ("crossover", "strict"): _Mistake(
        "one too many: attention must *reach* the projections, not exceed them",
        "The smallest L with 4 L^2 D >= 8 L D^2 is L = 2D itself (equality counts).",
    ),
    ("memory", "no_bytes"): _Mistake(
        "counted weights, not bytes",
        "Each float32 weight takes 4 bytes: B * H * L * L * 4 <= budget.",
    ),
    ("memory", "float64"): _Mistake(
        "8 bytes per weight: float64 instead of float32",
        "The weights are float32: 4 bytes each.",
    ),
    ("memory", "float_sqrt"): _Mistake(
        "int(math.sqrt(...)) rounds up for large numbers",
        "A float has 53 bits of mantissa: for budgets around 10^16 math.sqrt can return the "
        "next integer. math.isqrt computes the exact floor of the square root.",
    ),
    ("prune", "kept_listed"): _Mistake(
        "kept the listed heads instead of removing them",
        "`heads` lists the heads to remove: keep every head h that is *not* in the list.",
    ),
    ("prune", "interleaved"): _Mistake(
        "head h's rows taken as h, h + H, h + 2H, ... instead of the block h*d .. h*d + d - 1",
        "transpose_qkv gives head h the d consecutive features h*d, ..., h*d + d - 1: keep "
        "those rows of W_q, W_k, W_v and those columns of W_o.",
    ),
    # -------------------------------------------- RoPE, GQA, tiled attention (modern)
    ("pairs", "halves"): _Mistake(
        "the halves convention: pairs (i, i + d/2) instead of (2i, 2i+1)",
        "This book rotates neighbouring features, as the RoFormer paper does: pair i is "
        "(x[..., 2i], x[..., 2i+1]), i.e. x[..., 0::2] and x[..., 1::2], and the rotated pairs "
        "go back in place (torch.stack((even, odd), dim=-1).flatten(-2)). Pairing the first "
        "half with the second half (rotate_half, as GPT-NeoX and Hugging Face's Llama do) is "
        "the other convention: fine on its own, but weights trained with one convention give "
        "wrong scores when run with the other (mha_lib.positions.rope_permutation converts).",
        convention=True,
    ),
    ("angle", "opposite"): _Mistake(
        "the opposite angle: turned by -p * theta_i instead of +p * theta_i",
        "Turning the pair (x1, x2) by the angle a gives (x1 cos a - x2 sin a, x1 sin a + "
        "x2 cos a). Yours has the two sine terms' signs swapped, which turns the other way, "
        "as if every position p were -p.",
    ),
    ("exponent", "i_over_d"): _Mistake(
        "the exponent i/d instead of 2i/d in the frequencies",
        "Pair i (features 2i, 2i+1) turns at theta_i = 10000**(-2i/d), i = 0 .. d/2 - 1: the "
        "exponents are torch.arange(0, d, 2) / d. With torch.arange(d // 2) / d the slowest "
        "pair turns about 100 times too fast.",
    ),
    ("offset", "ignored"): _Mistake(
        "positions ignored: every sequence turned as if it started at 0 (an offset lost)",
        "Turn row l by the angle positions[l] * theta_i, not l * theta_i: torch.arange(L) "
        "forgets where the sequence starts. After a KV cache holding n tokens the first new "
        "token is at position n, not 0.",
    ),
    ("interp", "inverted"): _Mistake(
        "the scale inverted: positions times L'/L instead of L/L'",
        "Interpolation squeezes the longer sequence into the trained range: position p of a "
        "sequence of L' tokens turns by p * L / L' * theta_i, below L for every p < L'.",
    ),
    ("interp", "rounded"): _Mistake(
        "the scaled positions rounded to integers",
        "p * L / L' is a fraction (position 5 of 4x the length is 1.25): keep it as a float "
        "in the angle; rounding gives neighbouring tokens the same angle.",
    ),
    ("interp", "some_pairs"): _Mistake(
        "only some pairs interpolated: the slow pairs still turn at p * theta_i",
        "Position interpolation scales the position, so every pair i turns by "
        "p * L / L' * theta_i, the slow pairs too.",
    ),
    ("accumulator", "not_rescaled"): _Mistake(
        "the output accumulator not rescaled when the running maximum grows",
        "What the accumulator holds was summed with exp(score - m_old). When a block raises "
        "the running maximum to m_new, multiply it by exp(m_old - m_new) before adding the "
        "block's exp(scores - m_new) @ V.",
    ),
    ("running_sum", "not_rescaled"): _Mistake(
        "the running sum not rescaled when the running maximum grows",
        "The sum of exponentials so far was taken with the old maximum: update it as "
        "s * exp(m_old - m_new) + exp(scores - m_new).sum(-1). Sum and accumulator get the same "
        "factor, so that their ratio at the end is the softmax-weighted average.",
    ),
    ("blocks", "averaged"): _Mistake(
        "each block normalised on its own and the blocks averaged",
        "A softmax per block gives every block the same total weight, whatever its scores. "
        "There is one softmax over all the keys: carry the running maximum, the running sum "
        "and the accumulator from block to block and divide by the sum once, at the end.",
    ),
    ("kv_groups", "tiled"): _Mistake(
        "groups tiled (head h pooled into h % Hkv) instead of consecutive heads",
        "Query head h reads key/value head h // g, g = H / Hkv (mha_lib.gqa.kv_head_of): "
        "group j is the consecutive heads j*g .. j*g + g - 1. Reshape W_k.weight (H*d, D) to "
        "(Hkv, g, d, D) and pool axis 1; (g, Hkv, d, D) groups the heads j, j + Hkv, ..., "
        "the tiling of repeat where repeat_interleave belongs.",
    ),
    ("pool", "sum"): _Mistake(
        "a sum instead of the mean of the group's key and value heads",
        "Mean-pooling divides by the group size g: .mean(dim), not .sum(dim). A sum makes the "
        "keys and values g times too large, and the scores g times too sharp.",
    ),
    ("pool", "first"): _Mistake(
        "the group's first head instead of the mean of its heads",
        "Keeping one head per group throws the others away; Ainslie et al. (2023) found "
        "mean-pooling all g key (and value) heads of a group the better start for uptraining.",
    ),
    # ---------------------------------------------------------------- code in the wild (wild)
    ("conv1d", "not_transposed"): _Mistake(
        "GPT-2's Conv1D weight copied without a transpose",
        "GPT-2's c_attn is a Conv1D: it computes x @ weight + bias with its weight stored (in, "
        "out) = (D, 3D). An nn.Linear stores (out, in) and computes x @ weight.T, so each (D, D) "
        "block of columns must be transposed: W_q = c_attn.weight[:, :D].T. (nanoGPT's c_attn is "
        "an nn.Linear: there W_q is the first D rows, as they are.)",
    ),
    ("c_attn_split", "kqv"): _Mistake(
        "queries and keys swapped when splitting c_attn",
        "c_attn's 3D outputs are the queries, then the keys, then the values: "
        "q, k, v = c_attn(x).split(D, dim=2). The first D columns of the Conv1D weight belong "
        "to W_q, the next D to W_k, the last D to W_v (and the bias splits the same way).",
    ),
    ("c_attn_bias", "ignored"): _Mistake(
        "c_attn's bias left out",
        "GPT-2's projections all have biases: split c_attn.bias (3D,) into three blocks of D, "
        "b_q, b_k, b_v, in the order of the weights.",
    ),
    ("rope_rows", "not_permuted"): _Mistake(
        "the RoPE permutation forgotten",
        "Llama in transformers rotates feature i of a head with feature i + d/2 (rotate_half); "
        "this book rotates 2i with 2i+1. Permute the rows of W_q and W_k within each head, "
        "W[rope_permutation(d, H).argsort()], so that the book's pairs hold what Llama's pairs "
        "held (W_v and W_o stay as they are).",
    ),
    ("rope_rows", "wrong_way"): _Mistake(
        "the RoPE permutation applied the wrong way round",
        "rope_permutation(d, H) takes the book's rows to the places of the halves convention "
        "(book -> Llama). From Llama to the book, index with its inverse, "
        "rope_permutation(d, H).argsort().",
    ),
    ("kv_repeat", "tiled"): _Mistake(
        "key heads tiled instead of repeated in place (repeat instead of repeat_interleave)",
        "repeat_kv gives each key/value head to the g = H / Hkv query heads next to it: query "
        "head h reads key head h // g, so the key heads go 0, 0, 1, 1, ... for g = 2. Tiling "
        "(.repeat(g, 1, 1)) gives 0, 1, 0, 1 and pairs queries with another group's keys: "
        "use repeat_interleave(g, dim=0) on the (Hkv, d, D) heads.",
    ),
    # the mask lab (mha_lib.exercises.modern)
    ("padding_side", "right"): _Mistake(
        "left padding read as right padding: the last keys hidden instead of the first",
        "Valid lengths (d2l's mask) keep the keys before them, which suits padding on the "
        "right. A left-padded prompt b has its padding at positions 0 .. pad_lens[b] - 1: keep "
        "the keys j >= pad_lens[b].",
    ),
    ("pad_start", "one_more"): _Mistake(
        "off by one: the first real token is hidden too",
        "The first real position is pad_lens[b] itself: keep j >= pad_lens[b], not "
        "j > pad_lens[b] (the first real query then sees nothing at all).",
    ),
    ("causal", "forgotten"): _Mistake(
        "causality forgotten: a query sees the keys after it",
        "A decoder's query i sees the keys j <= i only. Combine the padding mask with the "
        "causal one using &, e.g. torch.ones(L, L, dtype=torch.bool).tril().",
    ),
    ("mask_convention", "inverted"): _Mistake(
        "True = masked instead of True = may attend",
        "F.scaled_dot_product_attention keeps a key where a boolean attn_mask is True, the "
        "opposite of nn.MultiheadAttention's key_padding_mask. Invert with ~ "
        "(mha_lib.mask_conventions.padding_to_keep).",
    ),
    ("mask_dtype", "float01"): _Mistake(
        "a 0/1 float mask: added to the scores, it hides nothing",
        "A float attn_mask is added to the scores, so 0 and 1 hide no key. Return the boolean "
        "mask (dtype torch.bool), or the additive 0 / -inf (mha_lib.masking.keep_to_bias).",
    ),
    **_TODAY_MISTAKES,  # chapters 12c and 12d: mha_lib.exercises._catalogue_today
}
