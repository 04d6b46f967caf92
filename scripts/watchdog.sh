#!/usr/bin/env bash
# Runs a command (the test suite) and watches its output: when it prints nothing for
# FPREP_WATCHDOG_SECONDS (default 900), it shows what each of the command's processes waits on
# (state, kernel wait channel, the kernel stack of every thread, as root) and kills the whole
# tree, so a hung test fails the run with the facts to find it instead of using up CI's time.
#
#   bash scripts/watchdog.sh swift test
set -uo pipefail
quiet_limit=${FPREP_WATCHDOG_SECONDS:-900}
log=$(mktemp "${TMPDIR:-/tmp}/fprep-watchdog-XXXXXX")
trap 'rm -f "$log"' EXIT

# Its own process group, so the kill takes every descendant (test programs, agents, daemons).
setsid "$@" > >(tee -a "$log") 2>&1 &
leader=$!

descendants() {
  local pid=$1 child
  echo "$pid"
  # The kernel's list of each thread's children (ps where the kernel keeps none).
  for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null || ps -o pid= --ppid "$pid" 2>/dev/null); do
    descendants "$child"
  done
}

explain() {
  echo "watchdog: no output for ${quiet_limit}s; what the test processes wait on:"
  local stacks
  stacks=$(mktemp "${TMPDIR:-/tmp}/fprep-watchdog-stacks-XXXXXX")
  # User-space stacks of the test runner and of fprep's own processes (gdb, which setup.sh
  # installs): a wait on a lock or a pipe shows only as a futex or a read above.
  if command -v gdb >/dev/null; then
    for pid in $(descendants "$leader"); do
      case "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" in
        *xctest*|*swiftpm-testing-helper*|*fprep*)
          echo "--- user-space stacks of pid $pid"
          # Threads idle in an event loop's epoll_wait are left out.
          timeout 120 gdb -p "$pid" -batch -nx -ex "thread apply all bt 30" 2>/dev/null | grep -E '^(Thread|#)' | cut -c1-200 |
            tee -a "$stacks" | awk '/^Thread/ { if (keep) printf "%s", block; block = $0 "\n"; keep = 1; next }
                 /^#0 / && /epoll_wait/ { keep = 0 }
                 { block = block $0 "\n" }
                 END { if (keep) printf "%s", block }'
          ;;
      esac
    done
  fi
  echo "--- /proc/locks"
  cat /proc/locks 2>/dev/null
  # Last, as the end of a long log is what is read first: each thread's state and kernel stack.
  for pid in $(descendants "$leader"); do
    [ -d "/proc/$pid" ] || continue
    echo "--- pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-300)"
    for task in /proc/"$pid"/task/*; do
      local tid=${task##*/}
      local state wchan
      state=$(awk '/^State:/ {print $2}' "$task/status" 2>/dev/null)
      wchan=$(cat "$task/wchan" 2>/dev/null)
      echo "  thread $tid ($(cat "$task/comm" 2>/dev/null)) state $state wchan ${wchan:-?}"
      # Threads idle in a poll or a futex wait are many and say little; the others' stacks do.
      case "$wchan" in
        do_sys_poll|do_epoll_wait|futex_wait_queue|futex_do_wait|hrtimer_nanosleep|do_nanosleep|0|"") ;;
        *) sed 's/^/      /' "$task/stack" 2>/dev/null ;;
      esac
    done
  done
  # The very end: which tests the threads are in (the innermost frame of test code on each stack).
  echo "--- tests on the stacks"
  awk '/^Thread/ { thread = $0; found = 0; next }
       !found && /Tests[0-9A-Za-z_]*[0-9]/ && !/TestSupport/ { print thread; print "    " $0; found = 1 }' "$stacks" | cut -c1-200
  rm -f "$stacks"
}

last_size=-1
quiet_since=$(date +%s)
while kill -0 "$leader" 2>/dev/null; do
  sleep 5
  size=$(stat -c %s "$log" 2>/dev/null || echo 0)
  now=$(date +%s)
  if [ "$size" != "$last_size" ]; then
    last_size=$size
    quiet_since=$now
  elif (( now - quiet_since >= quiet_limit )); then
    explain >&2
    # Processes the tests started in groups of their own are not in the leader's group.
    for pid in $(descendants "$leader"); do kill -KILL "$pid" 2>/dev/null; done
    kill -KILL -- "-$leader" 2>/dev/null
    wait "$leader" 2>/dev/null
    echo "watchdog: the run was killed after ${quiet_limit}s without output" >&2
    exit 124
  fi
done
wait "$leader"
