"""Regenerate the checkpoints of :mod:`mha_lib.exercises.find_the_head` (not needed to use them).

``python -m mha_lib.exercises._find_the_head_build [DIR] [--only NAME ...] [--overwrite]`` trains
each challenge's model from its config on one thread, moves its heads with a seeded permutation
(:func:`_permute_heads`, exact: the permuted model computes the same logits), and saves it with
its experiment's ``save``, with its training time and no loss curves. The permutation is not
stored: no file holds an answer key, and the grader measures the heads at grading time.

Shape legend
    H   query heads per layer; Hkv key/value heads; g = H / Hkv; d head size; D = H*d
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from mha_lib import digits, induction, lm
from mha_lib.exercises.find_the_head import DATA_DIR
from mha_lib.masks import Mask
from mha_lib.training import TrainResult, train_loop

__all__: list[str] = []

_EXPERIMENTS = {"digits": digits, "induction": induction, "lm": lm}
_SPECS = {
    # name: (experiment, config changes, seed of the head permutation)
    "digits-h4": ("digits", {"num_heads": 4, "seed": 1}, 3511),
    "digits-h8": ("digits", {"num_heads": 8, "seed": 4}, 3512),
    "induction-2l": ("induction", {"seed": 1, "eval_every": 500}, 3513),
    "induction-2l-h3": ("induction", {"num_heads": 3, "d_model": 48, "seed": 2, "eval_every": 500}, 3516),
    "induction-3l": ("induction", {"num_layers": 3, "seed": 1, "eval_every": 500}, 3514),
    "induction-alt": ("induction", {"position_infused": False, "seed": 2, "steps": 20000, "lr": 3e-3,
                                    "eval_every": 5000}, 3515),  # and layer 0 blind to key i - 1
    "story-mha": ("lm", {"seed": 3}, 3517),
    "story-gqa": ("lm", {"num_kv_heads": 2, "seed": 4}, 3518),
}
"""Each challenge's experiment, its config (changes to the experiment's ``Config()``) and the
seed of its head permutation."""


class _NoPreviousKey(Mask):
    """Query i may see the keys j <= i except j = i - 1: in layer 0 while ``induction-alt`` trains.

    Without a previous-token head, chapter 8's circuit cannot form; the alternative can: a
    layer-0 head finds the earlier copy of the current token and copies its position (values
    carry positions when ``position_infused`` is off), and a layer-1 head attends to that
    position plus one. The shipped model has no such mask: it is a plain AttentionOnlyTransformer.
    """

    def _keep(self, ix):
        i, j = ix.pairs()
        return (j <= i) & (j != i - 1)

    def _tiles(self, ix):
        q_lo, q_hi, k_lo, k_hi = ix.position_ranges()
        return k_lo > q_hi, torch.zeros_like(k_lo > q_hi)  # hidden: the future; no tile is surely full


def _train_without_previous_key(config: induction.Config) -> TrainResult:
    """:func:`mha_lib.induction.train`'s initialisation, batches and loss, with layer 0 unable to see key i - 1."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = induction.AttentionOnlyTransformer(config)
    hide = model.layers[0].register_forward_pre_hook(
        lambda layer, args, kwargs: (args, {**kwargs, "mask": _NoPreviousKey()}), with_kwargs=True)
    data = torch.Generator().manual_seed(config.seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = train_loop(model, induction._batch_loss, induction._batches(config, data), optimizer,
                         steps=config.steps, num_threads=config.num_threads, progress=False)
    hide.remove()
    return TrainResult(model.eval(), config, history)


def _attention_layers(model: nn.Module) -> list[nn.Module]:
    """The attention layers of a digits, induction or story model, in order."""
    if isinstance(model, digits.DigitAttentionModel):
        return [model.attention]
    if isinstance(model, induction.AttentionOnlyTransformer):
        return list(model.layers)
    return [block.attention for block in model.blocks]


@torch.no_grad()
def _permute_layer(layer: nn.Module, generator: torch.Generator) -> list[int]:
    """Move the heads of one attention layer: new head ``i`` is old head ``order[i]``; returns ``order``.

    Grouped-query layers keep their groups: the key/value heads are permuted, and the query
    heads of each group move with their group (and are shuffled inside it).
    """
    H = layer.num_heads
    Hkv = getattr(layer, "num_kv_heads", H)
    g, d = H // Hkv, layer.W_q.out_features // H
    kv_order = torch.randperm(Hkv, generator=generator).tolist()
    order = [kv * g + int(r) for kv in kv_order for r in torch.randperm(g, generator=generator)]

    def rows(linear: nn.Linear, heads: list[int]) -> None:  # the output rows of each head, (heads*d, in)
        index = torch.tensor([h * d + i for h in heads for i in range(d)])
        linear.weight.copy_(linear.weight[index])
        if linear.bias is not None:
            linear.bias.copy_(linear.bias[index])

    rows(layer.W_q, order)
    rows(layer.W_k, kv_order)
    rows(layer.W_v, kv_order)
    columns = torch.tensor([h * d + i for h in order for i in range(d)])
    layer.W_o.weight.copy_(layer.W_o.weight[:, columns])  # (D, H*d): the input columns of each head
    return order


def _permute_heads(model: nn.Module, seed: int) -> list[list[int]]:
    """Permute the heads of every attention layer of ``model`` in place; returns each layer's order."""
    generator = torch.Generator().manual_seed(seed)
    return [_permute_layer(layer, generator) for layer in _attention_layers(model)]


def _build(name: str, out_dir: Path, overwrite: bool) -> Path:
    kind, changes, permutation_seed = _SPECS[name]
    experiment = _EXPERIMENTS[kind]
    path = out_dir / f"{name}.pt"
    if path.exists() and not overwrite:
        raise ValueError(f"path {str(path)!r} exists: pass --overwrite to replace it")
    config = dataclasses.replace(experiment.Config(), **changes)
    if name == "induction-alt":
        result = _train_without_previous_key(config)
    else:
        result = experiment.train(config, progress=False)
    _permute_heads(result.model, permutation_seed)
    keep = ("cpu_seconds", "torch_version", "vocab", "test_accuracy")
    history = {k: v for k, v in result.history.items() if k in keep}  # no loss curves: small files
    experiment.save(TrainResult(result.model, config, history), path, overwrite=overwrite)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mha_lib.exercises._find_the_head_build [DIR] [--only NAME ...] [--overwrite]``.

    DIR defaults to the shipped checkpoints' :data:`~mha_lib.exercises.find_the_head.DATA_DIR`;
    an existing file is never replaced without ``--overwrite``.
    """
    parser = argparse.ArgumentParser(prog="python -m mha_lib.exercises._find_the_head_build",
                                     description="Train, permute and save the find-the-head checkpoints.")
    parser.add_argument("out_dir", type=Path, nargs="?", default=DATA_DIR)
    parser.add_argument("--only", nargs="*", choices=sorted(_SPECS), default=sorted(_SPECS))
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    existing = [name for name in args.only if (args.out_dir / f"{name}.pt").exists()]
    if existing and not args.overwrite:
        parser.error(f"{', '.join(existing)} exist in {args.out_dir}: pass --overwrite to replace them")
    torch.set_num_threads(1)
    for name in args.only:
        path = _build(name, args.out_dir, args.overwrite)
        ckpt = torch.load(path, weights_only=True)
        parameters = sum(t.numel() for t in ckpt["state_dict"].values())
        print(f"{name}: {path.stat().st_size / 1024:.0f} kB, {parameters} parameters, "
              f"{ckpt['extra']['cpu_seconds']:.1f} s CPU", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
