"""Static HTML: tables, tabbed fragments that need no JavaScript and no stylesheet, standalone pages.

    fragment = tabbed("softmax", {"Graph": "<img ...>", "Timing": "..."})
    write_page("report.html", "softmax", fragment)

Everything that matters for reading is in inline `style=` attributes (`inline_styles`), tabs are
`<details>` elements and pictures are `<img>` data URIs: JupyterLab strips `<style>`, `<script>` and
inline `<svg>` from the HTML output of an untrusted notebook (and GitHub does the same), but keeps
these. The inline styles use only properties JupyterLab's sanitizer allows.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

FONT = "font-family:Helvetica, Arial, sans-serif;font-size:13px;color:#202124;line-height:1.4"
CELL = "border:1px solid #dadce0;padding:3px 8px;text-align:left;vertical-align:top"
# Inline styles by tag, then by class (a class's style is applied after its tag's, so it wins).
TAG_STYLES = {
    "table": "border-collapse:collapse;margin:6px 0 10px",
    "th": CELL + ";background-color:#f1f3f4",
    "td": CELL,
    "pre": "white-space:pre;overflow:auto;max-height:600px;font-size:12px;line-height:1.35;margin:0",
    "details": "margin:6px 0",
    "summary": "cursor:pointer;color:#1a73e8",
    "h3": "font-size:15px;margin:14px 0 6px",
    "h4": "font-size:13px;margin:12px 0 4px;font-family:monospace",
}
CLASS_STYLES = {
    # Nothing wider than the notebook: a wide table or picture scrolls inside the view.
    "fxe": FONT + ";max-width:100%;overflow-x:auto",
    "fxe-head": "font-weight:600;margin:4px 0 8px",
    "fxe-note": "color:#5f6368",
    "fxe-bad": "color:#b3261e",
    "fxe-good": "color:#137333",
    "num": "text-align:right",
    # Graphs keep their natural size and scroll inside this pane; long code lines scroll in theirs.
    "fxe-graph": "overflow:auto;max-height:720px;border:1px solid #eee;padding:4px",
    "fxe-code": "overflow:auto;max-width:100%",
    "fxe-tab": "border:1px solid #dadce0;border-radius:6px;padding:2px 8px;margin:4px 0",
    "fxe-tab-title": "cursor:pointer;color:#202124;font-weight:600;font-size:14px;padding:4px 0",
    "fxe-side": "vertical-align:top;width:50%;border:1px solid #dadce0;padding:3px 8px",
}


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
    """One view's HTML, styled inline: used alone inside a widget tab."""
    return inline_styles('<div class="fxe">') + _styled(body_html) + "</div>"


# A large graph's tabs are megabytes of HTML, styled once for the widget and once for the static
# fallback: style each tab's HTML once (styling works tag by tag, so pieces can be styled apart).
@lru_cache(maxsize=64)
def _styled(markup: str) -> str:
    return inline_styles(markup)


def tabbed(headline_html: str, sections: dict[str, str]) -> str:
    """A self-contained HTML fragment, one <details> per section (the first open): tabs that open and
    close without JavaScript or a stylesheet, and read in turn where neither runs."""
    panels = [inline_styles(f'<details class="fxe-tab"{" open" if i == 0 else ""}><summary class="fxe-tab-title">'
                            f"{esc(title)}</summary>") + _styled(body) + "</details>"
              for i, (title, body) in enumerate(sections.items())]
    head = inline_styles(f'<div class="fxe"><div class="fxe-head">{headline_html}</div>')
    return f"{head}{''.join(panels)}</div>"


# Only tags that get a style: a tag of TAG_STYLES, or one with a class. Highlighted code is hundreds of
# thousands of <span style=...> (a 12-layer GPT-2 training step's views: 500,000 tags, 0.6 s when each was
# looked at in Python).
_TAG = re.compile(rf'<((?:{"|".join(TAG_STYLES)})\b|[a-z][a-z0-9]*\b(?=[^<>]*\sclass="))([^<>]*)>')
_CLASS = re.compile(r'\sclass="([^"]*)"')
_STYLE = re.compile(r'\sstyle="([^"]*)"')


def inline_styles(markup: str) -> str:
    """Add the style of each element's tag and classes (TAG_STYLES, CLASS_STYLES) to its `style=`
    attribute; a style the element already has comes last and wins. Our own markup only: tags
    written as `<tag attr="...">`."""
    return _TAG.sub(_with_style, markup)


def _with_style(match: re.Match) -> str:
    # Most tags repeat (a GPT-2's Fusion tab holds 50,000 <td>): each short one is styled once.
    tag, attrs = match.group(1), match.group(2)
    return _styled_tag(tag, attrs) if len(attrs) < 200 else _style_tag(tag, attrs)


@lru_cache(maxsize=4096)
def _styled_tag(tag: str, attrs: str) -> str:
    return _style_tag(tag, attrs)


def _style_tag(tag: str, attrs: str) -> str:
    found = _CLASS.search(attrs)
    rules = [TAG_STYLES.get(tag, "")] + [CLASS_STYLES.get(c, "") for c in (found.group(1).split() if found else ())]
    added = ";".join(r for r in rules if r)
    if not added:
        return f"<{tag}{attrs}>"
    own = _STYLE.search(attrs)
    if own:
        attrs = attrs[:own.start()] + attrs[own.end():]
        added = f"{added};{own.group(1)}"
    closing = "/" if attrs.endswith("/") else ""
    attrs = attrs[:-1] if closing else attrs
    return f'<{tag}{attrs} style="{added}"{closing}>'


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
