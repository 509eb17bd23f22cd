"""report.html: one self-contained page (inline CSS, inline SVG plots, no script).

Jinja2 with autoescaping on: every string of the report is escaped where it is written,
so a model named `<script>alert(1)</script>` is text. The plots are the one thing inlined
as markup; they are SVG that matplotlib wrote, with its text escaped by it. The stylesheet is
inlined as written too (escaped, its quotes would become `&#34;`, which CSS does not read, and
every font declaration would fall back): it is servelab's own file, never a run's text. A Content
Security Policy that allows nothing but inline styles keeps the page from loading or
running anything even if something slipped through.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

from servelab.core.redact import scrub
from servelab.report.document import Report
from servelab.report.plots import Plot, render_svg

if TYPE_CHECKING:
    from jinja2 import Environment
    from markupsafe import Markup

__all__ = ["render_html"]


def render_html(report: Report) -> str:
    """The page of `report`."""
    template = _environment().get_template("report.html.j2")
    return template.render(report=report, css=_stylesheet())


@cache
def _stylesheet() -> Markup:
    """report.css, marked safe to inline in <style>: servelab's file, no user's text."""
    from markupsafe import Markup

    css = files("servelab.report").joinpath("templates/report.css").read_text(encoding="utf-8")
    if "<" in css:  # '</style' would end the element; CSS needs no '<' at all
        raise ValueError("report.css must not contain '<'")
    return Markup(css)


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
    env.filters["breakable"] = _breakable
    return env


_BREAK_AFTER = re.compile(r"([._/])(?=\w)")
"""Where a header such as `options.max_running_requests` may wrap: after a dot, an underscore
or a slash followed by more of the name."""


def _breakable(value: object) -> Markup:
    """`value` scrubbed and escaped, with a <wbr> wherever an identifier may wrap: a table's
    column names are identifiers with no space in them, and without these a table of a
    study's parameters is twice as wide as the page. The break only shows where needed."""
    from markupsafe import Markup, escape

    text = str(escape(_scrubbed(str(value))))  # entities hold no '.', '_' or '/'
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", text))


def _scrubbed(value: object) -> object:
    """Secrets masked before autoescaping: escaped, the file's scrubber would miss them.
    Markup (the plots) is already final."""
    from markupsafe import Markup

    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return scrub(value)
