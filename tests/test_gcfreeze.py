"""GC_FREEZE_ENABLED: startup objects leave the garbage collector's full collections once the spider is
open; startup garbage is collected first, never frozen."""

from __future__ import annotations

import gc
import weakref

import pytest
from scrapy import Spider
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from scrapy_frontier.gcfreeze import GcFreeze


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture
def unfreeze():
    yield
    gc.unfreeze()


def test_objects_alive_at_open_are_frozen_and_garbage_is_collected_first(unfreeze):
    crawler = get_crawler(Spider, {"GC_FREEZE_ENABLED": True})
    extension = GcFreeze.from_crawler(crawler)
    kept = _Node()
    garbage = weakref.ref(_Node())
    assert garbage() is not None  # the cycle outlives its last reference
    gc.unfreeze()
    extension.spider_opened(Spider(name="s"))
    assert garbage() is None, "startup garbage was frozen instead of collected"
    assert gc.get_freeze_count() > 1000
    assert not any(o is kept for o in gc.get_objects(generation=2)), (
        "an object alive at open is still walked by full collections"
    )


def test_off_when_the_setting_says_so():
    with pytest.raises(NotConfigured):
        GcFreeze.from_crawler(get_crawler(Spider, {"GC_FREEZE_ENABLED": False}))
