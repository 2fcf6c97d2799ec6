#!/usr/bin/env bash
# The chaos suite as CI runs it: one ci-profile run (at most about 6 minutes) on a
# seed given by $SEED (random when unset; printed either way, replay with --seed).
# Needs root (network namespaces, nftables) and, installed beforehand, the apt packages
# nftables and iproute2 (curl is used by the jobs) and, in .venv, the project with
# time-machine and matplotlib. Installs nothing itself. Exits non-zero on a violation.
set -euo pipefail
cd "$(dirname "$0")/.."

SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
OUT=${CHAOS_OUT:-chaos-out/ci-$SEED}
echo "chaos: seed $SEED (replay: SEED=$SEED chaos/ci.sh)"

.venv/bin/ruff check chaos tests/chaos
.venv/bin/python -m pytest -q -p no:cacheprovider tests/chaos
.venv/bin/python -m chaos run --profile ci --seed "$SEED" --out "$OUT"
