"""The page cache behind each segment's tail, handed back to the kernel off the event loop.

:class:`strom.log.segment.LogSegment` keeps the last ``strom.log.page.cache.window.bytes`` of a
segment's fresh tail in the page cache and advises the pages behind it away
(``posix_fadvise(DONTNEED)``) every 16 MiB. The first advice of a range still dirty submits its
writeback in the caller's context: ext4 allocates the blocks and queues the I/O, about a
millisecond per 16 MiB, which on the event loop delayed every request behind it (on a follower,
the next replica fetch and so the leader's ``acks=all`` answers). :class:`PageCacheReleaser`
runs the advice on one worker thread instead, on a duplicate of the segment's descriptor (the
segment may be closed or deleted meanwhile; the duplicate keeps the file until the advice is
done). The advice is only advice: a failure is ignored, as inline.

The same thread asks the kernel for released ranges a consumer catching up reads back
(``posix_fadvise(WILLNEED)``, :meth:`PageCacheReleaser.prefetch`): that call allocates the pages
and submits their reads before it returns, ~0.2 ms per MiB, 1.7 ms for the usual 8 MiB on the
loop. A segment asks ahead of its reader, so the pages are normally asked for long before the
fetch that sends them; one not yet there is read by ``sendfile`` itself, as without the advice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..log import segment
from ..log.segment import advise_dontneed, advise_willneed, set_page_cache_releaser

__all__ = ["PageCacheReleaser"]


def _advise_and_close(advise: Callable[[int, int, int], None], fd: int, offset: int, length: int) -> None:
    try:
        advise(fd, offset, length)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


class PageCacheReleaser:
    """One worker thread advising the ranges :class:`~strom.log.segment.LogSegment` releases
    and those it asks back."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strom-page-cache")
        self.closed = False
        self.submitted = 0

    def install(self) -> None:
        set_page_cache_releaser(self, self.prefetch)

    def __call__(self, fd: int, offset: int, length: int) -> None:
        self._submit(advise_dontneed, fd, offset, length)

    def prefetch(self, fd: int, offset: int, length: int) -> None:
        self._submit(advise_willneed, fd, offset, length)

    def _submit(self, advise: Callable[[int, int, int], None], fd: int, offset: int, length: int) -> None:
        if self.closed:
            advise(fd, offset, length)
            return
        try:
            dup = os.dup(fd)
        except OSError:  # out of descriptors: advise inline rather than not at all
            advise(fd, offset, length)
            return
        self.submitted += 1
        self._executor.submit(_advise_and_close, advise, dup, offset, length)

    def close(self) -> None:
        """Stop taking ranges (later ones are advised inline) and finish the queued ones."""
        self.closed = True
        if segment.PAGE_CACHE.releaser is self:
            set_page_cache_releaser(None)
        self._executor.shutdown(wait=True)
