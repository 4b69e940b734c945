"""DOT text -> a picture, with the `dot` executable through the graphviz package.

    html = dot_to_svg(captured.to_dot())      # <img src="data:image/svg+xml;base64,..."> at natural size

Pictures are SVG embedded as an image data URI, never inline `<svg>`: JupyterLab strips inline SVG
(and `<style>`) from the HTML output of an untrusted notebook, but keeps `<img>` with a data URI.
Without the `dot` executable (Debian package `graphviz`) the DOT text itself is shown, with a note,
so a view never fails because a system tool is missing.
"""

from __future__ import annotations

import base64
import html
import re
from functools import lru_cache

import graphviz

_POINTS = {"pt": 96 / 72, "px": 1.0, "in": 96.0}


def dot_to_svg(dot: str, alt: str = "graph") -> str:
    """An <img> of the rendered graph at its natural size (put it in a scrolling pane: fxe-graph)."""
    return _dot_to_svg(dot, alt)


# The widget draws again what the static HTML drew (the first picture of a collapsible drawing).
@lru_cache(maxsize=64)
def _dot_to_svg(dot: str, alt: str) -> str:
    try:
        svg = graphviz.Source(dot).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        return ('<p class="fxe-note">Install Graphviz (the <code>dot</code> program) to draw this graph; '
                f"its DOT text:</p><pre>{html.escape(dot)}</pre>")
    return svg_image(svg, alt=alt)


def svg_image(svg: str, alt: str = "picture", fit: bool = False) -> str:
    """SVG text -> <img class="fxe-pic"> with a base64 data URI and the picture's width in pixels.

    `fit`: may shrink to the width of its container (plots); graphs keep their natural size and
    scroll inside their pane instead, so their labels stay readable.
    """
    svg = svg[svg.index("<svg"):]  # no XML prolog or DOCTYPE
    width = natural_width(svg)
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    size = f' width="{width}"' if width else ""
    style = ' style="max-width:100%;height:auto"' if fit else ""
    return f'<img class="fxe-pic" alt="{html.escape(alt)}"{size}{style} src="data:image/svg+xml;base64,{data}">'


def natural_width(svg: str) -> int:
    """The width of an <svg> element in CSS pixels (0 when it does not say)."""
    match = re.search(r'<svg\b[^>]*?\swidth="([\d.]+)(pt|px|in)?"', svg)
    if not match:
        return 0
    return round(float(match.group(1)) * _POINTS[match.group(2) or "px"])


def zoom_pictures(markup: str, factor: float) -> str:
    """The same HTML with every picture's width multiplied by `factor` (the widget's zoom control)."""
    def scale(match: re.Match) -> str:
        return f'{match.group(1)}width="{max(1, round(int(match.group(2)) * factor))}"'

    return re.sub(r'(<img class="fxe-pic"[^>]*?\s)width="(\d+)"', scale, markup)
