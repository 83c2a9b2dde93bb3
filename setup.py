"""Packaging for scrapyd eggs (`scrapyd-deploy` builds the egg from this file)."""

from setuptools import find_packages, setup

setup(
    name="crawler",
    version="0.1.0",
    packages=find_packages(include=["crawler", "crawler.*"]),
    entry_points={"scrapy": ["settings = crawler.settings"]},
    zip_safe=False,
)
