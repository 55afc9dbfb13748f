# shellcheck shell=bash
# cgroups that hold every process of a local cluster with real nodes (hack/local-up-nodes.sh),
# so that cluster-down finds and kills them all.

# hierarchies: every mounted cgroup hierarchy (v1 controllers, v1 named, v2).
hierarchies() { awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo | sort -u; }
# The hierarchy whose cgroups tell which processes belong to the cluster.
track_hierarchy() {
  if [[ -d /sys/fs/cgroup/pids ]]; then echo /sys/fs/cgroup/pids; else echo /sys/fs/cgroup; fi
}

# cgroup_make NAME: NAME (and NAME/system, where the processes we start go) in every hierarchy.
cgroup_make() {
  local h
  for h in $(hierarchies); do
    mkdir -p "$h/$1"
    # cpuset (v1) starts a new cgroup with no CPUs and no memory nodes: copy the parent's.
    if [[ -f $h/$1/cpuset.cpus && -z $(<"$h/$1/cpuset.cpus") ]]; then
      cat "$h/cpuset.cpus" >"$h/$1/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$1/cpuset.mems"
    fi
  done
  mkdir -p "$(track_hierarchy)/$1/system"
}

# cgroup_pids NAME: the processes in NAME and below, in the tracking hierarchy.
cgroup_pids() {
  local d
  d=$(track_hierarchy)/$1
  [[ -d $d ]] || return 0
  find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
}

# cgroup_destroy NAME: SIGKILL every process in NAME and below, wait for them, remove the cgroups
# (deepest first) in every hierarchy.
cgroup_destroy() {
  local name=$1 pids i h
  for ((i = 0; i < 300; i++)); do
    pids=$(cgroup_pids "$name")
    [[ -n $pids ]] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  [[ -z $(cgroup_pids "$name") ]] || die "processes left in cgroup $name: $(cgroup_pids "$name" | tr '\n' ' ')"
  for h in $(hierarchies); do
    [[ -d $h/$name ]] || continue
    # Empty cgroups go away with rmdir; a just-killed process may take a moment to leave one.
    for ((i = 0; i < 100; i++)); do
      find "$h/$name" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $h/$name ]] || break
      sleep 0.1
    done
    [[ ! -d $h/$name ]] || die "could not remove cgroup $h/$name"
  done
}

# in_cgroup NAME CMD...: exec CMD from a shell that first moves itself into NAME/system.
in_cgroup() {
  local procs
  procs=$(track_hierarchy)/$1/system/cgroup.procs
  shift
  exec /bin/sh -c 'echo $$ >"$0" && exec "$@"' "$procs" "$@"
}
