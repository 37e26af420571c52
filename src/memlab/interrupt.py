"""Ctrl-C that cannot be lost while an experiment runs (used by ``memlab.runner``)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["StickyInterrupt"]


class StickyInterrupt:
    """Ctrl-C that cannot be lost: the SIGINT handler raises KeyboardInterrupt *and* remembers it.

    Python delivers the KeyboardInterrupt into whatever Python code runs when the signal arrives; if that is
    a callback whose exceptions are ignored (JAX's garbage-collection callback, a ``__del__``), Python prints
    it as "Exception ignored ... Traceback" and the run would go on to the end. :meth:`check` re-raises at
    the next safe point (every cell, progress step and the final write), so an interrupted run always
    stops, and while installed the unraisable-exception hook stays silent about the swallowed interrupt.
    """

    def __init__(self):
        self.hit = False

    def _handler(self, signum, frame):
        self.hit = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        # only where Python's own handler is active: not in threads, not where SIGINT is deliberately ignored
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        previous_hook = sys.unraisablehook

        def hook(unraisable):
            if not isinstance(unraisable.exc_value, KeyboardInterrupt):
                previous_hook(unraisable)

        sys.unraisablehook = hook
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_hook

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt


# ---------------------------------------------------------------- experiments
