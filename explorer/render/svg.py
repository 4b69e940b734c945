"""DOT text -> inline SVG markup, with the `dot` executable through the graphviz package.

    html = dot_to_svg(captured.to_dot())

Without the `dot` executable (Debian package `graphviz`) the DOT text itself is shown, with a note,
so a view never fails because a system tool is missing.
"""

from __future__ import annotations

import html
import re

import graphviz


def dot_to_svg(dot: str) -> str:
    """An <svg> element (no XML prolog, so it can sit inside HTML), scaled to fit its container."""
    try:
        svg = graphviz.Source(dot).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return ('<p class="fxe-note">Install Graphviz (the <code>dot</code> program) to draw this graph; '
                f"its DOT text:</p><pre>{html.escape(dot)}</pre>")
    return inline_svg(svg)


def inline_svg(svg: str) -> str:
    """Drop the XML prolog and DOCTYPE, and let the picture shrink to the width of its container."""
    svg = svg[svg.index("<svg"):]
    return re.sub(r"<svg\b", '<svg style="max-width:100%;height:auto"', svg, count=1)
