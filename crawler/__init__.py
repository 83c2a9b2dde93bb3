"""This repository's Scrapy project: its settings, the ``site`` spider and its item types.

The distributed machinery it runs on is the reusable library :mod:`scrapy_frontier`."""
