#!/bin/bash
# Replicated topics against unreplicated ones: three haraqa server processes on loopback as one
# cluster, first with -replicas 1, then -replicas 3 -min-insync 2 (produces with acks=all, the
# client's default there), each measured with haraqa-bench through a client of all three:
#   batched:      3 producers, 3 topics, SIZE-byte messages in batches of 500, for SECONDS
#   batched-one-topic: the same from 1 producer to 1 topic
#   producer-one-topic: 1 client.Producer to 1 topic, single sends gathered into batches, 4 in
#                       flight (as nats bench js pub sends: single messages, acknowledged async)
#   one at a time: 1 producer, 1 topic, each message waiting for its acknowledgement
# (each after haraqa-bench's 1 s warm-up)
# Prints one line per case, "haraqa R=<r> <mode> size=<size> msgs/s=<n>", as
# ../shared/peers/nats-cluster.sh prints NATS JetStream's, then the R=3/R=1 ratios.
# Run from the repository root: bash bench/cluster.sh [SIZE] [SECONDS] (make bench-cluster).
set -eu
size=${1:-1024} secs=${2:-5}
bin=$(mktemp -d)
go build -o "$bin/haraqa" ./cmd/server
go build -o "$bin/haraqa-bench" ./cmd/haraqa-bench
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap 'stop; rm -rf "$bin"' EXIT
peers=127.0.0.1:16351/16451/16551,127.0.0.1:16352/16452/16552,127.0.0.1:16353/16453/16553
addrs=127.0.0.1:16351,127.0.0.1:16352,127.0.0.1:16353
head -c 32 /dev/urandom | base64 >"$bin/cluster.token" # the members' secret
# start R MIN: the three servers on fresh volumes, until each is in step.
start() {
  for i in 1 2 3; do
    mkdir -p "$bin/r$1/v$i"
    "$bin/haraqa" -listen 127.0.0.1 -tcp 1635$i -http 1645$i -cluster-port 1655$i -cluster \
      -replicas "$1" -min-insync "$2" -cluster-token-file "$bin/cluster.token" -peers "$peers" "$bin/r$1/v$i" >"$bin/r$1/log$i" 2>&1 &
    pids+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 1 100); do
      curl -fs "http://127.0.0.1:1645$i/readyz" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
}
rate() { grep -o '"msgs_per_sec":[0-9.]*' | head -1 | cut -d: -f2 | cut -d. -f1; }
declare -A got
for r in 1 3; do
  min=$(( r == 3 ? 2 : 1 ))
  start "$r" "$min"
  b=$("$bin/haraqa-bench" -addr "$addrs" -producers 3 -topics 3 -size "$size" -batch 500 \
      -duration "${secs}s" -json 2>/dev/null | rate)
  t=$("$bin/haraqa-bench" -addr "$addrs" -producers 1 -topics 1 -size "$size" -batch 500 \
      -duration "${secs}s" -json 2>/dev/null | rate)
  p=$("$bin/haraqa-bench" -addr "$addrs" -producers 1 -topics 1 -size "$size" -batch 1 -single producer \
      -duration "${secs}s" -json 2>/dev/null | rate)
  o=$("$bin/haraqa-bench" -addr "$addrs" -producers 1 -topics 1 -size "$size" -batch 1 \
      -duration "${secs}s" -json 2>/dev/null | rate)
  got[$r,b]=${b:-0} got[$r,t]=${t:-0} got[$r,o]=${o:-0} got[$r,p]=${p:-0}
  echo "haraqa R=$r batched size=$size msgs/s=${b:-none}"
  echo "haraqa R=$r batched-one-topic size=$size msgs/s=${t:-none}"
  echo "haraqa R=$r producer-one-topic size=$size msgs/s=${p:-none}"
  echo "haraqa R=$r one-at-a-time size=$size msgs/s=${o:-none}"
  stop
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "none" }'; }
echo "haraqa R=3/R=1 batched $(ratio "${got[3,b]}" "${got[1,b]}") batched-one-topic $(ratio "${got[3,t]}" "${got[1,t]}") producer-one-topic $(ratio "${got[3,p]}" "${got[1,p]}") one-at-a-time $(ratio "${got[3,o]}" "${got[1,o]}")"
