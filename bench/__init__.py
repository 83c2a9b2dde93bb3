"""The benchmarks (bench/README.md): each script runs as a module from the repository root,
``python -m bench.speed``, which puts the root on ``sys.path`` for ``bench``, ``crawler``,
``scrapy_frontier`` and the servers shared with the tests (``tests.servers``, ``tests.loopback``).
"""
