"""The classic mistakes of chapters 12c (today's attention, :mod:`mha_lib.exercises.today`)
and 12d (the delta rule, :mod:`mha_lib.exercises.linear`): a part of
:data:`mha_lib.exercises.catalogue.MISTAKES`, kept here so that each file stays under the
length limit. Their families are in the catalogue's ``FAMILIES``."""

from __future__ import annotations

from mha_lib.exercises._mistake import _Mistake

_TODAY_MISTAKES: dict[tuple[str, str], _Mistake] = {
    # today's attention, chapter 12c (mha_lib.exercises.today)
    ("window", "one_more"): _Mistake(
        "window off by one: window + 1 keys instead of window",
        "The window counts the query's own key: with window 3, query 10 sees keys 8, 9 and 10. "
        "Keep j > i - window (not j >= i - window), as mha_lib.masks.sliding_window does.",
    ),
    ("window", "one_less"): _Mistake(
        "window off by one: window - 1 keys instead of window",
        "With window 3, query 10 sees the three keys 8, 9 and 10, itself included: keep "
        "i - window < j <= i. Look for a `+ 1` in the lower bound.",
    ),
    ("window", "without_self"): _Mistake(
        "the window without the query's own key: the `window` keys before it",
        "The window counts the query itself, as a decoder's query always sees its own token: "
        "keep i - window < j <= i, not i - window <= j < i.",
    ),
    ("sink_keys", "not_causal"): _Mistake(
        "sinks not causal: an early query sees sink keys after it",
        "A sink is still a key of the past: with 4 sinks, query 0 sees key 0 only, not keys 1 to "
        "3. Keep (j < num_sinks) & (j <= i), as mha_lib.masks.sinks does, then join it to the "
        "window with |.",
    ),
    ("sink_keys", "in_window"): _Mistake(
        "the sinks counted inside the window: window - num_sinks recent keys",
        "Here the sinks come on top of the window, as in KVCache(window=, num_sinks=): each "
        "query sees its `window` most recent keys and the first num_sinks keys, up to "
        "window + num_sinks keys in all. Do not shorten the window by the sinks.",
    ),
    ("sink_keys", "and"): _Mistake(
        "window and sinks joined with & instead of |",
        "A key is kept when it is in the window *or* among the first num_sinks keys: join the "
        "two masks with |, as sliding_window(w) | sinks(n) does. With & only the sinks that lie "
        "inside the window are left.",
    ),
    ("sink_keys", "forgotten"): _Mistake(
        "the sinks forgotten: the window alone",
        "Every query also sees the first num_sinks keys at or before it: add "
        "(j < num_sinks) & (j <= i) to the window with |.",
    ),
    ("window_causal", "forgotten"): _Mistake(
        "no causal part: a query sees the keys after it",
        "The window is i - window < j <= i: keep the upper bound j <= i as well, or every query "
        "sees the next tokens, the ones it has to predict.",
    ),
    ("scale", "sqrt_r"): _Mistake(
        "scaling by 1/sqrt(r), the latent's size, instead of 1/sqrt(d)",
        "Folding W_uk into the queries moves the product into the latent's r coordinates but "
        "changes no number: the scores are still q_h . k_h / sqrt(d), d the head size. "
        "(LatentAttention's absorbed form multiplies its queries by sqrt((r + 1) / d) because "
        "its kernel divides by the size of the latent key, r + 1.)",
    ),
    ("uk_heads", "interleaved"): _Mistake(
        "W_uk's rows of head h taken as h, h + H, h + 2H, ... instead of the block h*d .. h*d + d - 1",
        "split_heads gives head h the d consecutive outputs h*d .. h*d + d - 1 of W_uk: reshape "
        "W_uk (H*d, r) to (H, d, r), not to (d, H, r).",
    ),
    ("uk_layout", "in_out"): _Mistake(
        "W_uk read as (r, H*d), (in, out), instead of nn.Linear's (out, in) = (H*d, r)",
        "nn.Linear stores its weight (out_features, in_features) and computes c @ W.T, so W_uk "
        "is (H*d, r). A reshape as if it were (r, H, d) (a view where a transpose belongs) "
        "scrambles it; W_uk.reshape(H, d, r)[h] is head h's (d, r) block, and q_h @ block is "
        "the head's query in the latent's coordinates, (Lq, r).",
    ),
    ("uk_layout", "transposed_view"): _Mistake(
        "W_uk.T reshaped to (H, d, r): a view where the axes must move",
        "W_uk.T is (r, H*d); reshape reads its numbers in memory order, so .reshape(H, d, r) "
        "scrambles the heads. Reshape W_uk itself, W_uk.reshape(H, d, r), or move the axes "
        "after the reshape: W_uk.T.reshape(r, H, d).permute(1, 2, 0).",
    ),
    ("gate_fn", "none"): _Mistake(
        "no sigmoid: the gate logits multiply the heads as they are",
        "A gate is sigmoid(logit), between 0 and 1: it can only shrink a head's output, down to "
        "silence. Apply torch.sigmoid to gate_logits first, then multiply.",
    ),
    ("gate_fn", "softmax_heads"): _Mistake(
        "a softmax over the heads instead of a sigmoid per gate",
        "Each gate is its own sigmoid: the heads share no budget, so several can be open at "
        "once, or none. torch.sigmoid(gate_logits), not a softmax over the heads.",
    ),
    ("gate_place", "after_W_o"): _Mistake(
        "the gate applied after W_o instead of to each head's output before it",
        "The gate scales head h's output (B, H, Lq, d) before merge_heads and W_o, as "
        "MultiHeadAttention.forward does (gate_heads, then W_o). After W_o every feature mixes "
        "all the heads, and a gate there cannot silence one head.",
    ),
    ("gate_axes", "reshape"): _Mistake(
        "gates reshaped from (B, Lq, ...) to (B, H, Lq, ...) where a transpose belongs",
        "reshape keeps the numbers in memory order, so it hands head h the gates of other "
        "queries. Move the axis: sigmoid(gate_logits).transpose(1, 2)[..., None] for head-wise "
        "gates (B, Lq, H), split_heads(gates, H) for element-wise ones (B, Lq, H*d).",
    ),
    ("gate_axes", "tiled"): _Mistake(
        "a head's gate tiled over the features (repeat) instead of repeated in place (repeat_interleave)",
        "In the merged output (B, Lq, H*d) head h owns the features h*d .. h*d + d - 1: repeat "
        "each head's gate d times in place, gates.repeat_interleave(d, dim=-1). "
        ".repeat(1, 1, d) gives feature f the gate of head f % H.",
    ),
    ("gate_axes", "first_head"): _Mistake(
        "head 0's gate applied to every head",
        "Each head has its own gate: head h of query i is scaled by sigmoid(gate_logits[b, i, "
        "h]). Indexing gate_logits[..., :1] (or [..., 0, None]) broadcasts head 0's gate to all.",
    ),
    # linear attention and the delta rule, chapter 12d (mha_lib.exercises.linear)
    ("delta_beta", "forgotten"): _Mistake(
        "beta forgotten: the state overwritten at the key instead of corrected by a step beta",
        "The delta rule moves the value stored at k a fraction beta of the way toward v: "
        "S + beta k^T (v - k S). Without beta (beta = 1) each token replaces what the state "
        "returned for its key; multiply the error (v - k S) by beta before writing it.",
    ),
    ("delta_read", "S_k"): _Mistake(
        "the state read as S k^T instead of k S",
        "In the book's convention (row vectors, as mha_lib.linear) the state maps a key to a "
        "value from the left: what it holds at k is k S, (1, d) @ (d, d), i.e. "
        "(k[..., None, :] @ S)[..., 0, :]. S @ k[..., None] reads the transposed state.",
    ),
    ("delta_read", "none"): _Mistake(
        "no correction: S + beta k^T v, linear attention's write",
        "The delta rule writes the error, not the value: subtract what the state already "
        "returns for the key, v - k S, so a key written twice holds its latest value instead "
        "of the sum of both.",
    ),
    ("delta_write", "swapped"): _Mistake(
        "the outer product error^T k instead of k^T error",
        "The state maps keys (rows) to values (columns): write k[..., :, None] * "
        "error[..., None, :], (d, 1) times (1, d), so that k S' returns the corrected value.",
    ),
    ("delta_output", "old_state"): _Mistake(
        "the output read from the state before the update",
        "The token's own key and value are part of its past: update the state first, then "
        "read it with the query, o = q S', as delta_recurrent does.",
    ),
    ("chunk_system", "with_diagonal"): _Mistake(
        "the diagonal kept in the triangular system: tril(beta K K^T) instead of tril(.., -1)",
        "Token t's correction u_t depends on the corrections of the tokens *before* it: the "
        "system is I + tril(beta K K^T, diagonal=-1). With the diagonal, each token also "
        "subtracts its own correction.",
    ),
    ("chunk_system", "no_beta"): _Mistake(
        "beta left out of the system: I + tril(K K^T, -1) instead of I + tril(beta K K^T, -1)",
        "Unrolled, u_t = beta_t (v_t - k_t S - sum_{j<t} (k_t . k_j) u_j): beta_t multiplies "
        "the sum too, so row t of the strict triangle is beta_t times k_t . k_j.",
    ),
    ("chunk_output", "strict"): _Mistake(
        "the strict triangle in the output: each token's own correction missed",
        "o_t = q_t S_t reads the state after token t's own update: O = Q S + tril(Q K^T) U "
        "with the diagonal (tril(.., 0)), not tril(.., -1).",
    ),
    ("chunk_output", "no_state"): _Mistake(
        "the state before the chunk forgotten in the output",
        "Each output reads the state the chunk started from as well as the chunk's own "
        "corrections: O = Q S + tril(Q K^T) U.",
    ),
    ("chunk_state", "not_carried"): _Mistake(
        "the state before the chunk not carried on: K^T U instead of S + K^T U",
        "The chunk adds its corrections to the state it started from: the next chunk starts "
        "from S + K^T U.",
    ),
    # designing a threat run (mha_lib.exercises.judgement)
    ("design_seeds", "too_few"): _Mistake(
        "fewer than three seeds: the spread is unknown",
        "One or two seeds cannot tell a difference between variants from a difference between "
        "seeds. Run every variant from the same three seeds (or more) and compare the ranges.",
    ),
    ("design_steps", "unequal"): _Mistake(
        "the variants are not trained alike: different steps",
        "A variant given more steps may win for that reason alone. Give every variant the same "
        "steps (one number, not one per variant), the same data and the same seeds.",
    ),
    ("design_params", "unstated"): _Mistake(
        "the variants differ in parameters and the spec does not say how",
        "Compare variants with equal parameters, or name the difference in spec['params'] (e.g. "
        "'W_k and W_v shrink to D x d') so that a reader can weigh it.",
    ),
    ("design_lr", "single"): _Mistake(
        "one learning rate where the result depends on it",
        "Chapter 13's norm runs change with the learning rate. A claim about which variant "
        "trains better needs a sweep: list at least two learning rates in spec['lr'] and run "
        "the variants at each (norm_lr has 3e-3, 1e-2 and 3e-2).",
    ),
    ("design_conclusion", "beyond_spread"): _Mistake(
        "the conclusion does not follow from the spread over the seeds",
        "'a > b' follows only if a beats b on every seed, their ranges apart; 'a = b' only if "
        "their ranges overlap. Read the values per seed before writing the conclusion.",
    ),

}
