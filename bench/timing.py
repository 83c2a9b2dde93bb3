"""Bench-only stats collector: when the first and the last response arrived, written to a file.

Used by the benchmark's crawls as ``-s STATS_CLASS=bench.timing.TimingStats -s
BENCH_STATS_FILE=path``: it is Scrapy's default collector, plus ``bench/first_response`` and
``bench/last_response`` (Unix time, seconds, float) and ``bench/first_cpu``, ``bench/last_cpu``
(the process's CPU seconds then) taken when ``response_received_count`` is incremented, and,
when the crawl closes, every stat as JSON in ``BENCH_STATS_FILE``. A stats class rather than an
extension because ``-s EXTENSIONS=...`` would replace the project's own extensions, and a
log-line count would need ``LOG_LEVEL=DEBUG`` (whose cost is in the figure).
"""

from __future__ import annotations

import json
import time
from typing import Any

from scrapy.statscollectors import MemoryStatsCollector


class TimingStats(MemoryStatsCollector):
    def inc_value(self, key: str, count: int = 1, start: int = 0, spider: Any = None) -> None:
        super().inc_value(key, count, start)
        if key == "response_received_count":
            now, cpu = time.time(), time.process_time()
            self._stats.setdefault("bench/first_response", now)
            self._stats.setdefault("bench/first_cpu", cpu)
            self._stats["bench/last_response"] = now
            self._stats["bench/last_cpu"] = cpu

    def _persist_stats(self, stats: dict[str, Any]) -> None:
        super()._persist_stats(stats)
        path = self._crawler.settings.get("BENCH_STATS_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(stats, f, default=str, indent=1, sort_keys=True)
