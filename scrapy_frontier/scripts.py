"""The Redis Lua scripts, read once from ``scrapy_frontier/lua/<name>.lua``.

The files ship as package data (in the wheel and in a scrapyd egg) and are read with
:mod:`importlib.resources`, so they load from a zipped egg too. Each script opens with its
contract: the ``KEYS`` and ``ARGV`` it takes, what it returns, its units and errors. A line
``--! include <name>`` is replaced by the library ``lua/lib/<name>.lua`` (Lua functions shared by
several scripts: Redis has no ``require``); a library is never a script of its own, and may include
other libraries the same way. ``@NAME@`` is replaced by the value given for ``NAME``. How the
scripts work and why: ``docs/scripts.md``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_INCLUDE = "--! include "


def _text(*path: str) -> str:
    return files(__package__).joinpath("lua", *path).read_text("utf-8")


def _expand(text: str) -> str:
    return "".join(
        _library(line[len(_INCLUDE) :].strip()) if line.startswith(_INCLUDE) else line
        for line in text.splitlines(keepends=True)
    )


@cache
def _library(name: str) -> str:
    return _expand(_text("lib", f"{name}.lua"))


@cache
def _read(name: str) -> str:
    return _expand(_text(f"{name}.lua"))


def library(name: str) -> str:
    """The text of library ``name`` (``lua/lib/<name>.lua``), as a placeholder's value."""
    return _library(name)


def names() -> list[str]:
    """The names of the scripts (``lua/*.lua``; the libraries of ``lua/lib/`` left out), sorted."""
    return sorted(
        f.name.removesuffix(".lua") for f in files(__package__).joinpath("lua").iterdir() if f.name.endswith(".lua")
    )


def source(name: str, **values: object) -> str:
    """The text of script ``name`` with its includes in place and ``@KEY@`` replaced by
    ``values[KEY]``. Raises ``FileNotFoundError`` for an unknown script (a library's name too) and
    ``KeyError`` when a placeholder is left without a value."""
    text = _read(name)
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    if "@" in text:
        left = re.findall(r"@([A-Z_]+)@", text)
        if left:
            raise KeyError(f"script {name!r}: no value for {', '.join(sorted(set(left)))}")
    return text
