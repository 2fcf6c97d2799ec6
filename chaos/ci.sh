#!/usr/bin/env bash
# The chaos suite as CI runs it: two ci-profile runs (each at most about 8 minutes), one
# on the fixed seed 101 and one on a seed derived from the commit hash (printed; replay with
# SEED=<n> chaos/ci.sh). $SEED, when set, replaces both with that one seed.
# Needs root (network namespaces, nftables) and, installed beforehand, the apt packages
# nftables and iproute2 (curl is used by the jobs) and, in .venv, the project with
# time-machine and matplotlib. Installs nothing itself. Exits non-zero on a violation.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${SEED:-}" ]; then
  SEEDS="$SEED"
else
  COMMIT=$(git rev-parse HEAD 2>/dev/null || echo 0)
  SEEDS="101 $(( 16#${COMMIT:0:7} % 1000000 ))"
fi
echo "chaos: seeds $SEEDS (commit ${COMMIT:-n/a}; replay one: SEED=<n> chaos/ci.sh)"

.venv/bin/ruff check chaos tests/chaos
.venv/bin/python -m pytest -q -p no:cacheprovider tests/chaos
for seed in $SEEDS; do
  out=${CHAOS_OUT:-chaos-out}/ci-$seed
  echo "chaos: seed $seed -> $out"
  .venv/bin/python -m chaos run --profile ci --seed "$seed" --out "$out"
done
