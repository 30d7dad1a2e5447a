"""The engine every checker shares: run the cases, compare with the reference, name the mistake.

A checker describes its exercise as a list of :class:`Case` (the student's call and, for any
*spec* of mistakes, what an implementation with those mistakes returns) and the settings its
mistake models know; :func:`run_cases` runs the student's code on every case, prints the
verdict and, when the outputs differ, the mistakes of :data:`mha_lib.exercises.MISTAKES` whose
models reproduce the student's outputs on every case (fewest mistakes first, at most two).

The student's code is called through :func:`call_student`: ``NotImplementedError`` becomes
:class:`NotImplementedYet`, anything else it raises (``SystemExit`` and ``GeneratorExit``
included; only ``KeyboardInterrupt``, the reader's stop button, goes through)
:class:`StudentError`, and torch's global settings it changes are put back. Whatever it returns
is read by :func:`run_cases` into a plain tensor, or named as the mistake it is (no tensor, a
tensor without values on the ``meta`` device, another device, a dtype that loses precision).
Every checker wears :func:`checker`, which refuses an answer that cannot be called and reports,
rather than raises, anything that still goes wrong: a checker never raises because of the code
it checks.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Callable

import torch
import torch.utils._device as _device
from torch import Tensor

from mha_lib.exercises.catalogue import MISTAKES

__all__ = [
    "MATMUL_ERRORS",
    "Case",
    "NotImplementedYet",
    "StudentError",
    "call_student",
    "checker",
    "long_tensor",
    "matmul_crash_hint",
    "run_cases",
    "scalar_cases",
    "seeded",
]


class NotImplementedYet(Exception):
    """The student's code raised ``NotImplementedError`` (the exercise's stub)."""


class StudentError(Exception):
    """The student's code raised; the message says what (``"TypeError: ..."``)."""


@dataclass
class Case:
    """One case: ``run_student(*inputs)`` gets copies of ``inputs``; ``variant(spec)`` computes
    what an implementation with the mistakes of ``spec`` returns (the reference for ``{}``)."""

    description: str
    run_student: Callable[..., object]
    variant: Callable[[dict], Tensor]
    inputs: tuple = ()
    exact: bool = False  # integer answers: compare exactly, not to a relative tolerance


def _describe(err: BaseException) -> str:
    """``"TypeError: message"`` for an exception of the student's code, even one whose
    ``__str__`` raises, cut to 300 characters."""
    try:
        text = str(err)
    except BaseException:  # noqa: BLE001  (a __str__ that raises is the student's too)
        text = "(a message that cannot be printed)"
    text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def _torch_settings_kept():
    """Put back the default dtype, the default device and the grad mode after student code:
    a ``torch.set_default_dtype(torch.float64)`` in an answer must not change the reference."""
    # The device set by torch.set_default_device, or None when none is: setting "cpu" back where
    # none was set would leave a device mode behind that every later torch call goes through.
    dtype, device, grad = torch.get_default_dtype(), _device.CURRENT_DEVICE, torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_default_device(device)
        torch.set_grad_enabled(grad)


def call_student(fn, *args, **kwargs):
    """Call student code; turn its exceptions into NotImplementedYet / StudentError.

    Everything ``fn`` raises is caught except ``KeyboardInterrupt``: ``SystemExit`` (an
    ``exit()`` in the answer), ``GeneratorExit`` and any other ``BaseException`` are the
    student's, and so is an exception raised while reading its message. A ``StudentError`` or
    ``NotImplementedYet`` from a nested call goes through unchanged.
    """
    try:
        with _torch_settings_kept():
            return fn(*args, **kwargs)
    except (NotImplementedYet, StudentError, KeyboardInterrupt):
        raise
    except NotImplementedError:
        raise NotImplementedYet from None
    except BaseException as err:  # noqa: BLE001  (the student's bug, reported rather than raised)
        raise StudentError(_describe(err)) from None


def checker(check: Callable[[object], bool]) -> Callable[[object], bool]:
    """Decorate a checker ``check(answer) -> bool`` so that it never raises because of ``answer``.

    An answer that cannot be called is reported at once; anything that escapes the checker
    (what the runner does not foresee, e.g. an answer that replaced a torch function the
    reference uses) is printed as the checker's verdict, and the checker returns False.
    ``KeyboardInterrupt`` goes through.
    """
    name = check.__name__

    @functools.wraps(check)
    def guarded(answer: object) -> bool:
        if not callable(answer):
            print(f"{name}: not yet right.\n- your answer is a {type(answer).__name__}, not a "
                  f"function or class that can be called: pass the function itself, "
                  f"`{name}(my_answer)`, not its result `{name}(my_answer(...))`.")
            return False
        try:
            with _torch_settings_kept():
                return bool(check(answer))
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001  (reported rather than raised)
            print(f"{name}: not yet right.\n- the checker could not finish: your code left "
                  f"something behind that the reference needs and it raised {_describe(err)}. "
                  "Restart the kernel, run your cells again, and make sure your code only "
                  "computes its result (no changes to torch or to the inputs).")
        return False

    guarded.is_checker = True  # type: ignore[attr-defined]
    return guarded


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: every checker draws its cases from one."""
    return torch.Generator().manual_seed(seed)


def long_tensor(values) -> Tensor:
    """Valid lengths as a ``torch.long`` tensor."""
    return torch.tensor(values, dtype=torch.long)


def _close(a: Tensor, b: Tensor, exact: bool = False) -> bool:
    if exact:
        return a.shape == b.shape and torch.equal(a, b)
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _specs(settings: dict[str, tuple[str, ...]], max_mistakes: int = 2):
    """Every spec with 1 .. max_mistakes wrong settings, fewest mistakes first."""
    names = list(settings)
    for n in range(1, max_mistakes + 1):
        for chosen in itertools.combinations(names, n):
            for values in itertools.product(*(settings[name] for name in chosen)):
                yield dict(zip(chosen, values))


def _diagnose(cases, outputs, settings) -> list[dict]:
    """The specs with the fewest mistakes whose outputs match the student's on every case."""
    found: list[dict] = []
    for spec in _specs(settings):
        if found and len(spec) > len(found[0]):
            break
        if all(_close(outputs[i], case.variant(spec), case.exact)
               for i, case in enumerate(cases) if i in outputs):
            found.append(spec)
    return found


def _describe_spec(spec: dict) -> list[str]:
    lines = []
    for key in spec.items():
        mistake = MISTAKES[key]
        lines.append(f"  * {mistake.title}.")
        lines.append(f"    How to find it: {mistake.hint}")
    return lines


#: Phrases of torch's errors for a matrix product whose sizes do not fit.
MATMUL_ERRORS = ("batch2", "cannot be multiplied", "size mismatch", "does not broadcast")


def matmul_crash_hint(message: str) -> list[str]:
    """A matrix product with mismatched sizes in attention code is usually Q @ K."""
    if not any(pattern in message for pattern in MATMUL_ERRORS):
        return []
    return ["  A matrix product got sizes that do not fit. If it is the scores:"] + _describe_spec(
        {"scores": "no_transpose"})


def _int_output(fn: Callable, *args) -> object:
    """``fn(*args)``; a number (int, float, numpy scalar; not a bool) as a float64 tensor, an
    integer too large for a float as infinity (it is not the answer)."""
    out = call_student(fn, *args)
    if isinstance(out, bool) or not isinstance(out, numbers.Real):
        return out
    try:
        value = float(out)
    except OverflowError:
        value = math.inf if out > 0 else -math.inf
    return torch.tensor(value, dtype=torch.float64)


def scalar_cases(fn: Callable, configs, describe: str, variant: Callable) -> list[Case]:
    """Cases of an exercise whose answer is one number: ``fn(*config)`` against
    ``variant(*config, spec)``, compared exactly; ``describe.format(*config)`` names a case."""
    return [Case(describe.format(*config),
                 run_student=lambda config=config: _int_output(fn, *config),
                 variant=lambda spec, config=config: torch.tensor(float(variant(*config, spec)),
                                                                  dtype=torch.float64),
                 exact=True)
            for config in configs]


class _WrongResult(Exception):
    """What is wrong with the kind of result the student's code returned (not its numbers)."""


def _read_result(out: object, expected: Tensor, case: Case) -> Tensor:
    """The student's result as a plain dense tensor of ``expected``'s dtype, or a
    :class:`_WrongResult` saying what kind of thing came instead.

    Accepted: a tensor (or a tuple whose first entry is one, ``(output, weights)``) on
    ``expected``'s device; for an exact (integer) answer any real dtype, otherwise a
    floating-point dtype at least as precise as the inputs' (float64 for float32 is fine).
    """
    exact = case.exact
    floor = expected.dtype  # the least precision accepted: the reference's or the inputs'
    for x in case.inputs:
        if x.is_floating_point() and torch.finfo(x.dtype).eps > torch.finfo(floor).eps:
            floor = x.dtype
    try:
        if isinstance(out, tuple) and len(out) > 0 and isinstance(out[0], Tensor):
            out = out[0]  # (output, weights): compare the output
        if not isinstance(out, Tensor):
            raise _WrongResult(f"returned {type(out).__name__}, not a tensor (a missing `return`?)")
        with torch._C.DisableTorchFunctionSubclass():  # a subclass's own torch functions stay out
            out = torch.Tensor.as_subclass(out, Tensor).detach()
            if out.is_meta:
                raise _WrongResult(
                    f"returned a tensor on the meta device, shape {tuple(out.shape)}: it has a "
                    "shape but no values (a device='meta' somewhere, e.g. in torch.empty_like)")
            if out.device != expected.device:
                raise _WrongResult(f"returned a tensor on the device {out.device}, but the "
                                   f"inputs are on {expected.device}: keep the inputs' device")
            if out.layout != torch.strided:
                out = out.to_dense()
            if out.dtype == torch.bool or out.is_complex() or not (
                    exact or out.is_floating_point()):
                raise _WrongResult(f"returned a tensor of dtype {out.dtype}, expected "
                                   f"{expected.dtype} (the inputs' dtype)")
            if not exact and torch.finfo(out.dtype).eps > torch.finfo(floor).eps:
                raise _WrongResult(f"returned a tensor of dtype {out.dtype}, less precise than "
                                   f"the inputs' {floor}: a .half() or a dtype= somewhere?")
            return out.to(dtype=expected.dtype).clone()
    except _WrongResult:
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001  (an object that cannot be read is the student's)
        raise _WrongResult(f"returned a {type(out).__name__} that the checker cannot read "
                           f"(reading it raised {_describe(err)})") from None


def _unchanged(copy: Tensor, original: Tensor) -> bool:
    """Whether the student's code left its copy of an input as it was."""
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return copy.device == original.device and bool(torch.equal(copy, original))
    except Exception:  # noqa: BLE001  (an input turned into something else: changed)
        return False


def run_cases(name: str, cases: list[Case], settings: dict[str, tuple[str, ...]],
              general_hint: str, shape_hint: Callable[[tuple, tuple], str] | None = None,
              crash_hint: Callable[[str], list[str]] | None = None) -> bool:
    """Run every case, print the verdict (and the diagnosis), return whether all passed.

    Args:
        name: the checker's name, first word of every verdict.
        cases: the cases, see :class:`Case`.
        settings: the mistakes the diagnosis tries, ``{setting: (value, ...)}``, every
            ``(setting, value)`` a key of :data:`mha_lib.exercises.MISTAKES`.
        general_hint: what to try when the outputs match no mistake.
        shape_hint: ``shape_hint(got, expected)`` explains a wrong output shape.
        crash_hint: ``crash_hint(message)`` explains an exception of the student's code.
    """
    outputs: dict[int, Tensor] = {}
    problems: list[str] = []
    differ: list[str] = []
    nan_cases: list[int] = []
    in_place = False
    for i, case in enumerate(cases):
        copies = [x.clone() for x in case.inputs]
        expected = case.variant({})
        try:
            out = _read_result(call_student(case.run_student, *copies), expected, case)
        except NotImplementedYet:
            print(f"{name}: not implemented yet (your code raises NotImplementedError). "
                  "Replace the `raise NotImplementedError` line with your implementation.")
            return False
        except StudentError as err:
            problems.append(f"- on the case '{case.description}' your code raised {err}")
            hint = crash_hint(str(err)) if crash_hint else []
            if hint and not any(line in problems for line in hint):
                problems += hint
            continue
        except _WrongResult as err:
            problems.append(f"- on the case '{case.description}' your code {err}")
            continue
        if not all(_unchanged(x, y) for x, y in zip(copies, case.inputs)) and not in_place:
            in_place = True
            problems.append(f"- on the case '{case.description}' your code modified its input "
                            "in place (e.g. X[~mask] = ... on X or on a view of it). Work on a "
                            "new tensor: masked_fill (without the underscore) returns one.")
        if out.shape != expected.shape:
            extra = shape_hint(tuple(out.shape), tuple(expected.shape)) if shape_hint else ""
            problems.append(f"- on the case '{case.description}' the output has shape "
                            f"{tuple(out.shape)}, expected {tuple(expected.shape)}. {extra}".rstrip())
            continue
        outputs[i] = out
        if torch.isnan(out).any() and not torch.isnan(expected).any():
            nan_cases.append(i)
        if not _close(out, expected, case.exact):
            differ.append(case.description)
    if not problems and not differ:
        print(f"{name}: all {len(cases)} cases pass.")
        return True
    lines = [f"{name}: not yet right."] + problems
    if differ:
        lines.append(f"- the output differs from the reference on {len(differ)} of {len(cases)} "
                     "cases: " + "; ".join(f"'{d}'" for d in differ))
        specs = _diagnose(cases, outputs, settings)
        explained = set(outputs)
        if not specs:  # explain at least the first case that differs
            first = next(i for i in outputs if cases[i].description == differ[0])
            specs = _diagnose([cases[first]], {0: outputs[first]}, settings)
            explained = {first}
            if specs:
                lines.append(f"  (what follows explains the case '{differ[0]}'; the other "
                             "cases may hide one more mistake)")
        if specs and not problems and all(MISTAKES[key].convention for spec in specs
                                           for key in spec.items()):
            lines[0] = f"{name}: not a bug, another convention than this book's."
        if specs:
            lines.append("What it looks like" + (" (one of these):" if len(specs) > 1 else ":"))
            for spec in specs:
                lines += _describe_spec(spec)
        else:
            explained = set()
            lines.append(f"  The outputs match none of the classic mistakes. {general_hint}")
        unexplained_nan = [i for i in nan_cases if i not in explained]
        if unexplained_nan:
            lines.append(f"  Your output contains NaN on the case "
                         f"'{cases[unexplained_nan[0]].description}'. NaN comes from 0/0 or "
                         "inf/inf: a row whose scores are all -inf, or exp() of large scores "
                         "without first subtracting the row maximum (torch.softmax does that).")
    print("\n".join(lines))
    return False
