"""matplotlib's SVG made fit to inline in an HTML page beside other plots.

matplotlib salts its clip-path and marker ids (svg.hashsalt) but names glyphs by font
and character (`DejaVuSans-30`), so two inlined plots would define the same ids, and its
default `<style>` rule (`*{...}`) would reach every element of the page. Here every id
and every reference to one gets the plot's prefix, the style rule is scoped to the plot's
root, and the XML declaration and DOCTYPE go (they are not allowed inside HTML).
"""

from __future__ import annotations

import re

__all__ = ["ROOT_ID", "inline_svg"]

ROOT_ID = "plot"
"""The root `<svg>`'s id before prefixing (matplotlib's svg.id)."""

_ID = re.compile(r'\bid="([^"]+)"')
_HREF = re.compile(r'((?:xlink:)?href)="#([^"]+)"')
_URL = re.compile(r"url\(#([^)]+)\)")
_STYLE_ALL = re.compile(r"(<style[^>]*>)\s*\*\s*\{")


def inline_svg(svg: str, prefix: str) -> str:
    """The `<svg>` element alone, its ids (and references to them) prefixed by `prefix`."""
    start = svg.find("<svg")
    if start < 0:
        raise ValueError("not an SVG document: no <svg> element")
    body = svg[start:].strip()

    def renamed(name: str) -> str:
        return f"{prefix}-{name}"

    body = _ID.sub(lambda m: f'id="{renamed(m.group(1))}"', body)
    body = _HREF.sub(lambda m: f'{m.group(1)}="#{renamed(m.group(2))}"', body)
    body = _URL.sub(lambda m: f"url(#{renamed(m.group(1))})", body)
    return _STYLE_ALL.sub(lambda m: f"{m.group(1)}#{renamed(ROOT_ID)} *{{", body, count=1)
