"""Source code -> highlighted HTML (pygments, inline styles so it needs no stylesheet).

    html = highlight_code(kernel.source, "cpp")
"""

from __future__ import annotations

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

_LEXERS = {"cpp": CppLexer, "c++": CppLexer, "triton": PythonLexer, "python": PythonLexer}


def highlight_code(source: str, language: str) -> str:
    """A <div><pre>...</pre></div> block; `language` is "cpp", "triton", "python" or anything (plain)."""
    lexer = _LEXERS.get(language.lower(), TextLexer)()
    # noclasses: the colours travel with the markup, into widgets, notebooks and standalone pages alike.
    formatter = HtmlFormatter(noclasses=True, style="default", cssstyles="padding:6px 8px;margin:0")
    return f'<div class="fxe-code">{highlight(source, lexer, formatter)}</div>'
