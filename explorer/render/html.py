"""Static HTML: tables, tabbed fragments that need no JavaScript, and standalone pages.

    fragment = tabbed("softmax", {"Graph": "<svg ...>", "Timing": "..."})
    write_page("report.html", "softmax", fragment)

Tabs are radio buttons styled with CSS, so they switch in any browser without a kernel, without
JavaScript and without network; where styles are stripped (GitHub) every panel simply shows in turn.
"""

from __future__ import annotations

import html
import uuid
from pathlib import Path
from typing import Iterable, Sequence

# Scoped to .fxe so the styles never leak into the notebook around a view.
CSS = """
.fxe { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 13px; color: #202124;
  line-height: 1.4; white-space: normal; }
.fxe h3 { font-size: 15px; margin: 14px 0 6px; }
.fxe h4 { font-size: 13px; margin: 12px 0 4px; font-family: monospace; }
.fxe table { border-collapse: collapse; margin: 6px 0 10px; }
.fxe th, .fxe td { border: 1px solid #dadce0; padding: 3px 8px; text-align: left; vertical-align: top; }
.fxe th { background: #f1f3f4; }
.fxe td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fxe .fxe-head { font-weight: 600; margin: 4px 0 8px; }
.fxe .fxe-note { color: #5f6368; }
.fxe .fxe-bad { color: #b3261e; }
.fxe .fxe-good { color: #137333; }
.fxe .fxe-graph { overflow: auto; max-height: 720px; border: 1px solid #eee; padding: 4px; }
.fxe .fxe-code pre { overflow: auto; max-height: 600px; font-size: 12px; line-height: 1.35; }
.fxe pre { white-space: pre; }
.fxe details { margin: 6px 0; }
.fxe summary { cursor: pointer; color: #1a73e8; }
.fxe > input.fxe-tab { display: none; }
.fxe > label.fxe-tab { display: inline-block; padding: 5px 14px; border: 1px solid #dadce0;
  border-bottom: none; border-radius: 6px 6px 0 0; background: #f1f3f4; cursor: pointer; margin-right: 2px; }
.fxe > .fxe-panel { border-top: 1px solid #dadce0; padding: 6px 2px; }
"""


def esc(value: object) -> str:
    return html.escape(str(value))


def plural(count: int, noun: str) -> str:
    """'1 kernel', '3 kernels'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[int] = ()) -> str:
    """An HTML table; cells are escaped unless they are `Markup`; `numeric` columns align right.
    No headers (`()`): a table of name/value rows, without an empty header row."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = cell if isinstance(cell, Markup) else esc(cell)
            cls = ' class="num"' if i in numeric else ""
            cells.append(f"<td{cls}>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if headers else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


class Markup(str):
    """A string that is already HTML (not escaped again by `table`)."""


def details(summary: str, body_html: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body_html}</details>"


def message(text: str, css_class: str = "fxe-bad") -> str:
    """A possibly long message (a compiler's output): its first line shown, the rest folded away."""
    first, _, rest = text.strip().partition("\n")
    shown = f'<p class="{css_class}">{esc(first)}</p>'
    return shown + (details("the full message", f"<pre>{esc(rest)}</pre>") if rest.strip() else "")


def panel(body_html: str) -> str:
    """One view's HTML wrapped with the styles it needs: used alone inside a widget tab."""
    return f'<div class="fxe"><style>{CSS}</style>{body_html}</div>'


def tabbed(headline_html: str, sections: dict[str, str]) -> str:
    """A self-contained HTML fragment with one CSS-only tab per section; the first is selected."""
    uid = f"fxe{uuid.uuid4().hex[:10]}"
    inputs, labels, panels, rules = [], [], [], []
    for i, (title, body) in enumerate(sections.items()):
        tab_id = f"{uid}-{i}"
        checked = " checked" if i == 0 else ""
        inputs.append(f'<input class="fxe-tab" type="radio" name="{uid}" id="{tab_id}"{checked}>')
        labels.append(f'<label class="fxe-tab" for="{tab_id}">{esc(title)}</label>')
        panels.append(f'<div class="fxe-panel {tab_id}"><h2 class="fxe-title">{esc(title)}</h2>{body}</div>')
        rules.append(f"#{tab_id}:checked ~ .{tab_id} {{ display: block; }}"
                     f" #{tab_id}:checked ~ label[for=\"{tab_id}\"] {{ background: #fff; font-weight: 600; }}")
    # Panels hide only when this style applies; the per-tab rules show the checked one.
    style = (f"<style>{CSS} #{uid} > .fxe-panel {{ display: none; }} #{uid} .fxe-title {{ display: none; }} "
             + " ".join(rules) + "</style>")
    return (f'<div class="fxe" id="{uid}">{style}<div class="fxe-head">{headline_html}</div>'
            + "".join(inputs) + "".join(labels) + "".join(panels) + "</div>")


def page(title: str, body_html: str) -> str:
    """A standalone HTML document: inline everything, no scripts, no network."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title>"
            "<style>body { margin: 16px 24px; background: #fff; }</style></head>\n"
            f"<body>\n{body_html}\n</body></html>\n")


def write_page(path: str | Path, title: str, body_html: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, body_html), encoding="utf-8")
    return path
