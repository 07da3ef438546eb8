"""Run the Kubernetes API emulator in its own process: `python -m bench.emulator_process DUMP LATENCY`.

Benchmarks start it this way so the emulator's JSON encoding and selector
matching (a real API server's work) do not share a CPU core and a GIL with the
client being measured. Prints the base URL on its first line, then serves until
stdin closes.
"""

from __future__ import annotations

import json
import sys

from tests.fakes.kube_api import running_emulator


def main() -> None:
    dump, latency = sys.argv[1], float(sys.argv[2])
    with open(dump, encoding="utf-8") as fh:
        objects = json.load(fh)
    with running_emulator(objects, latency=latency) as emu:
        print(emu.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
