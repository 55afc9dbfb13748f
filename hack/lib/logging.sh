# shellcheck shell=bash
# Messages of the hack scripts, each line after the script's name (local-up-cluster: ...).

log_prefix() { basename "$0" .sh; }

# info MESSAGE...: progress a user reads, on stdout.
info() { echo "$(log_prefix): $*"; }

# log MESSAGE...: on stderr, so that it never mixes with what a command prints for a pipe.
log() { echo "$(log_prefix): $*" >&2; }

# die MESSAGE...: log MESSAGE and exit 1.
die() {
  log "$*"
  exit 1
}
