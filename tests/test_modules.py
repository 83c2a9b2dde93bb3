"""The ``modules`` spider (a dataclass item with a schema) by a real ``scrapy crawl`` into the real
MariaDB, checked against the module index file itself."""

from __future__ import annotations

import html
import re

from tests.servers import DOCS


def modules_in_index(base_url: str) -> set[tuple[str, str | None, str | None, int]]:
    """``(name, url, synopsis, deprecated)`` of every module the index lists, read from the file
    with regular expressions (not the spider's XPath): one table row per module, whose
    ``<code class="xref">`` holds the name and ``<a href>`` the page (none for a package without
    one) in its second cell (with the platforms, ``<em>(Linux)</em>``), and its third cell the
    synopsis (``<em>``) and the mark ``<strong>Deprecated:</strong>``."""
    text = (DOCS / "py-modindex.html").read_text(encoding="utf-8")
    modules = set()
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", text, re.S):
        name = re.search(r'<code class="xref">(.*?)</code>', row)
        if not name:
            continue
        href = re.search(r'<a href="([^"]*)"><code', row)
        third = re.split(r"<td[^>]*>", row)[3]
        em = re.search(r"<em>(.*?)</em>", third, re.S)
        synopsis = " ".join(html.unescape(re.sub(r"<[^>]+>", "", em.group(1))).split()) if em else ""
        modules.add(
            (
                html.unescape(name.group(1)),
                base_url + html.unescape(href.group(1)) if href else None,
                synopsis or None,
                int("<strong>Deprecated:</strong>" in third),
            )
        )
    return modules


def test_modules_spider_stores_every_module_of_the_index(docs_site, start_worker, mysql_url, mysql_query):
    expected = modules_in_index(docs_site.url)
    assert len(expected) > 300 and sum(m[3] for m in expected) > 10 and any(m[1] is None for m in expected)
    worker = start_worker("modules", env={"MYSQL_URL": mysql_url}, args=["-a", f"url={docs_site.url}py-modindex.html"])
    assert worker.wait() == 0, worker.output[-3000:]
    assert "Traceback" not in worker.output and " ERROR: " not in worker.output
    stored = mysql_query("SELECT name, url, synopsis, deprecated FROM modules")
    assert len(stored) == len(expected) and set(stored) == expected
    assert worker.stat("storage/written/modules") == len(expected)
    # the tables of the types this crawl produced, not every table of crawler/items.py
    assert {row[0] for row in mysql_query("SHOW TABLES")} == {"modules"}
