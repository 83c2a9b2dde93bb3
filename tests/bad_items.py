"""Item types whose schemas cannot work, for the start-up check (named in STORAGE_ITEM_TYPES)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import attrs


@dataclass
class UnknownType:
    table: ClassVar[str] = "unknown_type"
    unique_key: ClassVar[str] = "name"

    name: str = field(metadata={"type": str, "required": True, "max_length": 100})
    size: int = field(default=0, metadata={"type": "integer"})


@attrs.define
class KeyNotAField:
    table: ClassVar[str] = "key_not_a_field"
    unique_key: ClassVar[str] = "slug"

    name: str = attrs.field(metadata={"type": str, "required": True, "max_length": 100})
