"""Per-round figures and ratios of one ../shared/bench/compare.sh run (its medians hide how the rounds spread on a
shared machine): for each pair REF:PEER, each round's value of both and PEER/REF, with the 1-minute load average at
which each server's run started (read from compare.sh's output, saved as OUT/run.log), then the medians.

    python3 bench/rounds.py OUT a2a-sdk-cluster-x1:relaykit-x1 [REF:PEER ...]

Ratios are PEER/REF as printed: above 1 is better for the rate rows (/s), worse for CPU per request.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

METRICS = [
    ("send_c1.rps", "SendMessage c=1 req/s"),
    ("send_c16.rps", "SendMessage c=16 req/s"),
    ("send_c64.rps", "SendMessage c=64 req/s"),
    ("send_c1.server_cpu_us_per_op", "server CPU µs/req c=1"),
    ("send_c16.server_cpu_us_per_op", "server CPU µs/req c=16"),
    ("stream1k.events_per_s", "1 stream x1000 events/s"),
]
_START = re.compile(r"^== round (\d+)/\d+: (\S+) .* load ([\d.]+)$")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    loads: dict[tuple[str, int], str] = {}
    log = out / "run.log"
    if log.exists():
        for line in log.read_text().splitlines():
            if found := _START.match(line.strip()):
                loads[(found.group(2), int(found.group(1)))] = found.group(3)
    for pair in argv[1:]:
        ref, peer = pair.split(":", 1)
        rounds = sorted(int(p.name.rsplit(".r", 1)[1].split(".")[0]) for p in out.glob(f"{ref}.r*.json"))
        data = {
            (label, r): json.loads(path.read_text())["metrics"]
            for label in (ref, peer)
            for r in rounds
            if (path := out / f"{label}.r{r}.json").exists()
        }
        print(f"\n### {peer} / {ref}, per round\n")
        print("| metric | " + " | ".join(f"round {r} ({ref} / {peer})" for r in rounds) + " | median of ratios |")
        print("|---|" + "---|" * (len(rounds) + 1))
        loads_row = [f"{loads.get((ref, r), '?')} / {loads.get((peer, r), '?')}" for r in rounds]
        print("| 1-min load at start | " + " | ".join(loads_row) + " | |")
        for key, title in METRICS:
            cells, ratios = [], []
            for r in rounds:
                a, b = data.get((ref, r), {}).get(key), data.get((peer, r), {}).get(key)
                ratio = b / a if a and b is not None else None
                if ratio is not None:
                    ratios.append(ratio)
                cells.append(f"{_fmt(a)} / {_fmt(b)} = **{_fmt(ratio)}**")
            median = _fmt(statistics.median(ratios)) if ratios else "-"
            print(f"| {title} | " + " | ".join(cells) + f" | {median} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
