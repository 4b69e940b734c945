"""Source code -> highlighted HTML (inline styles, so it needs no stylesheet).

    html = highlight_code(kernel.source, "cpp")

Pygments highlights what fits on a screen or two. A long text (a GPT-2's graph as code runs to
thousands of lines, and a 12-layer one's views hold 25,000) goes through one regular expression of ours
instead: comments, strings, numbers and keywords in Pygments' default colours, about 50 times faster
(Pygments was 3 of a 7 s render).
"""

from __future__ import annotations

import html
import keyword
import re
from functools import lru_cache
from typing import Sequence

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

_LEXERS = {"cpp": CppLexer, "c++": CppLexer, "triton": PythonLexer, "python": PythonLexer}


def highlight_code(source: str, language: str, marked_lines: Sequence[int] = (), quick: bool = False,
                   line_spans: bool = False) -> str:
    """A <div><pre>...</pre></div> block; `language` is "cpp", "triton", "python" or anything (plain).
    `marked_lines` (1-based) get the style's light yellow background. `quick`: our regular expression
    even for a short text (one of hundreds in a view). `line_spans`: each line, newline included, in a
    `<span id="fxe-line-N">` of its own (Pygments' linespans), for the widget that makes lines clickable."""
    return _highlighted(source, language, tuple(marked_lines), quick, line_spans)


LINE_SPAN = "fxe-line"  # the id prefix of `line_spans`


# Pygments is most of a large graph's render time, and the same text appears in several tabs (the
# Stepper repeats the Graph's and the Kernels' artifacts) and again in the widget: highlight it once.
@lru_cache(maxsize=512)
def _highlighted(source: str, language: str, marked_lines: tuple[int, ...], quick: bool = False,
                 line_spans: bool = False) -> str:
    language = language.lower()
    if not marked_lines and language in _QUICK and (quick or source.count("\n") >= QUICK_ABOVE_LINES):
        return _quick_highlighted(source, language, line_spans)
    lexer = _LEXERS.get(language.lower(), TextLexer)()
    return f'<div class="fxe-code">{highlight(source, lexer, _formatter(marked_lines, line_spans))}</div>'


# Making a formatter builds its style sheet: a tenth of a second over a GPT-2's hundreds of short texts.
@lru_cache(maxsize=16)
def _formatter(marked_lines: tuple[int, ...], line_spans: bool = False) -> HtmlFormatter:
    # noclasses: the colours travel with the markup, into widgets, notebooks and standalone pages alike.
    return HtmlFormatter(noclasses=True, style="default", cssstyles="padding:6px 8px;margin:0",
                         hl_lines=list(marked_lines), linespans=LINE_SPAN if line_spans else "")


# ---- long texts: one regular expression ----------------------------------------------------------------
QUICK_ABOVE_LINES = 400
_CPP_KEYWORDS = ("auto bool break case char const constexpr continue double else float for if inline int "
                 "int64_t long return signed static struct uint8_t unsigned void while").split()
_STRING = r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''
_NUMBER = r"\b\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[fFuUlL]*\b"
_QUICK = {
    "python": re.compile(rf"(?P<comment>#[^\n]*)|(?P<string>{_STRING})|(?P<number>{_NUMBER})"
                         rf"|(?P<keyword>\b(?:{'|'.join(keyword.kwlist)})\b)"),
    "cpp": re.compile(rf"(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<preproc>^\s*#[^\n]*)|(?P<string>{_STRING})"
                      rf"|(?P<number>{_NUMBER})|(?P<keyword>\b(?:{'|'.join(_CPP_KEYWORDS)})\b)", re.S | re.M),
}
_QUICK["triton"] = _QUICK["python"]
_QUICK["c++"] = _QUICK["cpp"]
_STYLES = {"comment": "color:#3D7B7B;font-style:italic", "preproc": "color:#9C6500", "string": "color:#BA2121",
           "number": "color:#666666", "keyword": "color:#008000;font-weight:bold"}


def _quick_highlighted(source: str, language: str, line_spans: bool = False) -> str:
    pieces, at = [], 0
    for match in _QUICK[language].finditer(source):
        pieces.append(html.escape(source[at:match.start()], quote=False))
        # A comment over several lines is coloured line by line (as Pygments does), so that every line
        # can sit in a span of its own.
        style = _STYLES[match.lastgroup]
        pieces.append("\n".join(f'<span style="{style}">{html.escape(part, quote=False)}</span>'
                                 for part in match.group().split("\n")))
        at = match.end()
    pieces.append(html.escape(source[at:], quote=False))
    text = "".join(pieces)
    if line_spans:
        lines = text.split("\n")
        text = "".join(f'<span id="{LINE_SPAN}-{i}">{line}' + ("\n" if i < len(lines) else "") + "</span>"
                       for i, line in enumerate(lines, 1) if line or i < len(lines))
    # The markup Pygments' HtmlFormatter gives (highlight_code's other path), so both look the same.
    return ('<div class="fxe-code"><div class="highlight" style="background: #f8f8f8; padding:6px 8px;margin:0">'
            f'<pre style="line-height: 125%;">{text}</pre></div></div>')
