"""The Kubernetes API emulator in its own process: `python -m bench.emulator_process DUMP LATENCY [CERT KEY]`.

Benchmarks start it this way so the emulator's JSON encoding and selector
matching (a real API server's work) do not share a CPU core and a GIL with the
client being measured. With CERT and KEY it serves https with that certificate.
Prints the base URL on its first line, then serves until stdin closes.
"""

from __future__ import annotations

import json
import ssl
import sys

from tests.fakes.kube_api import running_emulator


def main() -> None:
    dump, latency = sys.argv[1], float(sys.argv[2])
    context = None
    if len(sys.argv) > 4:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    with open(dump, encoding="utf-8") as fh:
        objects = json.load(fh)
    with running_emulator(objects, latency=latency, ssl_context=context) as emu:
        print(emu.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
