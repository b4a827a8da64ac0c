"""Failed log-ins, limited per source address: a token that is not known (typed on the log-in
page, or sent to /api) is a failure; after FAILURES of them within WINDOW_S from one address,
every log-in from it (a right token too: a guess must not be told it was right) gets 429 for
BLOCK_S. The service's log says so, once per limit, and the instructor's page shows the counts.

The counts live in the service's memory: a restart forgets them, which costs an attacker a
restart of the service, not a way around the limit.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

FAILURES = 20
WINDOW_S = 60.0
BLOCK_S = 60.0
MAX_SOURCES = 10_000        # addresses remembered; past it, quiet ones are forgotten


@dataclass
class Source:
    recent: collections.deque = field(default_factory=collections.deque)     # monotonic times of failures
    failures: int = 0                    # since the service started
    limited: int = 0                     # times it was limited
    refused: int = 0                     # log-ins answered 429
    blocked_until: float = 0.0
    last_failure: float | None = None    # time.time()


class Blocked(Exception):
    def __init__(self, retry_after_s: int):
        super().__init__(retry_after_s)
        self.retry_after_s = retry_after_s


class LoginGuard:
    def __init__(self, say=print, clock=time.monotonic):
        self.sources: dict[str, Source] = {}
        self.lock = threading.Lock()
        self.say = say
        self.clock = clock

    def check(self, address: str) -> None:
        """Blocked(seconds left) while `address` is limited."""
        with self.lock:
            source = self.sources.get(address)
            t = self.clock()
            if source is not None and source.blocked_until > t:
                source.refused += 1
                raise Blocked(max(1, int(source.blocked_until - t + 0.999)))

    def failed(self, address: str) -> None:
        with self.lock:
            t = self.clock()
            if address not in self.sources and len(self.sources) >= MAX_SOURCES:
                self._forget(t)
            source = self.sources.setdefault(address, Source())
            source.failures += 1
            source.last_failure = time.time()
            source.recent.append(t)
            while source.recent and source.recent[0] <= t - WINDOW_S:
                source.recent.popleft()
            if len(source.recent) >= FAILURES and source.blocked_until <= t:
                source.blocked_until = t + BLOCK_S
                source.limited += 1
                source.recent.clear()
                self.say(f"log-ins from {address} limited for {BLOCK_S:.0f} s: {FAILURES} failed log-ins within "
                         f"{WINDOW_S:.0f} s")

    def _forget(self, t: float) -> None:
        """Many addresses: drop those neither limited nor failing within the window, then, if still
        too many, the unlimited ones that failed longest ago (their counts go; the log keeps their
        limits). A limited address is never forgotten while it is limited."""
        free = [a for a, s in self.sources.items() if s.blocked_until <= t]
        for address in [a for a in free if not self.sources[a].recent or self.sources[a].recent[-1] <= t - WINDOW_S]:
            del self.sources[address]
        free = sorted((a for a in free if a in self.sources), key=lambda a: self.sources[a].recent[-1])
        for address in free[:max(0, len(self.sources) - MAX_SOURCES // 2)]:
            del self.sources[address]

    def counts(self) -> list[dict]:
        """Each address with a failure, most failures first (the instructor's page)."""
        t = self.clock()
        with self.lock:
            rows = [{"address": a, "failures": s.failures, "limited": s.limited, "refused": s.refused,
                     "blocked_s": max(0, int(s.blocked_until - t + 0.999)), "last_failure": s.last_failure}
                    for a, s in self.sources.items()]
        return sorted(rows, key=lambda r: -r["failures"])
