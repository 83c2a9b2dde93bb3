"""The requests a worker leased and has not yet handed to Scrapy's engine.

A request whose send time a lease booked later (a host with a rate:
:mod:`scrapy_frontier.politeness`) waits here until that time, not in Scrapy's downloader: a
request waiting in the downloader takes one of its ``CONCURRENT_REQUESTS`` places, so a worker
whose places are full of requests booked for later sends nothing else, and the requests behind
them leave after their own booked times (and are booked again: one Redis call each).

A request that only AutoThrottle paces may leave late (its delay is a minimum, as in Scrapy's
AutoThrottle), so while it waits for its time it is not counted against the worker's prefetch
(:attr:`SendBuffer.counted`): a worker holds as many requests that may leave soon as it would
with no AutoThrottle. One that a rate booked is counted: it must leave on time or be booked again.
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
    """Requests in the order they may leave: first those whose booked send time has come, in
    the order of their times, then those with no send time booked, first in, first out. Times
    are ``time.monotonic()`` seconds."""

    def __init__(self) -> None:
        self._due: deque[Request] = deque()
        self._free: deque[Request] = deque()
        self._later: list[tuple[float, int, Request, bool]] = []
        self._order = itertools.count()
        self._uncounted = 0

    def __len__(self) -> int:
        return len(self._due) + len(self._free) + len(self._later)

    def __iter__(self) -> Iterator[Request]:
        yield from self._due
        yield from self._free
        for _, _, request, _ in self._later:
            yield request

    @property
    def counted(self) -> int:
        """How many requests count against the prefetch: all but those booked for later that
        only AutoThrottle paces."""
        return len(self) - self._uncounted

    def append(self, request: Request, send_at: float | None, now: float, strict: bool = True) -> None:
        """Buffer ``request``, booked to leave at ``send_at`` (``None``: no booking), by a rate
        (``strict``) or by AutoThrottle alone."""
        if send_at is None:
            self._free.append(request)
        elif send_at <= now:
            self._due.append(request)
        else:
            heapq.heappush(self._later, (send_at, next(self._order), request, strict))
            if not strict:
                self._uncounted += 1

    def _advance(self, now: float) -> None:
        later = self._later
        while later and later[0][0] <= now:
            _, _, request, strict = heapq.heappop(later)
            if not strict:
                self._uncounted -= 1
            self._due.append(request)

    def pop(self, now: float) -> Request | None:
        """The next request that may leave at ``now``, or ``None`` if none may yet."""
        self._advance(now)
        if self._due:
            return self._due.popleft()
        if self._free:
            return self._free.popleft()
        return None

    def next_send(self) -> float | None:
        """When the first request booked for later may leave, ``None`` if none is."""
        return self._later[0][0] if self._later else None

    def clear(self) -> None:
        self._due.clear()
        self._free.clear()
        self._later.clear()
        self._uncounted = 0
