# bedlib.sh — shell helpers for test-bed scenarios (source "$BED_TESTBED/bedlib.sh").
#   step "what" CMD...          run CMD, print "✓ what (1.23 s)" or "✗ what (…)" and exit 1
#   wait_for DEADLINE "what" CMD...   poll CMD (every 0.1 s) until it succeeds, or fail
#   check "what" CMD...         CMD must succeed (logs "checked: what")
#   bed_sleep S "why"           deliberate passage of time
set -u
_bed_t0=$(date +%s.%N)
_bed_now() { date +%s.%N; }
_bed_dt() { awk -v a="$1" -v b="$(_bed_now)" 'BEGIN{printf "%.2f", b-a}'; }
bed_log() { printf '  [%7s] %s\n' "$(_bed_dt "$_bed_t0")" "$*"; }
bed_fail() { echo "FAILED: $*" >&2; exit 1; }
wait_for() { # deadline what cmd...
  local deadline=$1 what=$2 t; shift 2; t=$(_bed_now)
  until "$@" >/dev/null 2>&1; do
    awk -v a="$t" -v b="$(_bed_now)" -v d="$deadline" 'BEGIN{exit !(b-a > d)}' \
      && { echo "timed out after ${deadline} s waiting for $what" >&2; return 1; }
    sleep 0.1
  done
}
check() { local what=$1; shift; "$@" >/dev/null 2>&1 || bed_fail "check failed: $what"; bed_log "checked: $what"; }
step() { # what cmd...
  local what=$1 t; shift; t=$(_bed_now)
  if "$@"; then echo "✓ $what ($(_bed_dt "$t") s)"
  else echo "✗ $what ($(_bed_dt "$t") s)"; exit 1; fi
}
bed_sleep() { bed_log "waiting $1 s on purpose: $2"; sleep "$1"; }
