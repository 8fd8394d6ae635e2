#!/usr/bin/env bash
# logwatch's GPU telemetry on a real GPU (issue 31): the daemon and `logwatch watch` follow
# scripts/gpu-real/gpu_server.py (a GPU-real SGLang-style start: shards, a busy silence, an idle
# silence, ready, a real torch CUDA OOM) with the real nvidia-smi; what each printed goes to $OUT.
#
# On the device machine, from the repository root (python3 there holds torch; the packages
# logwatch needs that its image lacks come as wheels in build/whl, made here first by
# scripts/gpu-real-wheels.sh; the run names build/whl in `carry`):
#     scripts/gpu-real-check.sh                 # real GPU: BUSY=60 IDLE=45 SPIN=45 STALL=30s by default
# Without a GPU (checks everything but the GPU): the H200 trace replayed beside its log, the
# fake nvidia-smi printing its rows on the same clock, 4x faster:
#     LOGWATCH=.venv/bin/logwatch scripts/gpu-real-check.sh --replay
# LOGWATCH: a logwatch to use instead of installing one (default: pip install . into a venv).
# Files in $OUT (default build/gpu-real-out): watch.txt, alerts.jsonl, daemon.log, status.json,
# history.txt, trace.csv (nvidia-smi every second, real GPU only), server.log, summary.txt.
set -u
cd "$(dirname "$0")/.."
MODE=${1:-real}
OUT=${OUT:-build/gpu-real-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-real.XXXXXX)
PY=${PYTHON:-python3}
say() { echo "$(date +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

if [ "$MODE" = "--replay" ]; then
    BUSY=45; IDLE=35; STALL=${STALL:-6s}; STEP=0.25
    NVSMI="$PWD/tests/tools/fake-nvidia-smi"
    export FAKE_NVSMI_CSV="$PWD/tests/fixtures/gpu/h200/startup-trace.csv"
    export FAKE_NVSMI_STEP=$STEP
    export FAKE_NVSMI_T0=$($PY -c 'import time; print(time.time() + 12)')
else
    BUSY=${BUSY:-60}; IDLE=${IDLE:-45}; SPIN=${SPIN:-45}; STALL=${STALL:-30s}
    NVSMI=${NVSMI:-nvidia-smi}
fi

# 1. logwatch, installed from this working tree
if [ -n "${LOGWATCH:-}" ]; then
    LW=$LOGWATCH
else
    # not a venv: python3 there is itself a venv (torch's); a --target dir on PYTHONPATH
    # keeps its packages and adds the wheels' and logwatch's own
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    # (a logwatch wheel in build/whl, built here, stands for the tree: no build there)
    if ! { $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" \
               build/whl/*.whl &&
           { ls build/whl/logwatch-*.whl >/dev/null 2>&1 ||
             $PY -m pip install -q --no-index --no-deps --no-compile --no-build-isolation \
               --target "$WORK/site" . ; } ; } >"$WORK/install.log" 2>&1; then
        say "install failed:"; tail -30 "$WORK/install.log" | tee -a "$OUT/summary.txt"; exit 2
    fi
    LW="$PY -m logwatch"
fi
say "logwatch: $($LW --version 2>&1); nvidia-smi: $NVSMI; mode $MODE; busy ${BUSY}s idle ${IDLE}s spin ${SPIN:-0}s stall_after $STALL"

# 2. a webhook receiver (the daemon's alerts, one JSON body a line) and the daemon
PORTS=$($PY -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
set -- $PORTS; PORT=$1; HOOK=$2
cat >"$WORK/receiver.py" <<'EOF'
import http.server, sys
out = open(sys.argv[2], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        out.write(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode() + "\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
: > "$OUT/alerts.jsonl"
$PY "$WORK/receiver.py" "$HOOK" "$OUT/alerts.jsonl" & pids+=($!)
LOG="$WORK/server.log"; : > "$LOG"
cat >"$WORK/logwatch.yaml" <<EOF
listen: 127.0.0.1:$PORT
state_dir: $WORK/state
targets:
  - name: gpu-real
    source: $LOG
    rules: sglang
    stall_after: $STALL
    probe: false
    gpu: {command: "$NVSMI", interval: 1s}
alerts:
  - {type: webhook, url: "http://127.0.0.1:$HOOK/hook", "on": [crashed, stalled, ready]}
EOF
$LW run -c "$WORK/logwatch.yaml" >"$OUT/daemon.log" 2>&1 & DAEMON=$!; pids+=($DAEMON)
api() { $PY -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$PORT$1" 2>/dev/null; }
for _ in $(seq 100); do api /healthz >/dev/null && break; sleep 0.2; done

# 3. watch, as an operator runs it over ssh or in CI (plain output: a pipe)
$LW watch "$LOG" --stall-after "$STALL" --serve --gpu "$NVSMI" --probe off --no-history \
    --timeout 15m >"$OUT/watch.txt" 2>&1 & WATCH=$!; pids+=($WATCH)
for _ in $(seq 100); do
    api /api/status | $PY -c 'import json,sys; t=json.load(sys.stdin)["targets"][0]; sys.exit(0 if (t.get("gpu") or {}).get("snapshot") else 1)' && break
    sleep 0.2
done
say "daemon GPU stream: $(api /api/status | $PY -c 'import json,sys; g=json.load(sys.stdin)["targets"][0]["gpu"]; print(g["status"], "|", (g["snapshot"] or {}).get("summary"))')"

# 4. the server
if [ "$MODE" = "--replay" ]; then
    $PY tests/support/gpureplay.py "$LOG" $STEP >>"$OUT/summary.txt" 2>&1
else
    nvidia-smi --query-gpu=timestamp,index,power.draw,power.limit,utilization.gpu,memory.used,clocks_event_reasons.active \
        --format=csv -l 1 >"$OUT/trace.csv" 2>&1 & pids+=($!)
    sleep 5    # the board idle before the launch: its idle power, and the preflight
    $PY scripts/gpu-real/gpu_server.py "$LOG" "$BUSY" "$IDLE" "$SPIN" >"$WORK/server.out" 2>&1
    say "gpu_server.py exited $?: $(tail -2 "$WORK/server.out" | tr '\n' ' ')"
fi

# 5. what each said
for _ in $(seq 300); do kill -0 $WATCH 2>/dev/null || break; sleep 0.2; done
wait $WATCH; say "watch exited $?"
for _ in $(seq 50); do grep -q '"kind": *"crashed"' "$OUT/alerts.jsonl" && break; sleep 0.2; done
api /api/status >"$OUT/status.json"
kill -TERM $DAEMON; wait $DAEMON 2>/dev/null
$LW history -c "$WORK/logwatch.yaml" --target gpu-real >"$OUT/history.txt" 2>&1
$LW history -c "$WORK/logwatch.yaml" --target gpu-real --json >>"$OUT/history.txt" 2>&1
cp "$LOG" "$OUT/server.log"
{
    echo "== watch (plain output, excerpt lines left out) =="
    grep -v '^    |' "$OUT/watch.txt"
    echo "== the daemon's alerts (kind status: summary | dedupe key) =="
    $PY -c 'import json,sys
for ln in open(sys.argv[1]):
    if ln.strip():
        a = json.loads(ln); print(a["kind"], a["status"] + ":", a["summary"], "|", a["dedupe_key"])' "$OUT/alerts.jsonl"
    echo "== history =="
    head -3 "$OUT/history.txt"
} | tee -a "$OUT/summary.txt"
