#!/usr/bin/env bash
# The failover fault campaign outside CI (issue 31): one episode per seed of the process
# test `failover_campaign` (three controllers, a name server, two groups of a master and a
# slave in controller mode, producers, a consumer, one seeded fault, the history checker),
# each run on its own so a failing episode does not end the campaign. Loopback only.
#
#   scripts/failover_campaign.sh [START..END] [OUT_DIR] [STEP]
#
# STEP (default 1) runs every STEP-th seed from START: seeds take the twelve fault kinds in
# turn, so `8..200 OUT 12` runs only the damaged-slave episodes. The disk-stall episodes
# (`11..200 OUT 12`) mount a loop file system per broker: they need root.
# Defaults: seeds 0..200 (every fault kind in turn), results in target/failover-campaign:
# `episodes.log` (one line of figures per episode), `failed-<seed>.txt` (a failing
# episode's output: its findings and every process's log tail) and `summary.md` (per kind:
# episodes, failures, the medians of the time to another master and to its first
# acknowledgement, the longest time from the fault to the faulted master's last
# acknowledgement). Exits non-zero if any episode failed.
set -euo pipefail
cd "$(dirname "$0")/.."

seeds="${1:-0..200}"
out="${2:-target/failover-campaign}"
step="${3:-1}"
start="${seeds%%..*}"
end="${seeds##*..}"
if ! [[ "$start" =~ ^[0-9]+$ && "$end" =~ ^[0-9]+$ && "$start" -lt "$end" && "$step" =~ ^[1-9][0-9]*$ ]]; then
    echo "seeds must be START..END with START < END and STEP a positive number, not $seeds $step" >&2
    exit 2
fi
mkdir -p "$out"
log="$(cd "$out" && pwd)/episodes.log"
: > "$log"

cargo test --test process --no-run 2>&1 | tail -1
failed=0
for ((seed = start; seed < end; seed += step)); do
    if ! RINGMQ_CAMPAIGN_LOG="$log" RINGMQ_CAMPAIGN_SEEDS="$seed..$((seed + 1))" \
        cargo test -q --test process failover_campaign::failover_campaign_episodes \
        > "$out/episode.txt" 2>&1; then
        failed=$((failed + 1))
        mv "$out/episode.txt" "$out/failed-$seed.txt"
        echo "episode $seed FAILED: $out/failed-$seed.txt"
        # A failing episode writes no line of figures: note it for the summary.
        echo "episode $seed FAILED" >> "$log"
    fi
done
rm -f "$out/episode.txt"

python3 - "$log" "$out/summary.md" <<'EOF'
import re, statistics, sys
from collections import defaultdict

def seconds(text):
    if text is None or text == "None":
        return None
    m = re.match(r"Some\(([\d.]+)(ms|s|µs)\)", text)
    value = float(m.group(1))
    return {"s": value, "ms": value / 1e3, "µs": value / 1e6}[m.group(2)]

kinds = defaultdict(lambda: {"episodes": 0, "failed": 0, "elected": [], "acked": [], "zombie": [],
                             "sends": 0, "acks": 0, "unknown": 0, "refused": 0})
failed_seeds = []
for line in open(sys.argv[1]):
    if line.endswith("FAILED\n"):
        failed_seeds.append(line.split()[1])
        continue
    m = re.match(r"episode (\d+) \(\d shard\(s\)\): (\w+) on group", line)
    if not m:
        continue
    kind = kinds[m.group(2)]
    kind["episodes"] += 1
    seen = re.search(r"another master seen (\S+) and its first ack (\S+) after", line)
    for key, text in (("elected", seen.group(1)), ("acked", seen.group(2))):
        value = seconds(text)
        if value is not None:
            kind[key].append(value)
    zombie = re.search(r"the faulted master's last ack (\S+) after it", line)
    if zombie and seconds(zombie.group(1)) is not None:
        kind["zombie"].append(seconds(zombie.group(1)))
    counts = re.search(r"sends (\d+) \(acked (\d+), refused (\d+) .*?, unknown (\d+)\)", line)
    kind["sends"] += int(counts.group(1))
    kind["acks"] += int(counts.group(2))
    kind["refused"] += int(counts.group(3))
    kind["unknown"] += int(counts.group(4))
    findings = re.search(r"lost (\d+), unexpected (\d+), duplicated (\d+), shared offsets (\d+), "
                         r"read then lost (\d+), deposed acks (\d+), divergent (\d+)", line)
    if any(int(n) for n in findings.groups()):
        kind["failed"] += 1

def median(values):
    return f"{statistics.median(values):.2f} s" if values else "-"

def longest(values):
    return f"{max(values):.2f} s" if values else "-"

rows = ["| fault | episodes | failed | another master seen (median) | its first SEND_OK (median) "
        "| faulted master's last SEND_OK (max) | sends | acked | refused | unknown |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for name, k in sorted(kinds.items()):
    rows.append(f"| {name} | {k['episodes']} | {k['failed']} | {median(k['elected'])} "
                f"| {median(k['acked'])} | {longest(k['zombie'])} | {k['sends']} | {k['acks']} "
                f"| {k['refused']} | {k['unknown']} |")
total = sum(k["episodes"] for k in kinds.values())
text = "\n".join(rows) + f"\n\n{total} episodes checked; failed seeds: {failed_seeds or 'none'}\n"
open(sys.argv[2], "w").write(text)
print(text)
EOF

exit $((failed > 0))
