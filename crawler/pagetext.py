"""The main content of an HTML page: its text and its headings, in one walk of the parsed tree.

Rule (docs/items.md, "The ``site`` spider's items"):

- **Main content** is the first ``<main>`` or ``role="main"`` element (HTML's and ARIA's mark
  of it; Sphinx puts its page body in ``<div class="body" role="main">``), else ``<body>``.
  Inside it, what a reader does not read as the page's content is left out: ``script``,
  ``style``, ``noscript``, ``template``; navigation (``<nav>``, ``role="navigation"`` or
  ``"search"``, and DocBook XSL's ``div.navheader`` / ``div.navfooter`` bars of chunked
  output); and permalink anchors (``<a class="headerlink">``, Sphinx's and Python-Markdown's
  ``¶``, or any ``<a href="#...">`` whose whole text is ``¶``, ``§`` or ``#``).
- **Text** is the text the page itself writes, with white space collapsed as CSS does for
  ``white-space: normal`` (each run of white space becomes one space; leading and trailing
  space is dropped), plus a space where a block-level element (``p``, ``div``, ``li``,
  ``td``, ``h1``, ...: :data:`BLOCK_TAGS`) or ``<br>`` begins or ends. An inline element
  (``span``, ``a``, ``code``, ``strong``, ...) adds nothing: ``では、<strong>aptitude</strong>
  の`` is ``では、aptitude の`` and ``<b>aptitude</b>, откройте`` is ``aptitude, откройте``, as a
  browser shows them (the rule of HTML's ``innerText``, without its line breaks).
- **Headings** are the ``h1``, ``h2`` and ``h3`` elements of the main content, in document
  order, as ``[level, text]`` with their text made by the same rule (a heading without text is
  left out); none of the page's sidebars or navigation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lxml.html import HtmlElement

#: Elements a browser lays out as blocks (display block, list-item, table parts) and ``br``:
#: their start and end separate words. From the HTML Living Standard's rendering section,
#: "15.3 Non-replaced elements".
BLOCK_TAGS = frozenset(
    "address article aside blockquote body br caption center dd details dialog dir div dl dt fieldset"
    " figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html legend li listing main menu"
    " nav ol optgroup option p plaintext pre search section summary table tbody td tfoot th thead tr ul xmp".split()
)
#: Elements whose content is never shown as text.
SKIPPED_TAGS = frozenset(("script", "style", "noscript", "template"))
#: ARIA roles of navigation, left out of the main content.
NAVIGATION_ROLES = frozenset(("navigation", "search"))
#: DocBook XSL's navigation bars at the top and bottom of each chunk.
NAVIGATION_CLASSES = frozenset(("navheader", "navfooter"))
#: The whole text of a permalink anchor (``<a href="#id">¶</a>``).
PERMALINK_SIGNS = frozenset(("¶", "§", "#"))
#: The headings kept, and their level.
HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3}


def main_content(root: HtmlElement) -> HtmlElement:
    """The main-content element of a parsed page (``<main>``, ``role="main"``, else ``<body>``,
    else ``root`` itself)."""
    found = root.xpath("(//main | //*[@role='main'])[1]")
    if found:
        return found[0]
    body = root.find("body")
    return body if body is not None else root


def _left_out(element: HtmlElement, tag: str) -> bool:
    if tag in SKIPPED_TAGS or tag == "nav":
        return True
    if tag == "a":
        classes = element.get("class")
        if classes and "headerlink" in classes.split():
            return True
        href = element.get("href")
        return bool(
            href and href.startswith("#") and len(element) == 0 and (element.text or "").strip() in PERMALINK_SIGNS
        )
    if tag == "div":
        classes = element.get("class")
        if classes and classes in NAVIGATION_CLASSES:
            return True
    role = element.get("role")
    return role is not None and role in NAVIGATION_ROLES


def page_text(root: HtmlElement) -> tuple[str, list[list[int | str]]]:
    """``(text, headings)`` of a parsed page (``response.selector.root``), by the rule of this
    module's docstring: ``text`` a ``str`` (``""`` for a page without any),
    ``headings`` a list of ``[level, text]`` with ``level`` 1, 2 or 3.

    One walk of the tree, iterative (no recursion limit on deeply nested pages); the tree is not
    changed. Its cost against parsel XPath: bench/text_extraction.py, bench/README.md#page-text."""
    region = main_content(root)
    chunks: list[str] = []
    append = chunks.append
    headings: list[list[int | str]] = []
    if region.text:
        append(region.text)
    # Each entry: the children iterator of an open element's parent, the open element, whether
    # it is a block, the index of its entry in ``headings`` (-1 for none) and where its text
    # starts in ``chunks``.
    stack: list[tuple[Iterator[HtmlElement], HtmlElement, bool, int, int]] = []
    children: Iterator[HtmlElement] = iter(region)

    def close(element: HtmlElement, block: bool, heading: int, start: int) -> None:
        """The end of an element: its heading's text, a block's break, then its tail."""
        if heading >= 0:
            headings[heading][1] = " ".join("".join(chunks[start:]).split())
        if block:
            append("\n")
        if element.tail:
            append(element.tail)

    while True:
        for child in children:
            tag = child.tag
            if tag.__class__ is not str or _left_out(child, tag):
                # a comment, a processing instruction or an element left out: only its tail is text
                if child.tail:
                    append(child.tail)
                continue
            block = tag in BLOCK_TAGS
            if block:
                append("\n")
            heading = -1
            if tag in HEADING_LEVELS:
                heading = len(headings)
                headings.append([HEADING_LEVELS[tag], ""])
            start = len(chunks)
            if child.text:
                append(child.text)
            if len(child):
                stack.append((children, child, block, heading, start))
                children = iter(child)
                break
            close(child, block, heading, start)
        else:
            if not stack:
                break
            children, child, block, heading, start = stack.pop()
            close(child, block, heading, start)
    return " ".join("".join(chunks).split()), [h for h in headings if h[1]]
