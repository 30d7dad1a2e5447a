"""Show the library's real source in a chapter (one source of truth, never a pasted copy).

The library's lines may run to 120 characters; a listing on the website fits about 100 across
a laptop's text column (1366 px wide), so :func:`show_source` shows the code with its long
lines broken the way a formatter at ``_LISTING_WIDTH`` would break them: a long line of code
is broken after a comma or an opening bracket, or before ``if`` / ``else`` / ``and`` / ``or``,
inside its brackets (Python's implicit continuation: the same tokens, the same program), with a
hanging indent; a comment that ends a long line goes on its own line above it (wrapped at the
width if it is long). Strings and docstrings are never touched. The copy shown is checked to
parse to the same program as the library's code (else the line is shown as it is); the
display width is tested (``tests/book/test_show.py``).
"""

from __future__ import annotations

import ast
import inspect
import io
import keyword
import textwrap
import tokenize

from IPython.display import Code

__all__ = ["show_source"]

#: The longest line of a listing shown on the website (characters).
_LISTING_WIDTH = 100

_OPEN, _CLOSE = "([{", ")]}"
_BEFORE = {"if", "else", "and", "or", "for"}  # break before these words inside brackets


class _Source(Code):
    """IPython's ``Code`` without its LaTeX form: a page shows the HTML, and a LaTeX output
    would count as an equation and make Sphinx load MathJax on a page with no mathematics."""

    _repr_latex_ = None


def _breaks(tokens: list, depth_before: list[int], width: int) -> list[int]:
    """Columns of a line (its tokens, with the bracket depth before each) where it may break."""
    # by preference: before a keyword, after a comma, after an open bracket; last, inside a
    # bracket that closes before the width
    words, cols, opens, fallback = [], [], [], []
    closes, stack = {}, []  # index of an open bracket of this line -> end column of its closer
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in _OPEN:
            stack.append(i)
        elif tok.type == tokenize.OP and tok.string in _CLOSE and stack:
            closes[stack.pop()] = tok.end[1]
    inner, stack = [], []  # per token: end column of the closer of the bracket around it
    for i, tok in enumerate(tokens):
        inner.append(closes.get(stack[-1], 10**6) if stack else 10**6)
        if tok.type == tokenize.OP and tok.string in _OPEN:
            stack.append(i)
        elif tok.type == tokenize.OP and tok.string in _CLOSE and stack:
            stack.pop()
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if nxt.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
            continue
        after = depth_before[i] + (tok.string in _OPEN) - (tok.string in _CLOSE)
        if after <= 0:
            continue
        # a break inside a bracket that ends before the width is the last resort
        where = cols if inner[i] > width or tok.string in _OPEN else fallback
        if tok.type == tokenize.OP and tok.string == ",":
            where.append(tok.end[1])
        elif tok.type == tokenize.OP and tok.string in _OPEN:  # only a bracket too long to fit
            level, close = 0, None
            for later in tokens[i:]:
                level += (later.string in _OPEN) - (later.string in _CLOSE) if later.type == tokenize.OP else 0
                if level == 0:
                    close = later
                    break
            if close is None or close.end[1] > width:
                opens.append(tok.end[1])
        elif nxt.type == tokenize.NAME and nxt.string in _BEFORE and depth_before[i + 1] > 0:
            (words if inner[i + 1] > width else fallback).append(nxt.start[1])
    for found in (words, cols, opens, fallback):
        if any(c <= width for c in found):
            return [c for c in found if c <= width]
    return []


def _fit_line(line: str, tokens: list, depth_before: list[int], width: int) -> list[str]:
    """One physical line of code as lines of at most ``width`` (where a break is possible)."""
    indent = line[: len(line) - len(line.lstrip())]
    out: list[str] = []
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    if comment is not None and comment.start[1] > len(indent):  # a comment ending the line
        text = comment.string.lstrip("#").strip()
        out += textwrap.wrap(text, width, initial_indent=indent + "# ",
                             subsequent_indent=indent + "# ", break_on_hyphens=False) or [indent + "#"]
        line = line[: comment.start[1]].rstrip()
        keep = [i for i, t in enumerate(tokens) if t.start[1] < comment.start[1]]
        tokens, depth_before = [tokens[i] for i in keep], [depth_before[i] for i in keep]
    statement = ("def ", "async def ", "class ", "if ", "elif ", "while ", "for ", "with ")
    hang = indent + (" " * 8 if line.lstrip().startswith(statement) else " " * 4)
    offset, rest = 0, line  # rest = line[offset:], shown after the indent of its row
    prefix = ""
    while len(prefix) + len(rest) > width:
        shift = len(prefix) - offset
        cols = [c for c in _breaks(tokens, depth_before, width - shift) if c > offset]
        if not cols:
            break
        col = max(cols)
        out.append((prefix + line[offset:col].lstrip() if prefix else line[:col]).rstrip())
        offset, prefix = col, hang
        rest = line[col:].lstrip()
        offset = len(line) - len(rest)
    out.append(prefix + line[offset:].lstrip() if prefix else line)
    return out


def _split_string(line: str, tok, width: int) -> list[str] | None:
    """A long one-line string literal inside brackets as two adjacent literals (Python joins
    them into the same string), split at a space before ``width``; None if it cannot be."""
    text = tok.string
    quote_at = next(i for i, ch in enumerate(text) if ch in "'\"")
    prefix, quote = text[:quote_at], text[quote_at]
    if text[quote_at:quote_at + 3] == quote * 3 or "b" in prefix.lower():
        return None
    start = tok.start[1]
    braces, best = 0, None
    for i in range(quote_at + 1, len(text) - 1):
        ch = text[i]
        braces += (ch == "{") - (ch == "}") if "f" in prefix.lower() else 0
        if ch == " " and braces == 0 and start + i + 2 <= width and text[i - 1] != "\\" \
                and (best is None or len(text) - i > 16):  # no short last piece
            best = i
    if best is None or best <= quote_at + 1:
        return None
    cut = start + best + 1  # the space stays on the first piece
    return [line[:cut] + quote, " " * start + prefix + quote + line[cut:]]


def _is_docstring(tok, previous) -> bool:
    """A triple-quoted string that is a statement of its own (a docstring)."""
    if tok.type != tokenize.STRING or not tok.string.lstrip("rRuU").startswith(('"""', "'''")):
        return False
    return previous is None or previous.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                                 tokenize.ENCODING)


def _one_pass(source: str, width: int) -> str:
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    by_row: dict[int, list | None] = {}
    depth, depths, ends = 0, {}, {}
    previous = None
    for tok in tokens:
        depths[id(tok)] = depth
        if tok.type == tokenize.OP:
            depth += (tok.string in _OPEN) - (tok.string in _CLOSE)
        ends[id(tok)] = depth
        if tok.start[0] == tok.end[0] and not _is_docstring(tok, previous):
            if isinstance(by_row.get(tok.start[0], []), list):
                by_row.setdefault(tok.start[0], []).append(tok)
        elif _is_docstring(tok, previous):  # its prose may break at a space
            for row in range(tok.start[0], tok.end[0] + 1):
                by_row[row] = "docstring"
        else:
            for row in range(tok.start[0], tok.end[0] + 1):
                by_row[row] = None
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    out: list[str] = []
    for row, line in enumerate(lines, 1):
        row_tokens = by_row.get(row)
        if len(line) <= width or not row_tokens or line.rstrip().endswith("\\"):
            out.append(line)
            continue
        if row_tokens == "docstring":  # break its prose at the last space that fits
            cut = line.rfind(" ", len(line) - len(line.lstrip()) + 1, width + 1)
            if cut < 0:
                out.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            out += [line[:cut].rstrip(), indent + line[cut:].lstrip()]
            continue
        before = [depths[id(t)] for t in row_tokens]
        fitted = _fit_line(line, row_tokens, before, width)
        if len(fitted[-1]) > width:
            fitted[-1:] = _fit_last(line, fitted[-1], row_tokens, depths, ends, width)
        out.extend(fitted)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def _fit_last(line: str, last: str, row_tokens: list, depths: dict, ends: dict, width: int) -> list[str]:
    """The last piece of a long line that brackets could not break: a long right side of an
    assignment goes into brackets (broken in the next pass), or a long string is split."""
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    code = [t for t in row_tokens if t.type not in skip]
    indent = len(line) - len(line.lstrip())
    eq = next((t for t in code if t.type == tokenize.OP and t.string == "=" and depths[id(t)] == 0), None)
    if last is line and eq is not None and ends[id(code[-1])] == 0 and code[0].start[1] == indent \
            and not any(t.type == tokenize.COMMENT for t in row_tokens):
        return [line[: eq.end[1]] + " (" + line[eq.end[1]:].strip() + ")"]
    head = code[0].string if code else ""
    if last is line and head in ("if", "elif", "while") and code[-1].string == ":" \
            and ends[id(code[-1])] == 0 and not any(t.type == tokenize.COMMENT for t in row_tokens):
        # a long condition at depth 0: in brackets (broken in the next pass)
        return [line[: code[1].start[1]] + "(" + line[code[1].start[1]: code[-1].start[1]].rstrip() + "):"]
    for tok in code:
        tail = line[tok.start[1]:].rstrip()
        if tok.type == tokenize.STRING and depths[id(tok)] > 0 and last.endswith(tail):
            at = len(last) - len(tail)
            if at < width - 8 and at + len(tok.string) > width - 8:
                moved = tok._replace(start=(tok.start[0], at), end=(tok.start[0], at + len(tok.string)))
                return _split_string(last, moved, width) or [last]
    return [last]


class _Blanks(ast.NodeTransformer):
    """Strings with their whitespace runs as single spaces (a docstring's lines broken anew)."""

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            node.value = " ".join(node.value.split())
        return node


def _same_program(a: str, b: str) -> bool:
    try:
        trees = [_Blanks().visit(ast.parse(textwrap.dedent(s))) for s in (a, b)]
    except SyntaxError:
        return False
    return ast.dump(trees[0]) == ast.dump(trees[1])


def _fit_lines(source: str, width: int = _LISTING_WIDTH) -> str:
    """``source`` with its long lines broken to ``width`` (see the module's docstring); the
    result parses to the same program. Lines that cannot break stay as they are."""
    pad = len(source) - len(source.lstrip(" "))  # a method's source is indented as in its class
    if pad and textwrap.dedent(source) != source:
        inner = _fit_lines(textwrap.dedent(source), width - pad)
        return textwrap.indent(inner, " " * pad, lambda line: bool(line.strip()))
    result = source
    for _ in range(6):
        fitted = _one_pass(result, width)
        if fitted == result or not _same_program(source, fitted):
            break
        result = fitted
    return result


def show_source(obj) -> Code:
    """Syntax-highlighted source of a function, class or method of mha_lib, its long lines
    broken to ``_LISTING_WIDTH`` characters (``_fit_lines``: the same code).

    In Jupyter and on the website it renders as highlighted code (HTML, and plain text for
    other front ends); nbval does not compare it, so the chapters do not need re-running when
    the code changes.
    """
    return _Source(_fit_lines(inspect.getsource(obj)), language="python")
