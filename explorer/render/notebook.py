"""Executed notebook -> one static HTML file that needs no kernel, no widget JavaScript and no network.

Widget outputs are dropped in favour of the static `text/html` fallback every explorer view carries,
and the page template leaves out the scripts nbconvert would load from CDNs (require.js, MathJax,
mermaid, the widget manager).
"""

from __future__ import annotations

import copy

import nbformat
from jinja2 import DictLoader
from nbconvert import HTMLExporter

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def without_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy whose outputs keep their static representations only (and no saved widget state)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data is not None and WIDGET_VIEW in data:
                del data[WIDGET_VIEW]
                if not data:
                    continue
            kept.append(output)
        cell.outputs = kept
    return nb


def notebook_to_html(nb: nbformat.NotebookNode) -> str:
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"static_page.html.j2": _TEMPLATE})],
                            template_file="static_page.html.j2")
    body, _ = exporter.from_notebook_node(without_widgets(nb))
    return body
