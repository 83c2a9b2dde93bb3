"""``SCHEDULER_FLUSH_ON_START``: the first worker of a crawl starts it over (scrapy-redis's
``Scheduler.flush`` at open), without wiping a crawl other workers are running."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_frontier.config import fail_at_open
from scrapy_frontier.connection import REDIS_FAILURES, describe_error, text
from scrapy_frontier.frontier import Frontier
from scrapy_frontier.scripts import source
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)


async def flush_on_start(crawler: Crawler, client: Any, keys: Keys, node_id: str, node_timeout: float) -> bool:
    """Clear the crawl's frontier, dupefilter (with its meta: the crawl's layout and epoch), per-host
    politeness state and every node's leases and start-URL leases, when no live node is
    registered (``node_timeout``, seconds); this node is registered in the same script
    (``lua/nodes_claim_alone.lua``), so two workers starting together clear it once. The start
    URLs, their dead letters, the failed requests, the live rates, the items and the cluster totals
    stay; pending items that dead nodes were replaying go back to the pending list. A worker that
    finds live nodes clears nothing and says so. Returns False when Redis failed (reported with
    :func:`~scrapy_frontier.config.fail_at_open`)."""
    try:
        claim = client.register_script(source("nodes_claim_alone"))
        live, dead = await claim(keys=[keys.nodes], args=[int(node_timeout * 1000), node_id])
        if live:
            logger.info(
                "SCHEDULER_FLUSH_ON_START: the crawl %r has %s: joined as it is, nothing cleared",
                keys.crawl,
                plural(int(live), "live worker"),
            )
            return True
        shards = await client.hget(keys.dupefilter_meta, "shards")
        recorded = keys.with_shards(int(shards) if shards else 0)
        for node in (text(n) for n in dead):
            while await client.lmove(recorded.items_replaying(node), recorded.items_pending, "LEFT", "RIGHT"):
                pass
            await client.delete(recorded.node_info(node))
        await Frontier(client, recorded, node_id).clear(leases=True)
    except REDIS_FAILURES as exc:
        fail_at_open(
            crawler, "SCHEDULER_FLUSH_ON_START: cannot clear the crawl %r (%s)", keys.crawl, describe_error(exc)
        )
        return False
    logger.info(
        "SCHEDULER_FLUSH_ON_START: no other live worker: cleared the frontier, dupefilter and leases of the crawl %r",
        keys.crawl,
    )
    return True
