"""What a table's daemon costs before it does anything: each dependency's import time and
memory, the floor they make together, and what tableside's own modules add on top, with the
share spent building dataclasses and pydantic models.

Every figure is a fresh interpreter (``python -c``), run ``--rounds`` times, interleaved so that
the machine's noise falls on every row alike; the median is printed. Wall time is the import
alone (``time.perf_counter`` around it, so the interpreter's own start is not counted); RSS is
``VmRSS`` once it is done.

    .venv/bin/python bench/imports.py --rounds 7

Rows:

* ``python``: nothing imported (what the interpreter holds after ``site``);
* ``stdlib``: what the daemon needs of the standard library (asyncio, ssl, sqlite3, json,
  logging, argparse, tomllib);
* ``+ <dependency>``: the standard library, then that one dependency (its marginal cost);
* ``floor``: the standard library and every dependency together;
* ``tableside.daemon.app``: the daemon as ``tableside run`` imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from provenance import ROOT, commit, compiled, machine

STDLIB = "asyncio, ssl, sqlite3, json, logging, argparse, tomllib"
#: each dependency the daemon imports, as it imports it (its MQTT client is its own, mqtt/;
#: prometheus-client and pyusb load only when a table uses them)
DEPENDENCIES = {
    "pydantic": "pydantic",
    # as tableside/__init__.py imports it: without rich, which structlog.dev would otherwise load
    "structlog": "sys.modules['rich'] = None; import structlog; del sys.modules['rich']",
    "cryptography": "cryptography.hazmat.primitives.asymmetric.ed25519, "
    "cryptography.hazmat.primitives.serialization",
    "pyserial": "serial",
}

PROBE = """
import time, sys, dataclasses
built = [0.0, 0]
original = dataclasses.dataclass
def timed(cls=None, /, **options):  # dataclasses.dataclass, timed; modules import it after this
    def build(cls):
        t = time.perf_counter()
        try:
            return original(cls, **options)
        finally:
            built[0] += time.perf_counter() - t
            built[1] += 1
    return build if cls is None else build(cls)
if {count}:
    dataclasses.dataclass = timed
started = time.perf_counter()
{imports}
took = time.perf_counter() - started
rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
print(took, rss / 1024, built[0], built[1], len(sys.modules))
"""


def probe(imports: str, count: bool = False) -> tuple[float, float, float, int, int]:
    lines = [m.strip() for m in imports.split(",") if m.strip()]
    code = PROBE.format(imports="\n".join(m if " " in m else f"import {m}" for m in lines),
                        count=count)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.split()  # fmt: skip
    return float(out[0]), float(out[1]), float(out[2]), int(out[3]), int(out[4])


APP = "tableside.daemon.app"
#: the same again with every dataclass it builds timed (not counted in its import time)
COUNTED = "(its dataclasses timed)"


def rows() -> dict[str, str]:
    table = {"python": "", "stdlib": STDLIB}
    for name, modules in DEPENDENCIES.items():
        table[f"+ {name}"] = f"{STDLIB}, {modules}"
    table["floor"] = ", ".join([STDLIB, *DEPENDENCIES.values()])
    table[APP] = "tableside.daemon.app"
    table[COUNTED] = "tableside.daemon.app"
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write every round here")
    args = parser.parse_args()

    compiled(ROOT)  # as an install leaves it, and as bench/latency.py runs the daemon
    table = rows()
    samples: dict[str, list[tuple[float, float, float, int, int]]] = {name: [] for name in table}
    for _ in range(args.rounds):
        for name, imports in table.items():  # interleaved: noise falls on every row alike
            samples[name].append(probe(imports, count=name == COUNTED))

    def median(name: str, i: int) -> float:
        return statistics.median(s[i] for s in samples[name])

    stdlib_s, stdlib_mib = median("stdlib", 0), median("stdlib", 1)
    print(f"{'row':24} {'import ms':>10} {'over stdlib':>12} {'RSS MiB':>8} {'over stdlib':>12}"
          f" {'modules':>8}")  # fmt: skip
    for name in table:
        if name == COUNTED:
            continue
        took, mib = median(name, 0), median(name, 1)
        print(f"{name:24} {took * 1000:10.1f} {(took - stdlib_s) * 1000:+12.1f} {mib:8.1f}"
              f" {mib - stdlib_mib:+12.1f} {median(name, 4):8.0f}")  # fmt: skip
    floor_s, floor_mib = median("floor", 0), median("floor", 1)
    print(
        f"\n{APP} over the floor: {(median(APP, 0) - floor_s) * 1000:+.1f} ms, "
        f"{median(APP, 1) - floor_mib:+.1f} MiB; building its {median(COUNTED, 3):.0f} "
        f"dataclasses takes {median(COUNTED, 2) * 1000:.1f} ms of it"
    )
    if args.json:
        args.json.write_text(json.dumps({
            "command": " ".join(["bench/imports.py", *sys.argv[1:]]),
            "commit": commit(),
            "machine": machine(),
            "load": [round(x, 2) for x in os.getloadavg()],
            "rows": table,
            "fields": ["import_s", "rss_mib", "dataclasses_s", "dataclasses", "modules"],
            "samples": samples,
        }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
