#!/usr/bin/env bash
# The embedded store against the disk's physical ceiling, measured in one go, interleaved.
#
# Each round runs, on the same filesystem:
#   fio: buffered sequential write, 1 MiB blocks, no fsync     (the page-cache ceiling)
#   fio: 64 KiB writes each followed by fdatasync              (a 64-message group commit)
#   ringmq bench store, 1 KiB messages: {sync, async} x {1, 16, 64} producers
# and the medians over ROUNDS rounds go to perf/results/store-vs-fio.md (plus raw JSON).
#
# Usage: perf/store_vs_fio.sh [ROUNDS]      env: DIR (scratch dir, default under /var/tmp),
#        SECONDS_PER_RUN (default 5), IO (auto, uring or portable; default auto),
#        RINGMQ_BIN (a ringmq binary to measure instead of building this checkout;
#        perf/compare_commits.sh uses it), RESULTS_TAG (appended to the results name).
# Results go to perf/results/store-vs-fio[-IO].md. Run nothing else meanwhile: the disk
# is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-${ROUNDS:-3}}
RUN_SECONDS=${SECONDS_PER_RUN:-5}
DIR=${DIR:-/var/tmp/ringmq-perf}
IO=${IO:-auto}
OUT=perf/results
SUFFIX=$([ "$IO" = auto ] && echo "" || echo "-$IO")${RESULTS_TAG:-}
mkdir -p "$OUT" "$DIR"
RAW="$OUT/store-vs-fio$SUFFIX.raw.jsonl"
: > "$RAW"

if ! command -v fio >/dev/null; then
  echo "installing fio" >&2
  (apt-get update -qq && apt-get install -y -qq fio) >/dev/null
fi
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
BIN=${RINGMQ_BIN:-target/release/ringmq}

record() { # label json
  python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d["label"]=sys.argv[1]; print(json.dumps(d))' "$1" "$2" >> "$RAW"
}

fio_buffered() {
  rm -f "$DIR/fio.buffered"
  local json
  json=$(fio --name=buffered --filename="$DIR/fio.buffered" --rw=write --bs=1M --size=2G \
    --ioengine=psync --output-format=json)
  rm -f "$DIR/fio.buffered"
  python3 -c 'import json,sys; j=json.loads(sys.argv[1])["jobs"][0]["write"];
print(json.dumps({"mb_per_sec": j["bw_bytes"]/1e6}))' "$json"
}

fio_fdatasync() {
  rm -f "$DIR/fio.sync"
  local json
  json=$(fio --name=fdatasync --filename="$DIR/fio.sync" --rw=write --bs=64k --size=256M \
    --ioengine=psync --fdatasync=1 --runtime="$RUN_SECONDS" --time_based=0 --output-format=json)
  rm -f "$DIR/fio.sync"
  python3 -c 'import json,sys; j=json.loads(sys.argv[1])["jobs"][0]; p=j["sync"]["lat_ns"]["percentile"];
print(json.dumps({"mb_per_sec": j["write"]["bw_bytes"]/1e6, "fdatasync_p50_us": p["50.000000"]/1e3,
 "fdatasync_p99_us": p["99.000000"]/1e3}))' "$json"
}

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  record fio_buffered "$(fio_buffered)"
  record fio_64k_fdatasync "$(fio_fdatasync)"
  for flush in sync async; do
    for producers in 1 16 64; do
      rm -rf "$DIR/store"
      json=$($BIN bench store --dir "$DIR/store" --flush $flush --producers $producers --size 1024 \
        --duration "$RUN_SECONDS" --io "$IO" --quiet --json)
      record "store_${flush}_p${producers}" "$json"
    done
  done
done
rm -rf "$DIR/store"

python3 - "$RAW" "$OUT/store-vs-fio$SUFFIX.md" "$ROUNDS" <<'PY'
import json, statistics, sys
raw, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for line in open(raw):
    d = json.loads(line)
    runs.setdefault(d["label"], []).append(d)
def med(label, key):
    return statistics.median(r[key] for r in runs[label])
buffered = med("fio_buffered", "mb_per_sec")
sync_bw = med("fio_64k_fdatasync", "mb_per_sec")
sync_p50 = med("fio_64k_fdatasync", "fdatasync_p50_us")
sync_p99 = med("fio_64k_fdatasync", "fdatasync_p99_us")
backend = runs["store_sync_p1"][0]["io_backend"]
lines = [f"# Embedded store vs fio ({rounds} rounds, medians; io backend: {backend})", "",
         f"fio buffered 1 MiB writes: {buffered:.0f} MB/s", 
         f"fio 64 KiB + fdatasync: {sync_bw:.1f} MB/s, fdatasync p50 {sync_p50:.0f} us, p99 {sync_p99:.0f} us", "",
         "| run | msgs/s | MB/s | p50 us | p99 us | p99.9 us | max us | fsyncs/msg |",
         "|---|---|---|---|---|---|---|---|"]
for flush in ("sync", "async"):
    for p in (1, 16, 64):
        label = f"store_{flush}_p{p}"
        lines.append(f"| {flush} x{p} | {med(label,'msgs_per_sec'):.0f} | {med(label,'mb_per_sec'):.1f} | "
                     f"{med(label,'p50_us'):.0f} | {med(label,'p99_us'):.0f} | {med(label,'p999_us'):.0f} | "
                     f"{med(label,'max_us'):.0f} | {med(label,'fsyncs_per_msg'):.4f} |")
lines += ["", "Targets:",
  f"- async x64 MB/s >= 50% of fio buffered: {med('store_async_p64','mb_per_sec')/buffered*100:.0f}%",
  f"- sync x64 MB/s >= 70% of fio 64K+fdatasync: {med('store_sync_p64','mb_per_sec')/sync_bw*100:.0f}%",
  f"- sync x64 p99 <= 3x fio fdatasync p99: {med('store_sync_p64','p99_us')/sync_p99:.2f}x",
  f"- sync x1 p50 <= 1.5x fio fdatasync p50: {med('store_sync_p1','p50_us')/sync_p50:.2f}x"]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
