"""Redaction in linear time (issue 34, SPEC §11): `.venv/bin/python -m bench.bench_redaction`.

Prints the time to pass hostile and ordinary text through the one door (`outside`: strip,
redact with detect-secrets' detectors and taubot's shapes compiled for RE2, the decoded and
joined-line views): a 1 MB line, 10,000 repeats of `a%3A%2F%2F` (which took ~30 s with the old
backtracking URL rule), a 1 MB line of base64, and a 200-line log tail. The redactor is a pure
function, so it is measured here in-process; the monitor's sweep with a hostile line is
`bench.bench_monitor --hostile-line`.
"""

from __future__ import annotations

import statistics
import time

from workers.outside.text import outside, redact_lines

CASES = {
    "1 MB ordinary line": "step=1200 loss=0.4123 lr=4e-05 tokens/s=18234 " * 22_000,
    "10,000 x a%3A%2F%2F": "a%3A%2F%2F" * 10_000,
    "1 MB of 'password=' keys": "password=x " * 95_000,
    "1 MB line of base64": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo" * 30_000,
    "100 kB hostile mixed line": ("https://a:b" * 3000 + "%40" * 3000 + "eyJ" * 3000
                                  + "xoxb-" * 3000)[:100_000],
}


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main() -> None:
    for name, text in CASES.items():
        best, median = _best(lambda t=text: outside(t, limit=len(t) + 1))
        print(f"redaction: {name} ({len(text):,} chars): best {best * 1000:.1f} ms, "
              f"median {median * 1000:.1f} ms")
    tail = [f"{{'loss': {i / 1000:.4f}, 'learning_rate': 4e-05, 'epoch': {i / 100:.2f}}}" for i in range(200)]
    best, median = _best(lambda: redact_lines(tail))
    print(f"redaction: 200-line log tail: best {best * 1000:.2f} ms, median {median * 1000:.2f} ms")


if __name__ == "__main__":
    main()
