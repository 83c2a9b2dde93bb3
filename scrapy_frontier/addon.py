"""The add-on that switches a crawl to distributed mode when ``REDIS_URL`` is set.

Scrapy add-ons: https://docs.scrapy.org/en/latest/topics/addons.html. Settings given on the
command line or by a spider (higher priority than ``addon``) still win.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class DistributedAddon:
    def update_settings(self, settings: BaseSettings) -> None:
        if not settings.get("REDIS_URL"):
            return
        settings.set("SCHEDULER", "scrapy_frontier.scheduler.FrontierScheduler", "addon")
        # The frontier does the dedup; Scrapy's dupefilter would only see this worker's requests.
        settings.set("DUPEFILTER_CLASS", "scrapy.dupefilters.BaseDupeFilter", "addon")
