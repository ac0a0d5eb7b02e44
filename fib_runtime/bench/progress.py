"""A dependency-free progress bar with ETA (stderr).

On a terminal it redraws one line (``\\r``); otherwise it prints a line every ~5% (and at the
end), so CI logs stay short.
"""

from __future__ import annotations

import sys
import time


def _fmt(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = int(round(seconds))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream=None, width: int = 28):
        self.total = max(0, total)
        self.done = 0
        self.enabled = enabled and total > 0
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_pct = -1

    def eta(self) -> float:
        if self.done == 0:
            return float("nan")
        el = time.monotonic() - self.t0
        return el / self.done * (self.total - self.done)

    def line(self, note: str = "") -> str:
        frac = self.done / self.total if self.total else 1.0
        fill = int(frac * self.width)
        bar = "#" * fill + "." * (self.width - fill)
        el = time.monotonic() - self.t0
        return (f"[{bar}] {self.done}/{self.total} {frac * 100:5.1f}% "
                f"elapsed {_fmt(el)} ETA {_fmt(self.eta())}" + (f"  {note}" if note else ""))

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self.line(note)[:160].ljust(120))
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
            return
        pct = int(self.done * 20 / self.total) if self.total else 20
        if pct != self._last_pct or self.done >= self.total:
            self._last_pct = pct
            self.stream.write(self.line(note) + "\n")
            self.stream.flush()
