"""The one command line of the benchmarks: ``python -m mha_lib.bench [cost|modern|masks|flex|gpu] [options]``.

``cost`` (the default, chapter 6) prints the table of paired time ratios of our two paths to
the fused-kernel limit and to ``nn.MultiheadAttention``, the guards' share of a fast-path
forward and the operations they add to one, and the peak memory of both paths;
``modern`` prints the tables of chapters 9-11 (KV cache, grouped-query attention, tiling);
``masks`` where masks save work; ``flex`` the FlexAttention route against SDPA and tiled
attention; ``gpu`` the layer and windowed attention on a GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from mha_lib._checks import check_positive_int, check_positive_number
from mha_lib.bench import cost, flex, gpu, masks, modern, ops
from mha_lib.bench.cost import Sizes
from mha_lib.timing import loglog_slope

_PROG = "python -m mha_lib.bench"

#: The sizes of the full table, (B, Lq, Lk, D, H).
_FULL_SIZES = (Sizes(8, 128, 128, 256, 8), Sizes(8, 512, 512, 512, 8), Sizes(2, 1024, 2048, 512, 8))
#: Small sizes for ``--quick``.
_QUICK_SIZES = (Sizes(4, 64, 64, 128, 4), Sizes(2, 256, 256, 128, 4))

#: Per command: repeats and min_time without --quick (with it: 3 and 0.01).
_DEFAULTS = {"cost": (9, 0.2), "modern": (5, 0.1), "masks": (3, 0.05), "flex": (3, 0.05), "gpu": (30, 0.05)}

_COMMANDS = {
    "cost": "chapter 6 (the default): time ratios of MultiHeadAttention's fast path to the "
    "fused-kernel limit and to nn.MultiheadAttention, of its weights path to nn.MultiheadAttention "
    "with weights; the guards' share of a fast-path forward and the operations they add to one; "
    "peak memory of both paths",
    "modern": "chapters 9-11: decoding with and without a KV cache, KV cache memory with "
    "grouped-query attention, peak memory and speed of tiled (online-softmax) attention",
    "masks": "where masks save work: tiled attention that skips hidden tiles (sliding window "
    "256, causal) beside SDPA with the same dense mask and FlexAttention; tiles computed, "
    "peak memory",
    "flex": "the FlexAttention route (backend='flex') against SDPA with the dense mask and tiled "
    "attention: windows, documents, sinks, chunked, ALiBi, soft-capping; the compile cost",
    "gpu": "on a GPU, bfloat16: the fast path against Linear + bare SDPA and nn.MultiheadAttention "
    "(no mask and causal, kernels per forward); sliding-window attention against SDPA with the "
    "dense mask and FlexAttention",
}

_EXAMPLES = f"""\
examples:
  {_PROG}                   chapter 6's table at the full sizes (minutes)
  {_PROG} --quick           the same at small sizes (seconds)
  {_PROG} modern --quick    the tables of chapters 9-11 at small sizes
  {_PROG} masks --quick     tiled attention under masks at a small length
  {_PROG} flex --lengths 2048 8192   the FlexAttention route (minutes: it compiles)
  {_PROG} gpu               the GPU tables (a CUDA device; --device cpu for a trial run)
  {_PROG} cost --help       the options of one command (cost, modern, masks, gpu)

Timings are paired ratios, median [min-max]: the contenders run in turns inside every
repetition, so that load from other programs slows both sides of a ratio alike.
"""


# --- argument types (argparse turns their ArgumentTypeError into a usage error) ---------------


def _parse_min_time(text: str) -> float:
    try:
        return check_positive_number(float(text), "min_time")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _parse_positive_int(text: str) -> int:
    try:
        return check_positive_int(int(text), "the value")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None


def _parse_sizes(text: str) -> Sizes:
    try:
        values = [int(v) for v in text.replace("(", "").replace(")", "").split(",")]
        return Sizes(*values)
    except (TypeError, ValueError) as err:
        raise argparse.ArgumentTypeError(
            f"a size is B,Lq,Lk,D,H (five integers, H dividing D), got {text!r}: {err}"
        ) from None


def _add_common(parser: argparse.ArgumentParser, repeats: int, min_time: float, *,
                memory: str) -> None:
    """The options both commands have."""
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--repeats", type=_parse_positive_int, default=None,
                        help=f"ratios per cell (default {repeats}, 3 with --quick)")
    parser.add_argument("--min-time", type=_parse_min_time, default=None,
                        help=f"seconds the slowest contender runs per repetition "
                        f"(default {min_time}, 0.01 with --quick)")
    parser.add_argument("--memory-lengths", type=_parse_positive_int, nargs="*", default=None,
                        metavar="L", help=f"{memory}; none to skip")
    parser.add_argument("--threads", type=_parse_positive_int, default=None,
                        help="torch.set_num_threads (default: PyTorch's)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        usage=f"{_PROG} [-h] [cost | modern | masks | flex | gpu] [options]",
        description="Benchmarks of multi-head attention (on this CPU; gpu: on a GPU), printed as tables.\n"
        "Without a command, runs 'cost' with the options given.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", title="commands",
                                     metavar="{cost,modern,masks,flex,gpu}")
    c = commands.add_parser("cost", prog=f"{_PROG} cost", help=_COMMANDS["cost"],
                            description=_COMMANDS["cost"])
    c.add_argument("--size", type=_parse_sizes, action="append", metavar="B,Lq,Lk,D,H",
                   help="a problem size (repeatable); default: the three sizes of the chapter")
    _add_common(c, *_DEFAULTS["cost"],
                memory="sequence lengths of the memory table (default 256 512 1024 2048)")
    m = commands.add_parser("modern", prog=f"{_PROG} modern", help=_COMMANDS["modern"],
                            description=_COMMANDS["modern"])
    m.add_argument("--decode-lengths", type=_parse_positive_int, nargs="*", default=None,
                   metavar="L", help="tokens to decode (default 64 128 256 512); none to skip")
    _add_common(m, *_DEFAULTS["modern"],
                memory="lengths of the tiled-attention tables (default 512 1024 2048 4096)")
    k = commands.add_parser("masks", prog=f"{_PROG} masks", help=_COMMANDS["masks"],
                            description=_COMMANDS["masks"])
    k.add_argument("--lengths", type=_parse_positive_int, nargs="+", default=None, metavar="L",
                   help="sequence lengths (default 8192; 1024 with --quick)")
    k.add_argument("--no-flex", action="store_true",
                   help="leave out FlexAttention (torch.compile takes minutes the first time)")
    _add_common(k, *_DEFAULTS["masks"], memory="(unused)")
    f = commands.add_parser("flex", prog=f"{_PROG} flex", help=_COMMANDS["flex"],
                            description=_COMMANDS["flex"])
    f.add_argument("--lengths", type=_parse_positive_int, nargs="+", default=None, metavar="L",
                   help="sequence lengths (default 2048 8192; 256 with --quick)")
    f.add_argument("--route-alone", type=_parse_positive_int, nargs="*", default=(), metavar="L",
                   help="lengths at which only the route is timed (the dense baselines too slow)")
    _add_common(f, *_DEFAULTS["flex"], memory="(unused)")
    u = commands.add_parser("gpu", prog=f"{_PROG} gpu", help=_COMMANDS["gpu"], description=_COMMANDS["gpu"])
    u.add_argument("--device", default="cuda", help="where to run (default cuda; cpu for a trial run)")
    u.add_argument("--no-flex", action="store_true", help="leave out FlexAttention")
    _add_common(u, *_DEFAULTS["gpu"], memory="(unused)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mha_lib.bench``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*_COMMANDS, "-h", "--help"):
        argv.insert(0, "cost")  # the default command
    args = _parser().parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    default_repeats, default_min_time = _DEFAULTS[args.command]
    repeats = args.repeats or (3 if args.quick else default_repeats)
    min_time = args.min_time if args.min_time is not None else (
        0.01 if args.quick else default_min_time)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"median [min-max] of {repeats} paired time ratios",
        flush=True,
    )
    run = {"cost": _run_cost, "modern": _run_modern, "masks": _run_masks, "flex": _run_flex,
           "gpu": _run_gpu}[args.command]
    run(args, repeats, min_time)
    return 0


def _progress(message: str) -> None:
    print(f"\r{message:<60}", end="", file=sys.stderr, flush=True)


def _clear_progress() -> None:
    print("\r" + " " * 60 + "\r", end="", file=sys.stderr, flush=True)


def _run_cost(args: argparse.Namespace, repeats: int, min_time: float) -> None:
    """Chapter 6: the ratio table with its targets, then the memory table."""
    sizes = args.size or (_QUICK_SIZES if args.quick else _FULL_SIZES)
    lengths = args.memory_lengths
    if lengths is None:
        lengths = [64, 128] if args.quick else [256, 512, 1024, 2048]
    mem = dict(B=2, D=64, H=4) if args.quick else dict(B=2, D=256, H=8)
    rows = cost.benchmark(sizes, repeats=repeats, min_time=min_time, progress=_progress)
    _clear_progress()
    print(cost.format_table(rows, targets=True), flush=True)
    _progress("guards ...")
    grows = cost.guard_table(sizes, repeats=repeats, min_time=min_time)
    _clear_progress()
    print()
    print(cost.format_guard_table(grows), flush=True)
    print()
    print("Compute operations of one self-attention forward, (B, L, D, H) = (2, 6, 16, 2):")
    print(ops.format_guard_op_table(ops.guard_op_table(B=2, L=6, D=16, H=2)), flush=True)
    if lengths:
        _progress("memory ...")
        mrows = cost.memory_table(lengths, **mem)
        _clear_progress()
        print()
        print(cost.format_memory_table(mrows, **mem))


def _run_modern(args: argparse.Namespace, repeats: int, min_time: float) -> None:
    """Chapters 9-11: decoding, KV cache memory, tiled attention's memory and speed."""
    quick = args.quick
    decode = args.decode_lengths
    if decode is None:
        decode = [16, 32] if quick else [64, 128, 256, 512]
    memory = args.memory_lengths
    if memory is None:
        memory = [128, 256] if quick else [512, 1024, 2048, 4096]
    dec = dict(B=1, D=32, H=4) if quick else dict(B=1, D=256, H=8)
    if decode:
        rows = modern.decoding_table(decode, repeats=repeats, min_time=min_time, **dec)
        print()
        print(modern.format_decoding_table(rows, **dec), flush=True)
        if len(set(decode)) >= 2:
            slopes = {name: loglog_slope(decode, [r["seconds"][name] for r in rows])
                      for name in ("cached", "recompute")}
            print(f"log-log slope of total time against L: cached {slopes['cached']:.2f}, "
                  f"recompute {slopes['recompute']:.2f}")
        kv = dict(B=1, D=dec["D"], H=dec["H"])
        heads = sorted({dec["H"], max(dec["H"] // 4, 1), 1}, reverse=True)
        crows = modern.cache_memory_table([L * 8 for L in decode], kv_heads=heads, **kv)
        print()
        print(modern.format_cache_memory_table(crows, **kv), flush=True)
    if memory:
        fl = dict(B=2, d=32, block_size=32) if quick else dict(B=4, d=64, block_size=64)
        mrows = modern.flash_memory_table(memory, **fl)
        print()
        print(modern.format_flash_memory_table(mrows, **fl), flush=True)
        srows = modern.flash_speed_table(memory[:2] if quick else memory[:3], repeats=repeats,
                                         min_time=min_time, **fl)
        print()
        print(modern.format_flash_speed_table(srows, **fl), flush=True)


def _run_masks(args: argparse.Namespace, repeats: int, min_time: float) -> None:
    """Where masks save work: tiled attention beside SDPA (and FlexAttention) under masks."""
    lengths = args.lengths or ([1024] if args.quick else [8192])
    sizes = dict(B=1, d=64, block_size=128)
    flex = not args.no_flex
    if flex:
        _progress("compiling FlexAttention ...")
        print(masks.flex_status(), file=sys.stderr)
    rows = masks.mask_table(lengths=lengths, repeats=repeats, min_time=min_time, flex=flex,
                            progress=_progress, **sizes)
    _clear_progress()
    print()
    print(masks.format_mask_table(rows, **sizes), flush=True)


def _run_flex(args: argparse.Namespace, repeats: int, min_time: float) -> None:
    """The FlexAttention route against SDPA and tiled attention, and its compile cost."""
    lengths = args.lengths or ([256] if args.quick else [2048, 8192])
    rows = []
    for L in lengths:
        rows += flex.flex_table([L], repeats=repeats, min_time=min_time, progress=_progress,
                                baselines=L not in args.route_alone)
    _clear_progress()
    print()
    print(flex.format_flex_table(rows, d=64), flush=True)


def _run_gpu(args: argparse.Namespace, repeats: int, min_time: float) -> None:
    """The layer against Linear + SDPA and nn.MultiheadAttention, and windowed attention."""
    try:
        device = gpu.check_device(args.device)
    except ValueError as err:
        raise SystemExit(f"{_PROG} gpu: {err}") from None
    quick = args.quick
    print(gpu.device_line(device), flush=True)
    sizes = ((2, 128, 128, 4), (4, 256, 256, 8)) if quick else gpu.SIZES
    rows = gpu.layer_table(device, sizes, repeats=repeats, min_time=min_time, progress=_progress)
    _clear_progress()
    print()
    print(gpu.format_layer_table(rows), flush=True)
    window = dict(L=1024, window=64) if quick else {}
    print()
    print(gpu.format_window_table(gpu.window_table(device, repeats=repeats, min_time=min_time,
                                                   flex=not args.no_flex, **window)))


if __name__ == "__main__":
    sys.exit(main())
