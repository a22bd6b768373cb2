"""Rendering the report's sections (agent/views/report.py decides what they hold): Markdown that
links its figures as files, and one self-contained HTML page that embeds them."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[Any]]
    id: str = ""


@dataclass(frozen=True)
class Figure:
    id: str
    """Element id in report.html, file stem beside report.md."""
    png: bytes
    caption: str


@dataclass(frozen=True)
class Section:
    title: str
    blocks: list[Table | Figure | str]


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def markdown(parts: list[Section], episode_id: str, figure_file: Callable[[Figure], str]) -> str:
    """The sections as Markdown; each figure links the file name `figure_file` gives it."""
    lines = [f"# Episode {episode_id}"]
    for s in parts:
        lines += ["", f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                lines += ["| " + " | ".join(b.header) + " |", "|" + "---|" * len(b.header)]
                lines += ["| " + " | ".join(_fmt(c).replace("|", "/") for c in r) + " |" for r in b.rows]
            elif isinstance(b, Figure):
                lines += [f"![{b.caption}]({figure_file(b)})"]
            else:
                lines.append(b)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


CSS = """body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;padding:16px 24px;
max-width:1280px;color:#1f2328}h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;font:12px ui-monospace,monospace}
td,th{border:1px solid #d0d7de;padding:2px 6px;text-align:left;vertical-align:top}th{background:#f6f8fa}
figure{margin:8px 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:12px;color:#57606a}"""

# Marks each figure once its image decoded (data-ok, natural size): a headless browser's DOM
# dump then shows which figures rendered (tests/test_report_browser.py reads it).
SCRIPT = """window.addEventListener('load',function(){document.querySelectorAll('figure img').forEach(function(i){
i.dataset.naturalWidth=i.naturalWidth;i.dataset.naturalHeight=i.naturalHeight;
i.dataset.ok=String(i.complete&&i.naturalWidth>0);});document.body.dataset.loaded='1';});"""


def _html_block(b: Table | Figure | str) -> str:
    if isinstance(b, Table):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in b.rows)
        ident = f' id="{b.id}"' if b.id else ""
        return f'<div class="scroll"><table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    if isinstance(b, Figure):
        data = base64.b64encode(b.png).decode("ascii")
        return (f'<figure id="{b.id}"><img alt="{html.escape(b.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
    return f"<p>{html.escape(b)}</p>"


def page(parts: list[Section], episode_id: str) -> str:
    """One self-contained HTML file: styles, script and figures inline, nothing fetched."""
    body = [f"<h1>Episode {html.escape(episode_id)}</h1>"]
    for s in parts:
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        body += [_html_block(b) for b in s.blocks]
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>Episode "
            f"{html.escape(episode_id)}</title><style>{CSS}</style><script>{SCRIPT}</script></head><body>"
            + "\n".join(body) + "</body></html>\n")
