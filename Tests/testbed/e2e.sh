#!/bin/bash
# e2e.sh [--all] [RUN...] — the real-BlueZ end-to-end tier (`make e2e`, `make e2e-ci`).
# Installs the bed's packages if missing, then runs scenarios of Tests/e2e (files with a
# "# testbed: mode=… timeout=…" header), each in its own VM via run-vm:
#   no argument, or --all    every scenario on the default BlueZ (BLUEZ=, else 5.66), less E2E_SKIP
#   SCENARIO                 that one (path, file name, or name without extension)
#   VERSION:SCENARIO         that one on another BlueZ version (5.82:paird_pair, newest:paird_rpa)
#   linux-K:[VERSION:]SCENARIO  that one on another guest kernel: linux-6.1 (Debian 12's own),
#                            linux-newest (unstable's); the default is 6.12 (fetch-kernel.sh)
# `--all` and named runs combine: `e2e.sh --all 5.82:paird_pair newest:paird_pair` is one tier,
# one queue, one summary (what `make e2e-ci` runs).
#
# E2E_JOBS=N (default 3) runs N VMs at a time, longest first (Tests/testbed/e2e-durations.tsv,
# measured; a run not in it counts as its header's timeout / 4). Most of a scenario's time is
# the wearable away or a deadline running out, so two VMs on 2 cores take about half the wall
# time, and a third takes a fifth off that (the whole tier: 2,894 → 2,307 s of wall time, VM time
# +19 %, no retry; docs/development.md, "What runs where"). Each run's console goes to
# testbed-out/<run>.console.log and is printed whole when the run ends, so runs never interleave.
# E2E_JOBS=1 runs one VM at a time (benchmarks, timing-sensitive work).
# E2E_GROUP=N (default 1: off, a VM each; see below): plain-mode runs (no boots=, no own_vm=yes in the header) with the same
# wearable implementation and BlueZ version share a VM, N at most (run-vm --group, guest/run-group:
# a reset between them, and a check that stops the group on any change the reset does not
# cover); every run keeps its own result line, logs, console and timing. Off by default: its
# one measured run showed no gain (the reset between scenarios cost about the boot it saves,
# docs/development.md), and CI keeps the proven one VM per run until a leaner reset is measured.
# README, "Group VMs".
#
# Prints PASS/FAIL per (scenario, wearable implementation, BlueZ version) — "PASS  paird_pair
# [bumble, bluez 5.66]  (25.8 s; timing: boot 3.3 · stack 5.8 · …)" — with its wall time and where
# that time went (run-vm's bed-timing), then the longest runs, the tier's total against CI's
# 90 minutes, and a final "N passed, N failed, N skipped, N excused by a kernel BUG, N retried";
# exits 1 if any failed. Logs of each run go to testbed-out/<scenario>@<implementation>[@bluez-<version>]/
# (…/<scenario>/ without a wearable).
# A green tier means it (issue 48):
#   - a scenario that exits 0 after bedlib's skip(WHY) (it writes $BED_OUT/SKIPPED) is a FAILURE,
#     unless "scenario<TAB>WHY" is on Tests/testbed/skip-allowlist (with its justification); then
#     it counts as skipped;
#   - a kernel BUG excuses a failed step only in a scenario that declared expects_kernel_bug() and
#     only if the BUG was in dmesg before that step began (bedlib); such a run counts apart, and the
#     summary prints the BUG;
#   - retries are counted, per run with its first failure's reason, and the tier FAILS when more
#     than E2E_RETRY_LIMIT (2) runs needed one, or when a run needed one in 2 of its last 5 tiers on
#     this machine (the record: <bed cache>/e2e-retries.tsv; docs/development.md, "Retries").
# PAIRD_BIN / PAIRCTL_BIN default to the release build (.build/release/{paird,pairctl}).
# A failed scenario gets one retry on a fresh VM (E2E_RETRIES=0 turns that off), and one more
# only if bluetoothd segfaulted in the retry as well (dmesg; a BlueZ crash seen on the 6.12
# bed, not paird's); the summary marks every scenario that needed a retry, and every run in which
# bluetoothd segfaulted.
# BLUEZ=<version> (5.66 default, 5.82, newest: see build-bluez.sh) is the default version of the
# runs without a VERSION: prefix; every version named is built (or found cached) before any VM.
set -uo pipefail
TB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E=$(cd "$TB/../e2e" && pwd)
REPO=$(cd "$TB/../.." && pwd)
OUTDIR=$(realpath -m "$REPO/testbed-out")
export PAIRD_BIN=${PAIRD_BIN:-$REPO/.build/release/paird}
export PAIRCTL_BIN=${PAIRCTL_BIN:-$REPO/.build/release/pairctl}
echo "e2e: paird: $("$PAIRD_BIN" --version 2>&1 | head -1) ($PAIRD_BIN)"
JOBS=${E2E_JOBS:-3}
CI_LIMIT=${E2E_CI_LIMIT:-5400}
RETRY_LIMIT=${E2E_RETRY_LIMIT:-2}
ALLOWLIST=$TB/skip-allowlist
. "$TB/bed-cache"
RETRY_RECORD=${E2E_RETRY_RECORD:-$(bed_cache_dir "$REPO")/e2e-retries.tsv}

"$TB/install-deps.sh" || { echo "e2e: install-deps.sh failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
# The bed's Python modules compiled once here, by the interpreter the guest runs (the host's own
# /usr/bin/python3 over 9p): the guest reads the .pyc files (guest/run-scenario sets
# PYTHONDONTWRITEBYTECODE, so without them every Python process there compiled bedlib again).
# Under TCG that compile was ~3 s of each scenario's start (`import bedlib` 4.3 s without them,
# 1.5 s with, measured in one VM 2026-11-29); Bumble's venv ships its own .pyc files.
/usr/bin/python3 -m compileall -q "$TB" "$E2E" >/dev/null || echo "e2e: compileall of the bed's Python failed (runs go on, slower)"

# ---------------------------------------------------------------- BlueZ versions
# version_of[key] / dir_of[key]: what build-bluez.sh says for a requested version ("" = default)
declare -A version_of=() dir_of=()
default_version=$(/usr/libexec/bluetooth/bluetoothd --version 2>/dev/null || echo '?')
resolve_version() { # $1 = requested ("" for the default BlueZ)
  local want=$1 bb
  [[ -n ${version_of[x$want]+x} ]] && return 0
  if [[ -z $want ]]; then version_of[x]=$default_version; dir_of[x]=; return 0; fi
  bb=$("$TB/build-bluez.sh" "$want") || { echo "e2e: build-bluez.sh $want failed"; return 1; }
  version_of[x$want]=$(sed -n 's/^version //p' <<<"$bb" | tail -n1)
  dir_of[x$want]=$(tail -n1 <<<"$bb")
}
base=${BLUEZ:-}
unset BLUEZ

# ---------------------------------------------------------------- the runs
find_scenario() {
  local c
  for c in "$1" "$E2E/$1" "$E2E/$1.py" "$E2E/$1.sh"; do [[ -f $c ]] && { realpath "$c"; return 0; }; done
  return 1
}
# Which wearable implementations run a scenario: its header's `wearables=PROFILE[,…]` says it
# needs a wearable (run on Bumble, the default, with those profiles); `twin=yes` adds a run on
# the BlueZ twin (wearable.py, the BlueZ-to-BlueZ reference); `twin=no-bumble-only` means the
# scenario needs Bumble's profiles (it runs on Bumble even with BED_WEARABLE=bluez). No
# `wearables=`: one run, no wearable. BED_WEARABLE=bumble|bluez (set by hand) runs only that one.
# A VERSION:SCENARIO run is on Bumble only: the twin is the BlueZ 5.66-to-5.66 reference.
impls_of() { # $1 = scenario, $2 = the version asked for ("" = the default), $3 = the kernel ("" = 6.12)
  local hdr; hdr=$(head -n 20 "$1" | grep -m1 -E '^(#|//) *testbed:' || true)
  if [[ ! $hdr =~ wearables=([a-z,-]+) ]]; then echo none; return; fi
  if [[ $hdr =~ twin=no-bumble-only ]]; then echo bumble; return; fi   # Bumble profiles only
  if [[ -n ${BED_WEARABLE:-} ]]; then echo "$BED_WEARABLE"; return; fi
  if [[ -n ${2:-} && ${2:-} != "$base" ]]; then echo bumble; return; fi
  if [[ -n ${3:-} ]]; then echo bumble; return; fi   # another kernel: Bumble, like another BlueZ
  echo bumble; [[ $hdr =~ twin=yes ]] && echo bluez
}
todo=()   # "kernel|version|scenario path" (kernel "" = 6.12, version "" = the default)
all=0; named=()
for a in "$@"; do [[ $a == --all ]] && all=1 || named+=("$a"); done
((${#named[@]})) || all=1
if ((all)); then
  for f in "$E2E"/*; do
    # E2E_SKIP: names (without extension) left out of this all-scenarios run (make e2e-ci); a
    # NAME@IMPL entry leaves out that one run (below)
    [[ " ${E2E_SKIP:-} " == *" $(basename "${f%.*}") "* ]] && { echo "e2e: skipping $(basename "$f") (E2E_SKIP)"; continue; }
    [[ -f $f ]] && head -n 20 "$f" | grep -qE '^(#|//) *testbed:' && todo+=("|$base|$f")
  done
fi
for a in "${named[@]}"; do
  v=$base; s=$a; kk=
  if [[ $s =~ ^linux-(6\.1|6\.12|newest):(.+)$ ]]; then kk=${BASH_REMATCH[1]}; s=${BASH_REMATCH[2]}; [[ $kk == 6.12 ]] && kk=; fi
  if [[ $s =~ ^([0-9][0-9.]*|newest|default):(.+)$ ]]; then v=${BASH_REMATCH[1]}; s=${BASH_REMATCH[2]}; fi
  f=$(find_scenario "$s") || { echo "e2e: no such scenario: $s" >&2; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
  todo+=("$kk|$v|$f")
done
((${#todo[@]})) || { echo "e2e: no scenarios in $E2E"; echo "0 passed, 0 failed, 0 skipped"; exit 1; }

# Every version is built (or found cached) before the first VM: a build failure stops the tier.
declare -A kver_of=()   # kernel → its uname -r (fetch-kernel.sh: fetched once per machine)
for t in "${todo[@]}"; do
  t2=${t#*|}
  resolve_version "${t2%%|*}" || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
  kk=${t%%|*}
  if [[ -n $kk && -z ${kver_of[$kk]:-} ]]; then
    kv=$("$TB/fetch-kernel.sh" "$kk") || { echo "e2e: fetch-kernel.sh $kk failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
    kver_of[$kk]=$(sed -n 's/^version //p' <<<"$kv" | tail -n1)
  fi
done
echo "e2e: bluez ${version_of[x$base]}$(for k in "${!version_of[@]}"; do [[ $k != "x$base" ]] && printf ', %s' "${version_of[$k]}"; done) · $JOBS VM(s) at a time"

# The expected duration of a run, for the longest-first order: measured (e2e-durations.tsv:
# "name<TAB>seconds", name as in testbed-out), else the header's timeout / 4.
declare -A expect=()
[[ -f $TB/e2e-durations.tsv ]] && while IFS=$'\t' read -r n s; do [[ $n == \#* || -z $n ]] || expect[$n]=$s; done <"$TB/e2e-durations.tsv"
runs=()   # "expected|impl|version key|scenario|runname|label"
for t in "${todo[@]}"; do
  kk=${t%%|*}; t2=${t#*|}; v=${t2%%|*}; s=${t2#*|}; name=$(basename "${s%.*}")
  ver=${version_of[x$v]}
  vs=; [[ $ver != "$default_version" ]] && vs=@bluez-$ver
  ks=; kl=; [[ -n $kk ]] && { ks=@linux-$kk; kl=", linux ${kver_of[$kk]}"; }
  for impl in $(impls_of "$s" "$v" "$kk"); do
    if [[ $impl == none ]]; then label="$name [bluez $ver$kl]"; runname=$name$vs$ks
    else label="$name [$impl, bluez $ver$kl]"; runname=$name@$impl$vs$ks; fi
    # an E2E_SKIP entry with an @ names one run (paird_forget_bond@bluez: the twin's run only)
    if ((all)) && [[ $runname == *@* && " ${E2E_SKIP:-} " == *" $runname "* ]]; then echo "e2e: skipping $runname (E2E_SKIP)"; continue; fi
    e=${expect[$runname]:-}
    if [[ -z $e ]]; then
      hdr=$(head -n 20 "$s" | grep -m1 -E '^(#|//) *testbed:' || true)
      [[ $hdr =~ timeout=([0-9]+) ]] && e=$((BASH_REMATCH[1] / 4)) || e=150
    fi
    runs+=("$e|$impl|$v|$s|$runname|$label|$kk")
  done
done
mapfile -t runs < <(printf '%s\n' "${runs[@]}" | sort -t'|' -k1,1nr -s)

# The first "bluetoothd[PID]: segfault …" (or "traps: bluetoothd[PID] general protection fault …",
# the same BlueZ bug another way) line of a run's dmesg, if bluetoothd crashed in it.
btd_segfault() { grep -hoE 'bluetoothd\[[0-9]+\]:? (segfault|general protection fault).{0,60}' "$1/dmesg.log" 2>/dev/null | head -n1; }

RES=$(mktemp -d "${TMPDIR:-/tmp}/e2e-results.XXXXXX")
trap 'rm -rf "$RES"' EXIT
# run_one INDEX [RC SECONDS GROUP]: one run with its retries; its console in
# testbed-out/<run>.console.log, its result in $RES/INDEX: "status<TAB>seconds<TAB>summary line".
# With RC, its first run was in the group VM GROUP (run_group), exit RC, SECONDS its share of it;
# a retry is always a VM of its own.
run_one() {
  local i=$1 r=${runs[$1]} e impl v s runname label k out con t0 rc note tries retries crash_retry seg dt timing why leak first_why= reason allowed
  IFS='|' read -r e impl v s runname label k <<<"$r"
  out=$OUTDIR/$runname; con=$OUTDIR/$runname.console.log
  mkdir -p "$OUTDIR"; : >"$con"
  export BED_WEARABLE=${impl/none/bumble}
  if [[ -n $v ]]; then export BLUEZ=$v; else unset BLUEZ; fi
  if [[ -n $k ]]; then export BED_KERNEL=$k; else unset BED_KERNEL; fi
  printf '=== %s\n' "$label" >>"$con"
  note=""
  if [[ -n ${2:-} ]]; then
    rc=$2; t0=$(awk -v d="$3" -v n="$(date +%s.%N)" 'BEGIN{printf "%.3f", n-d}')
    { printf '(in the group VM %s: its console %s)\n' "$4" "$OUTDIR/$4.console.log"
      cat "$out/scenario.log" 2>/dev/null
      if ((rc != 0)); then
        for f in bluetoothd.log:40 wearable.log:25 bumble.log:15; do
          [[ -s $out/${f%:*} ]] && { printf '\n----- tail -n %s %s\n' "${f#*:}" "$out/${f%:*}"; tail -n "${f#*:}" "$out/${f%:*}"; }
        done
      fi
      printf '[group %s] %s: exit %s (%s s of the group VM; %s)\n' "$4" "$runname" "$rc" "$3" "$(cat "$out/timing.txt" 2>/dev/null)"; } >>"$con"
    # the reset after it found a change it does not cover: the rest of the group got a fresh VM
    leak=$(head -n 3 "$out/group-leaked" 2>/dev/null | tr '\n' ' ' | cut -c1-300)
    [[ -n $leak ]] && note+=" — LEFT A CHANGE THE GROUP RESET DOES NOT COVER (declare own_vm=yes): $leak"
    note+=" [group VM $4]"
  else
    t0=$(date +%s.%N)
    "$TB/run-vm" --name "$runname" "$s" >>"$con" 2>&1
    rc=$?
  fi
  tries=1; retries=${E2E_RETRIES:-1}; crash_retry=$((retries > 0))
  while ((rc != 0)); do
    seg=$(btd_segfault "$out")
    if ((retries > 0)); then
      # One fresh VM more for a failed scenario: the TCG guest's timing swings widely with host
      # load. The first run's logs are kept, and the summary says a retry was needed.
      retries=$((retries - 1))
    elif [[ -n $seg ]] && ((crash_retry)); then
      # bluetoothd itself segfaulted in this run too (dmesg): one more VM, said so below.
      crash_retry=0
    else
      break
    fi
    # why it failed, in the summary itself (CI shows only part of a tier's output)
    why=$(grep -m1 -E '^(FAILED: |run-scenario: (TIMEOUT|the BlueZ stack))' "$out/scenario.log" 2>/dev/null | cut -c1-240)
    [[ -n $first_why ]] || first_why="exit $rc${why:+: $why}${seg:+ (bluetoothd segfaulted: $seg)}"
    rm -rf "$out-try$tries"; mv "$out" "$out-try$tries" 2>/dev/null
    note+=" — NEEDED A RETRY: run $tries exit $rc${why:+ ($why)}${seg:+ (bluetoothd segfaulted: $seg)}, logs $out-try$tries"
    printf '\n=== %s: failed (exit %d)%s; retry on a fresh VM, logs of that run in %s\n' \
      "$label" "$rc" "${seg:+, bluetoothd segfaulted}" "$out-try$tries" >>"$con"
    tries=$((tries + 1))
    "$TB/run-vm" --name "$runname" "$s" >>"$con" 2>&1
    rc=$?
  done
  seg=$(btd_segfault "$out")
  [[ -n $seg ]] && note+=" — bluetoothd segfaulted in the last run: $seg"
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  timing=$(sed 's/^timing: //; s/ = .*//' "$out/timing.txt" 2>/dev/null)
  timing=${timing:+; $timing}
  # retries of this run, for the summary and the record: "runname<TAB>retries<TAB>first failure"
  printf '%s\t%d\t%s\n' "$runname" $((tries - 1)) "$first_why" >"$RES/$i.retry"
  reason=$(head -n1 "$out/SKIPPED" 2>/dev/null)
  if ((rc == 0)) && [[ -f $out/SKIPPED && $reason == kernel-bug:* ]]; then
    printf 'kbug\t%s\tKBUG  %s  (%s s%s)%s: excused by a kernel BUG the scenario declared: %s\n' "$dt" "$label" "$dt" "$timing" "$note" "$(head -c 600 "$out/SKIPPED" | tr '\n' ' ')"
  elif ((rc == 0)) && [[ -f $out/SKIPPED ]]; then
    allowed=$(awk -F'\t' -v n="$(basename "${s%.*}")" -v r="$reason" '!/^#/ && $1 == n && $2 == r { print $3; exit }' "$ALLOWLIST" 2>/dev/null)
    if [[ -n $allowed ]]; then
      printf 'skip\t%s\tSKIP  %s  (%s s%s)%s: %s [allow-listed: %s]\n' "$dt" "$label" "$dt" "$timing" "$note" "$(head -c 300 "$out/SKIPPED" | tr '\n' ' ')" "$allowed"
    else
      printf 'fail\t%s\tFAIL  %s  (%s s%s; logs: %s) — SKIPPED, and the skip is not on Tests/testbed/skip-allowlist: %s%s\n' "$dt" "$label" "$dt" "$timing" "$out" "$(head -c 300 "$out/SKIPPED" | tr '\n' ' ')" "$note"
    fi
  elif ((rc == 0)); then printf 'pass\t%s\tPASS  %s  (%s s%s)%s\n' "$dt" "$label" "$dt" "$timing" "$note"
  else
    why=$(grep -m1 -E '^(FAILED: |run-scenario: (TIMEOUT|the BlueZ stack))' "$out/scenario.log" 2>/dev/null | cut -c1-240)
    printf 'fail\t%s\tFAIL  %s  (%s s, exit %s%s; logs: %s)%s%s\n' "$dt" "$label" "$dt" "$rc" "$timing" "$out" "${why:+ — $why}" "$note"; fi >"$RES/$i"
}

# run_group INDEX...: the runs in one group VM (run-vm --group); then, for each, its result with
# run_one (which retries a failed one on a VM of its own). Runs that did not get their turn (the
# VM died, or the reset before them failed) go to a fresh group VM (one VM of their own each, if
# that group made no progress at all); the run that was under way when the VM died counts as
# failed in that VM (and gets run_one's retry).
run_group() {
  local idx=("$@") specs=() i e impl v s runname label k gname con t0 rc dt left=() done_any=0
  for i in "${idx[@]}"; do IFS='|' read -r e impl v s runname label k <<<"${runs[i]}"; specs+=("$runname=$s"); done
  IFS='|' read -r e impl v s runname label k <<<"${runs[idx[0]]}"
  gname=group-$runname; con=$OUTDIR/$gname.console.log
  mkdir -p "$OUTDIR"
  export BED_WEARABLE=${impl/none/bumble}
  if [[ -n $v ]]; then export BLUEZ=$v; else unset BLUEZ; fi
  if [[ -n $k ]]; then export BED_KERNEL=$k; else unset BED_KERNEL; fi
  t0=$(date +%s.%N)
  "$TB/run-vm" --group --name "$gname" --out "$OUTDIR" "${specs[@]}" >"$con" 2>&1
  for i in "${idx[@]}"; do
    IFS='|' read -r e impl v s runname label k <<<"${runs[i]}"
    dt=$(cat "$OUTDIR/$runname/group-wall" 2>/dev/null || echo 0)
    if [[ -s $OUTDIR/$runname/group-rc ]]; then
      done_any=1; run_one "$i" "$(<"$OUTDIR/$runname/group-rc")" "$dt" "$gname"
    elif grep -q ' scenario-start$' "$OUTDIR/$runname/boot-trace.log" 2>/dev/null; then
      done_any=1   # under way when the VM stopped: a failed run (timeout, panic)
      echo "run-vm: $runname did not finish in the group VM $gname (it died or timed out)" >>"$OUTDIR/$runname/scenario.log"
      run_one "$i" 124 "$dt" "$gname"
    else left+=("$i"); fi
  done
  ((${#left[@]})) || return 0
  if ((done_any && ${#left[@]} > 1)); then run_group "${left[@]}"
  else for i in "${left[@]}"; do run_one "$i"; done; fi
}

# ---------------------------------------------------------------- the groups
# Runs that may share a VM (plain mode, no boots=, no own_vm=yes in the header) with the same
# wearable implementation and BlueZ version go in groups of at most E2E_GROUP (default 1 or 0:
# a VM per run, as before), dealt longest-first in turn so the groups take about as long; every
# queue unit (a group or a run of its own) then runs longest first.
GROUP=${E2E_GROUP:-1}
declare -A gkey=()   # key → indices
units=()             # "expected|indices"
for ((i = 0; i < ${#runs[@]}; i++)); do
  IFS='|' read -r e impl v s runname label k <<<"${runs[i]}"
  hdr=$(head -n 20 "$s" | grep -m1 -E '^(#|//) *testbed:' || true)
  if ((GROUP > 1)) && [[ ! $hdr =~ mode=systemd && ! $hdr =~ boots=[0-9] && ! $hdr =~ own_vm=yes ]]; then
    gkey[${impl/none/bumble}|$v|$k]+="$i "   # a run without a wearable is a Bumble one (BED_WEARABLE)
  else units+=("$e|$i"); fi
done
for k in "${!gkey[@]}"; do
  read -ra m <<<"${gkey[$k]}"          # already longest first
  ng=$(((${#m[@]} + GROUP - 1) / GROUP))
  declare -a bins=(); declare -a bsum=()
  for ((b = 0; b < ng; b++)); do bins[b]=; bsum[b]=0; done
  for ((j = 0; j < ${#m[@]}; j++)); do   # snake: 0 1 2 2 1 0 0 1 2 …
    b=$((j % (2 * ng))); ((b >= ng)) && b=$((2 * ng - 1 - b))
    bins[b]+="${m[j]} "; bsum[b]=$(awk -v a="${bsum[b]}" -v x="$(cut -d'|' -f1 <<<"${runs[m[j]]}")" 'BEGIN{print a + x}')
  done
  for ((b = 0; b < ng; b++)); do units+=("${bsum[b]%.*}|${bins[b]% }"); done
  unset bins bsum
done
mapfile -t units < <(printf '%s\n' "${units[@]}" | sort -t'|' -k1,1nr -s)
ngroups=0; for u in "${units[@]}"; do [[ ${u#*|} == *" "* ]] && ngroups=$((ngroups + 1)); done
echo "e2e: ${#runs[@]} runs in ${#units[@]} VMs ($ngroups group VMs of up to $GROUP plain-mode runs; E2E_GROUP=1: a VM each)"
# E2E_LIST=1: print the runs this tier would make, one run name a line, and stop (no VM)
[[ ${E2E_LIST:-0} == 1 ]] && { for r in "${runs[@]}"; do r2=${r#*|*|*|*|}; echo "${r2%%|*}"; done; exit 0; }

# ---------------------------------------------------------------- the queue
t_all=$SECONDS
declare -A running=()   # pid → indices (a unit: one run, or a group)
next=0; done_n=0
report() { # print a finished run's console and result as one block
  local i=$1 r=${runs[$1]} e impl v s runname label k
  IFS='|' read -r e impl v s runname label k <<<"$r"
  printf '\n\033[1m=== %s (%d of %d done, %d s into the tier)\033[0m\n' "$label" "$done_n" "${#runs[@]}" $((SECONDS - t_all))
  sed '1d' "$OUTDIR/$runname.console.log" 2>/dev/null
  [[ -s $RES/$i ]] && cut -f3- "$RES/$i" || echo "FAIL  $label  (no result: the run's job died)"
}
while ((next < ${#units[@]} || ${#running[@]})); do
  while ((next < ${#units[@]} && ${#running[@]} < JOBS)); do
    u=${units[next]#*|}
    if [[ $u == *" "* ]]; then run_group $u & else run_one "$u" & fi
    running[$!]=$u
    next=$((next + 1))
  done
  wait -n -p pid "${!running[@]}" 2>/dev/null
  [[ -n ${pid:-} && -n ${running[$pid]+x} ]] || {   # wait -n without -p (bash < 5.1): find who ended
    for p in "${!running[@]}"; do kill -0 "$p" 2>/dev/null || { pid=$p; break; }; done; }
  [[ -n ${pid:-} && -n ${running[$pid]+x} ]] || continue
  u=${running[$pid]}; unset "running[$pid]"; pid=
  for i in $u; do done_n=$((done_n + 1)); report "$i"; done
done

# ---------------------------------------------------------------- the summary
total=$((SECONDS - t_all))
pass=0; fail=0; skip=0; kbug=0; vm=0
printf '\n\033[1m=== e2e summary: %d runs, %d VM(s) at a time, %d s (%d min) wall\033[0m\n' "${#runs[@]}" "$JOBS" "$total" $(((total + 30) / 60))
for ((i = 0; i < ${#runs[@]}; i++)); do
  if [[ -s $RES/$i ]]; then
    IFS=$'\t' read -r st dt line <"$RES/$i"
  else st=fail; dt=0; line="FAIL  $(cut -d'|' -f6 <<<"${runs[i]}")  (no result)"; fi
  case $st in pass) pass=$((pass + 1)) ;; skip) skip=$((skip + 1)) ;; kbug) kbug=$((kbug + 1)) ;; *) fail=$((fail + 1)) ;; esac
  vm=$(awk -v a="$vm" -v b="$dt" 'BEGIN{printf "%.1f", a+b}')
  echo "$line"
done
echo "longest runs (their VM time is what a second lane hides; a new scenario's budget: docs/development.md, \"What runs where\"):"
for ((i = 0; i < ${#runs[@]}; i++)); do [[ -s $RES/$i ]] && printf '%s\t%s\n' "$(cut -f2 "$RES/$i")" "$(cut -d'|' -f6 <<<"${runs[i]}")"; done \
  | sort -t$'\t' -k1,1nr | head -n 5 | while IFS=$'\t' read -r dt l; do printf '  %7.1f s  %s\n' "$dt" "$l"; done
# This tier's durations, in the form the longest-first order reads (copy it over
# Tests/testbed/e2e-durations.tsv after a full run on a quiet machine to refresh the order).
{ echo "# run<TAB>seconds: e2e.sh $(date -u +%FT%TZ), $JOBS VM(s) at a time"
  for ((i = 0; i < ${#runs[@]}; i++)); do
    [[ -s $RES/$i ]] && printf '%s\t%s\n' "$(cut -d'|' -f5 <<<"${runs[i]}")" "$(cut -f2 "$RES/$i")"
  done; } >"$OUTDIR/e2e-durations.tsv"
printf 'e2e: %s s of VM time in %d s of wall time (%d VM(s) at a time); this tier alone is %d%% of CI'"'"'s %d s\n' \
  "$vm" "$total" "$JOBS" $((100 * total / CI_LIMIT)) "$CI_LIMIT"

# ---------------------------------------------------------------- skips, kernel BUGs, retries
# Apart from the pass/fail lines above, so a green tier shows what it did not prove.
skips=$(for ((i = 0; i < ${#runs[@]}; i++)); do [[ -s $RES/$i ]] && grep -E '^skip' "$RES/$i" | cut -f3-; done)
kbugs=$(for ((i = 0; i < ${#runs[@]}; i++)); do [[ -s $RES/$i ]] && grep -E '^kbug' "$RES/$i" | cut -f3-; done)
echo "skipped (allow-listed, Tests/testbed/skip-allowlist): $skip"; [[ -n $skips ]] && sed 's/^/  /' <<<"$skips"
echo "excused by a kernel BUG the scenario declared (expects_kernel_bug, BUG before the failing step): $kbug"; [[ -n $kbugs ]] && sed 's/^/  /' <<<"$kbugs"
retried=0; retry_fail=
retry_lines=$(cat "$RES"/*.retry 2>/dev/null | awk -F'\t' '$2 > 0')
[[ -n $retry_lines ]] && retried=$(wc -l <<<"$retry_lines")
echo "runs that needed a retry: $retried (the tier fails above $RETRY_LIMIT)"
[[ -n $retry_lines ]] && while IFS=$'\t' read -r n k why; do printf '  %s: %d retr%s; first failure: %s\n' "$n" "$k" "$([[ $k == 1 ]] && echo y || echo ies)" "$why"; done <<<"$retry_lines"
((retried > RETRY_LIMIT)) && retry_fail+="$retried runs needed a retry in this tier (more than $RETRY_LIMIT). "
# The record across tiers on this machine: a run that needed a retry in 2 of its last 5 tiers is
# flaky, whatever this tier's count says. (A fresh CI machine has only this tier's line.)
if mkdir -p "$(dirname "$RETRY_RECORD")" 2>/dev/null && cat "$RES"/*.retry 2>/dev/null | awk -F'\t' -v d="$(date -u +%FT%TZ)" '{ print d "\t" $1 "\t" $2 }' >>"$RETRY_RECORD"; then
  flaky=$(awk -F'\t' '!/^#/ { h[$2] = h[$2] ($3 > 0 ? 1 : 0) } END { for (n in h) { s = substr(h[n], length(h[n]) > 5 ? length(h[n]) - 4 : 1); c = gsub(/1/, "", s); if (c >= 2) print n " (" c " of its last " (length(h[n]) > 5 ? 5 : length(h[n])) " tiers)" } }' "$RETRY_RECORD" \
    | grep -F -f <(cat "$RES"/*.retry | cut -f1 | sed 's/$/ (/') || true)
  if [[ -n $flaky ]]; then
    echo "flaky on this machine (a retry in 2 of the last 5 tiers; $RETRY_RECORD):"; sed 's/^/  /' <<<"$flaky"
    retry_fail+="$(wc -l <<<"$flaky") run(s) needed a retry in 2 of their last 5 tiers. "
  fi
else echo "e2e: could not append to the retry record $RETRY_RECORD"; fi
[[ -n $retry_fail ]] && echo "FAIL: retries: $retry_fail(docs/development.md, \"Retries\")"
echo "$pass passed, $fail failed, $skip skipped, $kbug excused by a kernel BUG, $retried retried"
((fail == 0)) && [[ -z $retry_fail ]]
