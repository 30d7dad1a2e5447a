"""The chapter 12 story model exported to transformers: the same logits, the same greedy tokens."""

import pytest
import torch

from mha_lib import lm
from mha_lib.lm_transformers import StoryGPTNeoXForCausalLM, to_transformers
from mha_lib.stories import Tokenizer, sample_stories


@pytest.fixture(scope="module")
def shipped():
    model = lm.load_pretrained()
    return (model[0] if isinstance(model, tuple) else model).eval()


def _prompts():
    tok = Tokenizer()
    return [tok.encode(story.text)[:n] for story, n in zip(sample_stories(3, 5), (5, 9, 14))]


def test_logits_and_greedy_tokens(shipped):
    hf = to_transformers(shipped)
    ids = torch.tensor([_prompts()[2]])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, shipped(ids), rtol=0, atol=1e-4)
    for prompt in _prompts():
        ours = shipped.generate([prompt], 8)[0]
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                          attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        assert out[0, len(prompt):].tolist() == ours


def test_grouped_query_model_and_saved_copy(tmp_path):
    torch.manual_seed(0)
    model = lm.StoryLM(lm.Config(d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=48)).eval()
    hf = to_transformers(model)
    ids = torch.tensor([_prompts()[1]])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids), rtol=0, atol=1e-5)
    hf.save_pretrained(tmp_path)
    loaded = StoryGPTNeoXForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids), rtol=0, atol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="model"):
        to_transformers(torch.nn.Linear(2, 2))
