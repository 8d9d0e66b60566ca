#!/usr/bin/env bash
# The RayJob's entrypoint, run as the Ray driver on the head pod: one suite over the cluster,
# the run on shared storage, its report, the gate against the history, then the history.
#   run-suite.sh SUITE [specbench run options...]
# Needs RESULTS (the shared results directory) and SPECBENCH_HISTORY_URL (an SQLAlchemy URL).
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=$1; shift
: "${RESULTS:?the shared results directory}" "${SPECBENCH_HISTORY_URL:?the history database URL}"
specbench validate "$suite"
before=$(mktemp); ls -d "$RESULTS"/*/*/ 2>/dev/null | sort > "$before" || true
specbench run "$suite" --executor ray --ray-address auto --out "$RESULTS" --no-report "$@"
run=$(comm -13 "$before" <(ls -d "$RESULTS"/*/*/ | sort) | tail -n 1)
test -n "$run" || { echo "no new run directory under $RESULTS" >&2; exit 1; }
specbench report "$run"
status=0
gate=$(specbench gate "$run" --baseline history:5 --db "$SPECBENCH_HISTORY_URL" 2>&1) || status=$?
echo "$gate"
if [ "$status" -eq 2 ] && grep -q "no earlier run" <<<"$gate"; then
  status=0  # the suite's first run on this hardware class becomes the baseline
fi
if [ "$status" -eq 0 ]; then
  specbench history add "$run" --db "$SPECBENCH_HISTORY_URL"
fi
echo "run: $run (gate exit $status)"
exit "$status"
