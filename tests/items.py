"""Item types of the test spiders (``STORAGE_ITEM_TYPES`` defaults to this module when
``SPIDER_MODULES`` is ``tests.spiders``): a dataclass and an attrs class, each with a schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import attrs


@dataclass
class Article:
    """A page as the ``kinds`` spider sees it: table ``articles``, unique on ``url``."""

    table: ClassVar[str] = "articles"
    unique_key: ClassVar[str] = "url"

    url: str = field(
        metadata={"type": str, "required": True, "max_length": 2048, "ascii": True, "on_too_long": "reject"}
    )
    title: str | None = field(default=None, metadata={"type": str, "max_length": 256})
    words: int = field(default=0, metadata={"type": int})


@attrs.define
class Heading:
    """The first h1 of a page: table ``headings``, unique on ``anchor``."""

    table: ClassVar[str] = "headings"
    unique_key: ClassVar[str] = "anchor"

    anchor: str = attrs.field(
        metadata={"type": str, "required": True, "max_length": 2048, "ascii": True, "on_too_long": "reject"}
    )
    level: int = attrs.field(metadata={"type": int, "required": True})
    text: str | None = attrs.field(default=None, metadata={"type": str, "max_length": 512})
