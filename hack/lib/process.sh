# shellcheck shell=bash
# Background processes the hack scripts start: each has a pid file (NAME.pid) and a log.

# stop_pid PIDFILE GRACE: SIGTERM the process in PIDFILE; SIGKILL it if it still runs GRACE
# seconds later; wait until it is gone; remove PIDFILE.
stop_pid() {
  local pidfile=$1 grace=$2 pid i
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$(basename "$pidfile" .pid) (pid $pid) still running ${grace}s after SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
  fi
  rm -f "$pidfile"
}

# alive PIDFILE LOG: fail, showing LOG's tail, when the process in PIDFILE has exited.
alive() {
  if ! kill -0 "$(<"$1")" 2>/dev/null; then
    tail -n 40 "$2" >&2 || true
    die "$(basename "$1" .pid) exited; see $2"
  fi
}

# poll SECONDS PIDFILE LOG WHAT COMMAND...: retry COMMAND every 0.2s until it succeeds; fail when
# the process in PIDFILE exits or SECONDS pass.
poll() {
  local seconds=$1 pidfile=$2 logf=$3 what=$4 deadline
  shift 4
  deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    alive "$pidfile" "$logf"
    ((SECONDS < deadline)) || die "timed out after ${seconds}s waiting for $what"
    sleep 0.2
  done
}
