"""Ctrl-C (or SIGTERM) that cannot be lost while an experiment runs (used by ``memlab.runner``)."""

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

    SIGTERM (a cluster's scheduler, ``kill``) stops the run the same way. Only the first signal raises: a second
    Ctrl-C while the run stops (its workers being ended, its claims released) would cut that short and print a
    traceback from the middle of it.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.hit = False

    def _handler(self, signum, frame):
        if self.hit:  # already stopping
            return
        self.hit = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        # only where Python's own handler is active: not in threads, not where SIGINT is deliberately ignored
        if threading.current_thread() is not threading.main_thread() or \
                signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield
            return
        # SIGTERM too where it would kill the process outright (a handler someone installed is left alone)
        signals = [s for s in self.SIGNALS if s == signal.SIGINT or signal.getsignal(s) == signal.SIG_DFL]
        previous = {s: signal.signal(s, self._handler) for s in signals}
        previous_hook = sys.unraisablehook

        def hook(unraisable):
            if not isinstance(unraisable.exc_value, KeyboardInterrupt):
                previous_hook(unraisable)

        sys.unraisablehook = hook
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            sys.unraisablehook = previous_hook

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt


# ---------------------------------------------------------------- experiments
