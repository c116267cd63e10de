#!/bin/bash
# Two builds of the server side by side: the single-server rows of ../shared/peers/compare.sh
# (haraqa's part: a server process and haraqa-bench -addr; 100 B and 1 KiB produce and consume in
# batches of 1,000, 1 KiB one at a time), REPS interleaved pairs, the order of each pair alternated,
# the same bench binary for both. Run from the repository root:
#   bash bench/builds.sh OLD_COMMIT [REPS]     (the working tree is the new build)
# Prints one line per server run: "<old|new> rep<N> p100=... p1k=... c100=... c1k=... s1k=..." (msgs/s).
set -eu
old=${1:?give the commit to compare against} reps=${2:-4}
dir=$(mktemp -d)
trap 'kill "${p:-}" 2>/dev/null || true; git worktree remove --force "$dir/wt" 2>/dev/null || true; rm -rf "$dir"' EXIT
git worktree add -q "$dir/wt" "$old"
(cd "$dir/wt" && go build -o "$dir/haraqa-old" ./cmd/server)
go build -o "$dir/haraqa-new" ./cmd/server
go build -o "$dir/bench" ./cmd/haraqa-bench
hb() { "$dir/bench" -addr 127.0.0.1:16399 -topics 1 -size "$1" -batch "$2" -mode "$3" -messages "$4" -json 2>/dev/null |
  grep -o '"msgs_per_sec":[0-9]*' | cut -d: -f2; }
for rep in $(seq 1 "$reps"); do
  order="new old"; [ $((rep % 2)) = 0 ] && order="old new"
  for which in $order; do
    rm -rf "$dir/vol"; mkdir -p "$dir/vol"
    "$dir/haraqa-$which" -listen 127.0.0.1 -tcp 16399 -http 16499 "$dir/vol" >/dev/null 2>&1 & p=$!
    for _ in $(seq 1 100); do curl -fs http://127.0.0.1:16499/readyz >/dev/null 2>&1 && break; sleep 0.1; done
    echo "$which rep$rep p100=$(hb 100 1000 produce 5000000) p1k=$(hb 1024 1000 produce 500000)" \
      "c100=$(hb 100 1000 consume 1000000) c1k=$(hb 1024 1000 consume 500000) s1k=$(hb 1024 1 produce 100000)"
    kill "$p"; wait "$p" 2>/dev/null || true
  done
done
