"""Packaging. ``pip install .`` builds the reusable library, ``scrapy_frontier``, with its
dependencies from ``pyproject.toml``. ``scrapyd-deploy`` runs ``python setup.py bdist_egg``: the
egg also carries this Scrapy project (``crawler/``) and the ``scrapy`` settings entry point that
scrapyd reads, and nothing else; a pip install never ships a package named ``crawler``: the egg is
built in ``build/egg``, since setuptools packs whatever its build tree holds and an egg's
``crawler/`` left in ``build/lib`` would go into the next wheel of this checkout.

The ``scrapy`` commands it adds (``status``, ``push``, ``requeue``, ``replay``, ``forget``) are
available in every project of the environment; it replaces none of Scrapy's own."""

import sys

from setuptools import find_namespace_packages, setup

EGG = "bdist_egg" in sys.argv
COMMANDS = ["status", "push", "requeue", "replay", "forget"]
entry_points = {"scrapy.commands": [f"{name} = scrapy_frontier.commands.{name}:Command" for name in COMMANDS]}
if EGG:
    entry_points["scrapy"] = ["settings = crawler.settings"]

setup(
    # Namespace discovery so that scrapy_frontier/lua and lua/lib (data, no __init__.py) are packages of their own.
    packages=find_namespace_packages(
        include=["scrapy_frontier", "scrapy_frontier.*"] + (["crawler", "crawler.*"] if EGG else []),
        exclude=["*.__pycache__"],
    ),
    package_data={
        "scrapy_frontier": ["py.typed"],
        "scrapy_frontier.lua": ["*.lua"],
        "scrapy_frontier.lua.lib": ["*.lua"],
    },
    entry_points=entry_points,
    zip_safe=False,
    options={"build": {"build_base": "build/egg"}} if EGG else {},
)
