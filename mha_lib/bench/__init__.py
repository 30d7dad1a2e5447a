"""Benchmarks of the book, run from one command line: ``python -m mha_lib.bench``.

* :mod:`mha_lib.bench.cost`    chapter 6, "What attention costs": our two paths against the
  fused-kernel limit and ``nn.MultiheadAttention``, FLOP counts, peak memory, the guards' cost
* :mod:`mha_lib.bench.ops`     the operations a call dispatches, counted under the device or
  the CPU policy of the guards (:func:`~mha_lib.bench.ops.count_ops`)
* :mod:`mha_lib.bench.modern`  chapters 9-11: decoding with a KV cache, the cache's memory
  with grouped-query attention, peak memory and speed of tiled (online-softmax) attention

The measuring tools they share (paired timings and ratios, peak memory, log-log slopes) are in
:mod:`mha_lib.timing`; their figures in :mod:`mha_lib.viz.cost` and :mod:`mha_lib.viz.modern`.
"""

__all__ = []
