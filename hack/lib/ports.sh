# shellcheck shell=bash
# Loopback ports of the local cluster.

# port_free PORT: whether nothing listens on 127.0.0.1:PORT.
port_free() { ! (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

# require_free_ports HINT PORT...: fail on the first PORT in use, saying HINT (how to pick others).
require_free_ports() {
  local hint=$1 p
  shift
  for p in "$@"; do
    port_free "$p" || die "port 127.0.0.1:$p is in use ($hint)"
  done
}
