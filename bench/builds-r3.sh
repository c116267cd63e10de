#!/bin/bash
# Two builds of the server side by side on a replicated topic: three server processes on loopback
# as one cluster (-replicas 3 -min-insync 2), one producer sending 1 KiB messages one at a time,
# each waiting for its acks=all acknowledgement (bench/cluster.sh's one-at-a-time row), REPS
# interleaved pairs, the order of each pair alternated, the same bench binary for both. Run from
# the repository root:
#   bash bench/builds-r3.sh OLD_COMMIT [REPS]     (the working tree is the new build)
# Prints one line per cluster run: "<old|new> rep<N> one-at-a-time=<msgs/s> load=<1-min load>".
set -eu
old=${1:?give the commit to compare against} reps=${2:-6}
dir=$(mktemp -d)
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap 'stop; git worktree remove --force "$dir/wt" 2>/dev/null || true; rm -rf "$dir"' EXIT
git worktree add -q "$dir/wt" "$old"
(cd "$dir/wt" && go build -o "$dir/haraqa-old" ./cmd/server)
go build -o "$dir/haraqa-new" ./cmd/server
go build -o "$dir/bench" ./cmd/haraqa-bench
head -c 32 /dev/urandom | base64 >"$dir/cluster.token" # the members' secret
peers=127.0.0.1:16351/16451/16551,127.0.0.1:16352/16452/16552,127.0.0.1:16353/16453/16553
addrs=127.0.0.1:16351,127.0.0.1:16352,127.0.0.1:16353
for rep in $(seq 1 "$reps"); do
  order="new old"; [ $((rep % 2)) = 0 ] && order="old new"
  for which in $order; do
    for i in 1 2 3; do
      rm -rf "$dir/v$i"; mkdir -p "$dir/v$i"
      "$dir/haraqa-$which" -listen 127.0.0.1 -tcp 1635$i -http 1645$i -cluster-port 1655$i -cluster -replicas 3 \
        -min-insync 2 -cluster-token-file "$dir/cluster.token" -peers "$peers" "$dir/v$i" >"$dir/log$i" 2>&1 &
      pids+=($!)
    done
    for i in 1 2 3; do
      for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:1645$i/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    done
    o=$("$dir/bench" -addr "$addrs" -producers 1 -topics 1 -size 1024 -batch 1 -duration 8s -json 2>/dev/null |
      grep -o '"msgs_per_sec":[0-9]*' | head -1 | cut -d: -f2)
    echo "$which rep$rep one-at-a-time=${o:-none} load=$(cut -d' ' -f1 /proc/loadavg)"
    stop
  done
done
