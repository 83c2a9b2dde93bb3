"""The Redis Lua scripts, read once from ``scrapy_frontier/lua/<name>.lua``.

The files ship as package data (in the wheel and in a scrapyd egg) and are read with
:mod:`importlib.resources`, so they load from a zipped egg too. Each file opens with its
contract: the ``KEYS`` and ``ARGV`` it takes and what it returns. A line ``--! include <name>``
is replaced by the file ``lua/<name>.lua`` (shared Lua functions, such as a rule used by two
scripts: Redis has no ``require``), and ``@NAME@`` by the value given for ``NAME``.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

_INCLUDE = "--! include "


@cache
def _read(name: str) -> str:
    text = files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
    return "".join(
        _read(line[len(_INCLUDE) :].strip()) if line.startswith(_INCLUDE) else line
        for line in text.splitlines(keepends=True)
    )


def source(name: str, **values: object) -> str:
    """The text of script ``name`` with its includes in place and ``@KEY@`` replaced by
    ``values[KEY]``. Raises ``FileNotFoundError`` for an unknown script and ``KeyError`` when a
    placeholder is left without a value."""
    text = _read(name)
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    if "@" in text:
        import re

        left = re.findall(r"@([A-Z_]+)@", text)
        if left:
            raise KeyError(f"script {name!r}: no value for {', '.join(sorted(set(left)))}")
    return text
