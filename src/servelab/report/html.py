"""report.html: one self-contained page (inline CSS, inline SVG plots, no script).

Jinja2 with autoescaping on: every string of the report is escaped where it is written,
so a model named `<script>alert(1)</script>` is text. The plots are the one thing inlined
as markup; they are SVG that matplotlib wrote, with its text escaped by it. A Content
Security Policy that allows nothing but inline styles keeps the page from loading or
running anything even if something slipped through.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

from servelab.core.redact import scrub
from servelab.report.document import Report
from servelab.report.plots import Plot, render_svg

if TYPE_CHECKING:
    from jinja2 import Environment

__all__ = ["render_html"]


def render_html(report: Report) -> str:
    """The page of `report`."""
    template = _environment().get_template("report.html.j2")
    css = files("servelab.report").joinpath("templates/report.css").read_text(encoding="utf-8")
    return template.render(report=report, css=css)


@cache
def _environment() -> Environment:
    """jinja2 loads here, on first use, not when servelab is imported."""
    from jinja2 import Environment, PackageLoader, select_autoescape
    from markupsafe import Markup

    env = Environment(
        loader=PackageLoader("servelab.report", "templates"),
        autoescape=select_autoescape(["html", "j2"], default_for_string=True, default=True),
        finalize=_scrubbed,
    )
    env.filters["kind"] = lambda block: type(block).__name__.lower()

    def svg(plot: Plot) -> Markup:
        return Markup(render_svg(plot))

    env.filters["svg"] = svg
    return env


def _scrubbed(value: object) -> object:
    """Secrets masked before autoescaping: escaped, the file's scrubber would miss them.
    Markup (the plots) is already final."""
    from markupsafe import Markup

    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return scrub(value)
