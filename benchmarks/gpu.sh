#!/usr/bin/env bash
# Our engine on a GPU, as it is: the papers' settings at their scale and W1-W3 against the
# peers that are installed there, one table with the device named. Run from anywhere:
#
#   bash benchmarks/gpu.sh              # on a machine with a GPU: under 10 minutes
#   bash benchmarks/gpu.sh --dry_run    # on a CPU: every part at a tiny size
#
# Parts (benchmarks/peers/gpu.py and compare.py say what each runs), each in its own process
# under its own time limit (PART_LIMITS below, 9.5 minutes in all), so one that fails or
# runs long leaves the others' rows:
#   emnist      FedJAX's EMNIST FedAvg configuration: 1,500 rounds of 10 clients, its CNN
#   hetero_agg  the loss-aware aggregation paper's NIID FedSoftMax cell, 38 seeds
#   fedawe      FedAWE's CIFAR-10 CNN setting, 100 of its 2,000 rounds
#   workloads   W1-W3 at 10, 100 and 1,000 clients a round against the PyTorch loop on the
#               GPU (and Flower, FedJAX where their packages import: nothing is installed)
# Writes results/speed/gpu/ (GPU_OUT=...): PART.json, peers.{json,md}, gpu.md, and prints
# gpu.md. Nothing is downloaded: image data that is not prepared there is replaced by
# generated arrays of its shapes (named in the table); $FEDJAX_BENCH_EMNIST_DIR may hold
# TFF's fed_emnist_{train,test}.h5. PYTHON (default python3) is the interpreter with jax,
# flax, optax and absl; PyTorch's sides use it too when it imports torch.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${GPU_OUT:-results/speed/gpu}
DRY=""
if [ "${1:-}" = "--dry_run" ]; then
  DRY="--dry_run"
  OUT=${GPU_OUT:-/tmp/fedjax_bench_gpu_dry_run}
elif [ $# -gt 0 ]; then
  echo "error: unknown argument '$1'; valid: --dry_run" >&2
  exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export FEDJAX_BENCH_OFFLINE=1                  # never probe for a TFDS download
export XLA_PYTHON_CLIENT_PREALLOCATE=false     # JAX and PyTorch share the GPU
export FLWR_TELEMETRY_ENABLED=0 RAY_USAGE_STATS_ENABLED=0
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.md

declare -A PART_LIMITS=([emnist]=80 [hetero_agg]=150 [fedawe]=130 [workloads]=200)
if [ -n "$DRY" ]; then  # a CPU is slower: the parts are small, but compile for long
  for part in "${!PART_LIMITS[@]}"; do PART_LIMITS[$part]=$((PART_LIMITS[$part] * 10)); done
fi

"$PYTHON" -c "import jax; print('devices:', jax.devices())" || exit 1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

for part in emnist hetero_agg fedawe; do
  echo "== $part" >&2
  timeout "${PART_LIMITS[$part]}" "$PYTHON" -m benchmarks.peers.gpu --part="$part" \
      --out="$OUT" $DRY > "$OUT/$part.log" 2>&1 \
    || echo "$part: failed or timed out (exit $?), see $OUT/$part.log" >&2
done

# W1-W3 against the peers that import here (nothing is installed on the way).
peers=""
if "$PYTHON" -c "import torch" 2>/dev/null; then peers="torch"; fi
if "$PYTHON" -c "import flwr, ray, torch" 2>/dev/null; then peers="$peers,flower"; fi
if [ -n "${FEDJAX_PYTHON:-}" ] && "$FEDJAX_PYTHON" -c "import fedjax" 2>/dev/null; then
  peers="$peers,fedjax"; fedjax_venv=(--venv="$(dirname "$(dirname "$FEDJAX_PYTHON")")")
else
  fedjax_venv=()
fi
peers=${peers#,}
device=$("$PYTHON" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" \
         2>/dev/null || echo cpu)
if [ -n "$DRY" ]; then
  sizes=(--workloads=w1,w3 --cohorts=1,10 --repeats=1 --seconds=0.1)
else
  sizes=(--workloads=w1,w2,w3 --cohorts=10,100,1000 --repeats=3 --seconds=1)
fi
echo "== workloads (peers: ${peers:-none})" >&2
timeout "${PART_LIMITS[workloads]}" "$PYTHON" -m benchmarks.peers.compare "${sizes[@]}" \
    --peers="$peers" --torch_python="$PYTHON" --torch_device="$device" \
    ${fedjax_venv[@]+"${fedjax_venv[@]}"} \
    --output_dir="$OUT" > "$OUT/workloads.log" 2>&1 \
  || echo "workloads: failed or timed out (exit $?), see $OUT/workloads.log" >&2

"$PYTHON" -m benchmarks.peers.gpu --part=table --out="$OUT"
