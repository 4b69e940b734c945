"""Source code -> highlighted HTML (pygments, inline styles so it needs no stylesheet).

    html = highlight_code(kernel.source, "cpp")
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

_LEXERS = {"cpp": CppLexer, "c++": CppLexer, "triton": PythonLexer, "python": PythonLexer}


def highlight_code(source: str, language: str, marked_lines: Sequence[int] = ()) -> str:
    """A <div><pre>...</pre></div> block; `language` is "cpp", "triton", "python" or anything (plain).
    `marked_lines` (1-based) get the style's light yellow background."""
    return _highlighted(source, language, tuple(marked_lines))


# Pygments is most of a large graph's render time, and the same text appears in several tabs (the
# Stepper repeats the Graph's and the Kernels' artifacts) and again in the widget: highlight it once.
@lru_cache(maxsize=512)
def _highlighted(source: str, language: str, marked_lines: tuple[int, ...]) -> str:
    lexer = _LEXERS.get(language.lower(), TextLexer)()
    # noclasses: the colours travel with the markup, into widgets, notebooks and standalone pages alike.
    formatter = HtmlFormatter(noclasses=True, style="default", cssstyles="padding:6px 8px;margin:0",
                              hl_lines=list(marked_lines))
    return f'<div class="fxe-code">{highlight(source, lexer, formatter)}</div>'
