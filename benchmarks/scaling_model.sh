#!/usr/bin/env bash
# Measures the inputs of docs/scaling.md's scaling model and validates it: on this machine, the
# training example's compute time per sample (1 worker x 1 thread, and with W = 2, 4 copies
# running at once, which is what W ranks sharing the cores get); on the namespace cluster
# (scripts/cluster.sh, one rank per host, links shaped with tbf to each rate of RATES), the link's
# one-way and exchange times per message size (benchmarks/pingpong), then the example's step time
# (batch / samples/s of its epoch line) with data_parallel over mpi_comm at W = 1 2 4, and
# through the parameter server (--ps-servers S --ps-mode sync, S = 1 2, W = 1 2 3) on the first
# rate. Prints the predicted-vs-measured tables (benchmarks/scaling_model.py) and the load.
#   benchmarks/scaling_model.sh [BUILD_DIR]        (default build/release; needs root, Open MPI)
# Needs the targets train_fashion_mnist and pingpong (MELD_ENABLE_MPI). Environment: REPS (3),
# RATES ("100mbit 1gbit"), BATCH (256), MLP_LIMIT (15360), LENET_LIMIT (5120), PS_RATE (the first
# of RATES), PS_REPS (REPS), PS_MODELS (mlp), RAW (file for the raw numbers, default a temporary
# one; `scaling_model.py table RAW` reprints the table). The cluster is torn down on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build/release}
reps=${REPS:-3} rates=${RATES:-100mbit 1gbit} batch=${BATCH:-256}
mlp_limit=${MLP_LIMIT:-15360} lenet_limit=${LENET_LIMIT:-5120}
ps_rate=${PS_RATE:-${rates%% *}} ps_reps=${PS_REPS:-$reps} ps_models=${PS_MODELS:-mlp}
exe=$build/examples/train_fashion_mnist pingpong=$build/benchmarks/pingpong
for f in "$exe" "$pingpong"; do [ -x "$f" ] || { echo "$0: no $f (build it)" >&2; exit 2; }; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MELD_NUM_THREADS=1
raw=${RAW:-$(mktemp /tmp/scaling_model.XXXXXX)}
: > "$raw"
id=
cleanup() { [ -z "$id" ] || "$root/scripts/cluster.sh" --id "$id" down || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
load() { echo "# load: $(uptime | sed 's/.*load average/load average/')" | tee -a "$raw" >&2; }
sps() {  # sps <launcher...> -- <example args>: the samples/s of the example's epoch line
  "$@" 2> /dev/null | sed -n 's/^epoch 1\/1 .*samples\/s \([0-9.]*\).*/\1/p' | tail -1
}
shared() {  # 1b. the same with W copies at once (no network): compute time when W ranks share
  local model=$1 W=$2 lim=$3 i f=() # the cores with each other and with the machine's other load
  for ((i = 0; i < W; ++i)); do
    f+=("$(mktemp)")
    mpirun -np 1 "$exe" --backend mpi --model "$model" --epochs 1 --batch "$batch" \
      --limit "$lim" > "${f[i]}" 2> /dev/null &
  done
  wait
  for ((i = 0; i < W; ++i)); do
    v=$(sed -n 's/^epoch 1\/1 .*samples\/s \([0-9.]*\).*/\1/p' "${f[i]}")
    echo "shared $model $W $batch $v" | tee -a "$raw" >&2
    rm -f "${f[i]}"
  done
}
limit_of() { if [ "$1" = mlp ]; then echo "$mlp_limit"; else echo "$lenet_limit"; fi; }
echo "cores $(nproc)" >> "$raw"

compute() {  # 1. compute per sample: 1 worker, 1 thread, no network (mpirun -np 1 here)
  for model in mlp lenet; do
    v=$(sps mpirun -np 1 "$exe" --backend mpi --model "$model" --epochs 1 --batch "$batch" \
      --limit "$(limit_of "$model")")
    echo "compute $model $batch $v" | tee -a "$raw" >&2
    lim=$(limit_of "$model")
    [ "$model" = lenet ] || lim=60000  # long enough for the copies' training to overlap
    for W in 2 4; do shared "$model" "$W" "$lim"; done
  done
}

ncl=5  # W = 4 for data_parallel; S + W = 5 for the parameter server
for rate in $rates; do
  id=$("$root/scripts/cluster.sh" up "$ncl" --rate "$rate")
  run=("$root/scripts/cluster.sh" --id "$id" mpirun)
  load
  # 2. The link: benchmarks/pingpong's one-way and exchange times from 8 B to 8 MiB.
  "${run[@]}" -np 2 -- "$pingpong" --min 8 --max $((8 << 20)) --reps 3 2> /dev/null |
    awk -v rate="$rate" '$1 !~ /^#/ {print "pp", rate, $1, $2, $4}' | tee -a "$raw" >&2
  # 3. data_parallel over mpi_comm, one rank per host; the compute runs interleaved with them,
  # so that both see the same load.
  for ((r = 0; r < reps; ++r)); do
    compute
    for model in mlp lenet; do
      for W in 1 2 4; do
        v=$(sps "${run[@]}" -np "$W" -- "$exe" --backend mpi --model "$model" --epochs 1 \
          --batch "$batch" --limit "$(limit_of "$model")")
        echo "dp $rate $model $W $batch $v" | tee -a "$raw" >&2
      done
    done
  done
  load
  # 4. The parameter server, sync: S servers (ranks 0 .. S-1) and W workers.
  if [ "$rate" = "$ps_rate" ]; then
    for ((r = 0; r < ps_reps; ++r)); do
      for model in $ps_models; do
        for W in 1 2 3; do
          for S in 1 2; do
            v=$(sps "${run[@]}" -np $((S + W)) -- "$exe" --backend mpi --model "$model" \
              --epochs 1 --batch "$batch" --limit "$(limit_of "$model")" --ps-servers "$S" \
              --ps-mode sync)
            echo "ps $rate $model $S $W $batch $v" | tee -a "$raw" >&2
          done
        done
      done
    done
    load
  fi
  "$root/scripts/cluster.sh" --id "$id" down
  id=
done
echo "raw numbers: $raw" >&2
/usr/bin/python3 "$here/scaling_model.py" table "$raw"
grep '^# load' "$raw"
