"""The shipped induction model read off its weights: the token-by-token circuits name the
previous-token head and the induction head that the attention scores and the ablation find."""

import torch

from mha_lib.circuits import copying_scores, diagonal_scores, token_k_composition, token_ov_circuits
from mha_lib.induction import head_scores, held_out_tokens, load_pretrained


def test_weights_single_out_the_heads_the_attention_scores_find():
    model = load_pretrained()
    scores = head_scores(model, held_out_tokens(128))
    prev_head, ind_head = int(scores.previous_token[0].argmax()), int(scores.induction[1].argmax())
    E, U = model.token_embedding.weight, model.unembedding.weight
    k_diagonal = diagonal_scores(token_k_composition(model.layers[0], model.layers[1], E))  # (H, H)
    copying = copying_scores(token_ov_circuits(model.layers[1], E, U))  # (H,)
    # the writer: the layer-0 head whose token table is diagonal, with a margin
    assert (k_diagonal.top_fraction[:, prev_head] >= 0.9).all()
    assert (k_diagonal.top_fraction[:, 1 - prev_head] <= 0.1).all()
    # the reader: keys read the previous-token head *and* the OV circuit copies
    chosen = [h for h in range(model.num_heads)
              if k_diagonal.top_fraction[h, prev_head] > 0.9 and copying[h] > 0.5]
    assert chosen == [ind_head]
    assert copying[ind_head] > 0.9 and copying[1 - ind_head] < -0.9
    assert torch.isfinite(k_diagonal.z_score).all()
