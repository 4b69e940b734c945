"""A widget whose graph nodes and source lines can be clicked: the click reaches Python as a traitlet.

    picture = clickable(value=inline_svg(picture_pane(dot, "graph 0"), record=0))
    code = clickable(value=clickable_code(kernel.source, "cpp", "cpp", kernel.name))
    picture.observe(lambda change: print(change["new"]), names="picked_node")  # {"record": 0, "node": "exp"}
    code.observe(lambda change: print(change["new"]), names="picked_line")  # {"backend": "cpp", "line": 9, ...}

The static views show pictures as <img> data URIs and code as plain highlighted text (an untrusted
notebook, nbconvert and exported pages need no script); only this widget, drawn by anywidget's
JavaScript in a live kernel, holds inline SVG and per-line spans. What can be clicked:
- a Graphviz node (`<g class="node"><title>NAME</title>...`) inside an element with `data-fxe-record`:
  picked_node = {"record": R, "node": NAME};
- an element with `data-fxe-node` and `data-fxe-record` (an FX node named in an answer's table): the same;
- a source line, `data-fxe-line` with `data-fxe-backend` and `data-fxe-kernel`:
  picked_line = {"backend": B, "kernel": K, "line": N}.
`marked` lists what Python wants outlined ("node:R:NAME", "line:B:K:N"); a click marks its element at once.
"""

from __future__ import annotations

import base64
import html
import re
from functools import lru_cache
from typing import Any, Sequence

from explorer.render.code import LINE_SPAN, highlight_code

_ESM = r"""
function nodeKey(element) {
  // A Graphviz node (its DOT id is its <title>) or an element naming an FX node, in its picture's record.
  const holder = element.closest("[data-fxe-record]");
  if (!holder) return null;
  const name = element.dataset && element.dataset.fxeNode !== undefined ? element.dataset.fxeNode
    : element.querySelector(":scope > title")?.textContent;
  return name === undefined || name === null ? null : {record: Number(holder.dataset.fxeRecord), node: name};
}

function keyOf(element) {
  if (element.dataset && element.dataset.fxeLine !== undefined) {
    const d = element.dataset;
    return `line:${d.fxeBackend}:${d.fxeKernel}:${d.fxeLine}`;
  }
  const picked = nodeKey(element);
  return picked ? `node:${picked.record}:${picked.node}` : null;
}

const PICKABLE = "[data-fxe-line], [data-fxe-node], g.node";

function render({ model, el }) {
  el.classList.add("fxe-clickable");
  const mark = () => {
    const marked = new Set(model.get("marked"));
    for (const element of el.querySelectorAll(PICKABLE)) {
      element.classList.toggle("fxe-picked", marked.has(keyOf(element)));
    }
  };
  const show = () => {
    el.innerHTML = model.get("value");
    mark();
  };
  el.addEventListener("click", (event) => {
    const element = event.target.closest(PICKABLE);
    if (!element || !el.contains(element)) return;
    const key = keyOf(element);
    if (key === null) return;
    if (key.startsWith("line:")) {
      const d = element.dataset;
      model.set("picked_line", {backend: d.fxeBackend, kernel: d.fxeKernel, line: Number(d.fxeLine)});
    } else {
      model.set("picked_node", nodeKey(element));
    }
    model.set("marked", [key]);  // outlined now; Python may mark more (a line's nodes, a node's lines)
    model.save_changes();
  });
  model.on("change:value", () => {
    show();
    if (model.get("reveal")) el.scrollIntoView({block: "nearest"});
  });
  model.on("change:marked", mark);
  show();
}

export default { render };
"""

_CSS = """
.fxe-clickable g.node, .fxe-clickable [data-fxe-line], .fxe-clickable [data-fxe-node] { cursor: pointer; }
.fxe-clickable [data-fxe-line]:hover, .fxe-clickable [data-fxe-node]:hover { background-color: #e8f0fe; }
.fxe-clickable g.node:hover polygon, .fxe-clickable g.node:hover path, .fxe-clickable g.node:hover ellipse {
  stroke: #1a73e8; stroke-width: 2px; }
.fxe-clickable g.node.fxe-picked polygon, .fxe-clickable g.node.fxe-picked path,
.fxe-clickable g.node.fxe-picked ellipse { stroke: #1a73e8; stroke-width: 4px; }
.fxe-clickable .fxe-picked[data-fxe-line], .fxe-clickable .fxe-picked[data-fxe-node] {
  background-color: #fde293; outline: 1px solid #e37400; }
"""


def clickable(**traits: Any) -> Any:
    """A Clickable widget: `clickable(value=html)`; its traits are in the module doc."""
    return _widget_class()(**traits)


# anywidget (and ipywidgets under it) is imported when a widget is made, as view.py imports ipywidgets:
# the static views and their helpers here render without either.
@lru_cache(maxsize=1)
def _widget_class() -> type:
    import anywidget
    import traitlets

    class Clickable(anywidget.AnyWidget):
        """HTML (with inline SVG) whose graph nodes and source lines report clicks (see the module doc)."""

        _esm = _ESM
        _css = _CSS
        value = traitlets.Unicode("").tag(sync=True)  # the HTML shown, as ipywidgets.HTML's value
        picked_node = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
        picked_line = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)
        marked = traitlets.List(traitlets.Unicode()).tag(sync=True)  # "node:R:NAME" / "line:B:K:N", outlined
        reveal = traitlets.Bool(False).tag(sync=True)  # scroll into view when the value changes (an answer)

    return Clickable


def node_key(record: int, node: str) -> str:
    return f"node:{record}:{node}"


def line_key(backend: str, kernel: str, line: int) -> str:
    return f"line:{backend}:{kernel}:{line}"


_SVG_IMAGE = re.compile(r'<img class="fxe-pic"(?:(?=[^>]*\swidth="(\d+)"))?[^>]*\ssrc="data:image/svg\+xml;base64,'
                        r'([A-Za-z0-9+/=]+)"[^>]*>')  # its width (when it has one) and its picture


def inline_svg(markup: str, record: int) -> str:
    """The pictures of `markup` (<img> data URIs, as svg_image makes them) as inline SVG, whose nodes a
    click reaches, inside an element saying which record (graph) their nodes belong to."""
    def inline(match: re.Match) -> str:
        svg = base64.b64decode(match.group(2)).decode("utf-8")
        svg = svg[svg.index("<svg"):]
        if match.group(1):  # keep the picture's width in pixels (and the zoom it was drawn at)
            svg = re.sub(r'<svg\b([^>]*?)\swidth="[^"]*"\s+height="[^"]*"', rf'<svg\1 width="{match.group(1)}px"',
                         svg, count=1)
        return svg

    return f'<div data-fxe-record="{record}">{_SVG_IMAGE.sub(inline, markup)}</div>'


_LINE_SPANS = re.compile(rf'<span id="{LINE_SPAN}-(\d+)">')


def clickable_code(source: str, language: str, backend: str, kernel: str, marked_lines: Sequence[int] = (),
                   quick: bool = False) -> str:
    """Highlighted `source` of kernel `kernel` whose every line is a clickable element (data-fxe-line)."""
    code = highlight_code(source, language, marked_lines, quick=quick, line_spans=True)
    attrs = f'data-fxe-backend="{html.escape(backend)}" data-fxe-kernel="{html.escape(kernel)}"'
    return _LINE_SPANS.sub(lambda m: f'<span {attrs} data-fxe-line="{m.group(1)}">', code)


def clickable_node(record: int, node: str, text: str | None = None) -> str:
    """`<code>` naming an FX node that a click picks (in an answer's table)."""
    return (f'<code data-fxe-record="{record}" data-fxe-node="{html.escape(node)}">'
            f"{html.escape(node if text is None else text)}</code>")
