"""DOT text -> a picture, with Graphviz's `dot` executable.

    html = dot_to_svg(captured.to_dot())      # <img src="data:image/svg+xml;base64,..."> at natural size
    start_layout(big_dot)                     # laid out in the background; dot_to_svg(big_dot) waits for it

Pictures are SVG embedded as an image data URI, never inline `<svg>`: JupyterLab strips inline SVG
(and `<style>`) from the HTML output of an untrusted notebook, but keeps `<img>` with a data URI.
Without the `dot` executable (Debian package `graphviz`) the DOT text itself is shown, with a note,
so a view never fails because a system tool is missing.
"""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache

_POINTS = {"pt": 96 / 72, "px": 1.0, "in": 96.0}


def dot_to_svg(dot: str, alt: str = "graph") -> str:
    """An <img> of the rendered graph at its natural size (put it in a scrolling pane: fxe-graph)."""
    started = _LAYOUTS.get((dot, alt))
    if started is not None and not started.cancel():  # a picture still waiting its turn is drawn now
        return started.result()
    done: Future = Future()
    done.set_result(_dot_to_svg(dot, alt))
    _keep(dot, alt, done)
    return done.result()


def start_layout(dot: str, alt: str = "graph") -> None:
    """Start laying `dot` out in the background: `dot_to_svg` of the same text later waits for it. A
    GPT-2's every-node drawings take Graphviz a second or two, while the other tabs render in Python."""
    if (dot, alt) not in _LAYOUTS:
        _keep(dot, alt, _background().submit(_dot_to_svg, dot, alt))


# The widget draws again what the static HTML drew (the first picture of a collapsible drawing): the
# latest pictures are kept, laid out or being laid out.
_LAYOUTS: dict[tuple[str, str], Future] = {}
_KEPT = 64


def _keep(dot: str, alt: str, future: Future) -> None:
    _LAYOUTS.pop((dot, alt), None)
    if len(_LAYOUTS) >= _KEPT:
        del _LAYOUTS[next(iter(_LAYOUTS))]
    _LAYOUTS[(dot, alt)] = future


@lru_cache(maxsize=1)
def _background() -> ThreadPoolExecutor:
    # Graphviz runs as its own process; a thread only waits for it. Leave a core to the Python rendering.
    return ThreadPoolExecutor(max_workers=max(1, min(4, (os.cpu_count() or 2) - 1)), thread_name_prefix="dot")


# Graphviz lays a graph out in ranks, orders each rank, then places nodes left to right by network simplex.
# That last step, left unbounded, took 5.5 s of a 5.6 s layout on an 8-layer GPT-2's kernels and minutes
# on 12 layers (long edges from the inputs to every layer); capped at NSLIMIT x nodes iterations it takes
# 0.1 s and reads as well. A layout that still runs past DOT_SECONDS is given up with a note.
NSLIMIT = 5
DOT_SECONDS = 20.0


def _dot_to_svg(dot: str, alt: str) -> str:
    executable = shutil.which("dot")
    if executable is None:
        return ('<p class="fxe-note">Install Graphviz (the <code>dot</code> program) to draw this graph; '
                f"its DOT text:</p><pre>{html.escape(dot)}</pre>")
    try:
        done = subprocess.run([executable, "-Tsvg", f"-Gnslimit={NSLIMIT}", f"-Gnslimit1={NSLIMIT}"], input=dot,
                              capture_output=True, text=True, timeout=DOT_SECONDS)
    except subprocess.TimeoutExpired:
        return (f'<p class="fxe-note">Graphviz did not lay out {html.escape(alt)} within {DOT_SECONDS:.0f} s '
                f"({dot.count('->')} edges): expand one part of it in the widget, or read the outline below.</p>")
    if done.returncode != 0 or "<svg" not in done.stdout:
        return (f'<p class="fxe-note">Graphviz could not draw {html.escape(alt)}: '
                f"{html.escape(done.stderr.strip()[:300])}</p>")
    return svg_image(done.stdout, alt=alt)


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
