"""``modules``: one :class:`~crawler.items.Module` per module listed in a Python documentation's
module index (``py-modindex.html``), e.g. Debian's python3.11-doc served on loopback::

    scrapy crawl modules -a url=http://127.0.0.1:8000/py-modindex.html

It reads that one page and follows no link. The items are dataclasses with a schema (table
``modules``, unique on ``name``): an example of an item type that is not a ``scrapy.Item``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.items import Module
from crawler.spiders import StartUrlSpider

if TYPE_CHECKING:
    from collections.abc import Iterator


class ModulesSpider(StartUrlSpider):
    """Start URLs come from ``-a url=URL`` (several separated by white space) or, in
    distributed mode, from the Redis list ``modules:start_urls``."""

    name = "modules"

    example = "scrapy crawl modules -a url=https://host/py-modindex.html"

    def parse(self, response: Any) -> Iterator[Module]:
        """One Module per row of the index table that names a module (``<code class="xref">``):
        the rows of letters and blank separators name none."""
        for row in response.xpath("//table[contains(@class, 'modindextable')]//tr"):
            name = " ".join(row.xpath(".//code[contains(@class, 'xref')]//text()").getall()).strip()
            if not name:
                continue
            href = row.xpath("td[2]//a/@href").get()
            synopsis = " ".join(" ".join(row.xpath("td[3]/em//text()").getall()).split())
            yield Module(
                name=name,
                url=response.urljoin(href) if href else None,
                synopsis=synopsis or None,
                deprecated=bool(row.xpath("td[3]/strong[starts-with(normalize-space(), 'Deprecated')]")),
            )
