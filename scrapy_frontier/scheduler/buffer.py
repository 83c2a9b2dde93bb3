"""The requests a worker leased and has not yet handed to Scrapy's engine.

A request whose send time a lease booked later (a host with a rate:
:mod:`scrapy_frontier.politeness`) waits here until that time, not in Scrapy's downloader: a
request waiting in the downloader takes one of its ``CONCURRENT_REQUESTS`` places, so a worker
whose places are full of requests booked for later sends nothing else, and the requests behind
them leave after their own booked times (and are booked again: one Redis call each).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy import Request


class SendBuffer:
    """Requests in the order they may leave: those with no send time booked, or one that has
    come, first in, first out, before them the booked ones whose time has come, in the order of
    their times. Times are ``time.monotonic()`` seconds."""

    def __init__(self) -> None:
        self._ready: deque[Request] = deque()
        self._booked: list[tuple[float, int, Request]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._ready) + len(self._booked)

    def __iter__(self) -> Iterator[Request]:
        yield from self._ready
        for _, _, request in self._booked:
            yield request

    def append(self, request: Request, send_at: float | None = None) -> None:
        """Buffer ``request``, to leave at ``send_at`` or later (``None``: now)."""
        if send_at is None:
            self._ready.append(request)
        else:
            heapq.heappush(self._booked, (send_at, next(self._order), request))

    def pop(self, now: float) -> Request | None:
        """The next request that may leave at ``now``, or ``None`` if none may yet."""
        if self._booked and self._booked[0][0] <= now:
            return heapq.heappop(self._booked)[2]
        if self._ready:
            return self._ready.popleft()
        return None

    def next_send(self) -> float | None:
        """When the first request booked for later may leave, ``None`` if none is."""
        return self._booked[0][0] if self._booked else None

    def clear(self) -> None:
        self._ready.clear()
        self._booked.clear()
