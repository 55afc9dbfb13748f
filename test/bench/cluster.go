package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cluster is a local control plane started by hack/local-up-cluster.sh in a temporary state dir:
// etcd, kube-apiserver and network-apiserver behind its aggregation layer, all on loopback.
type cluster struct {
	root  string // the repository
	state string // LOCAL_CLUSTER_DIR
	env   []string

	etcdPort, apiserverPort, networkPort int
}

// newCluster picks free loopback ports and a state dir; nothing runs yet.
func newCluster(root string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "network-bench-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	c := &cluster{root: root, state: filepath.Join(dir, "cluster"), etcdPort: ports[0], apiserverPort: ports[2], networkPort: ports[3]}
	c.env = append(os.Environ(), "LOCAL_CLUSTER_DIR="+c.state,
		fmt.Sprintf("ETCD_PORT=%d", ports[0]), fmt.Sprintf("ETCD_PEER_PORT=%d", ports[1]),
		fmt.Sprintf("APISERVER_PORT=%d", ports[2]), fmt.Sprintf("NETWORK_APISERVER_PORT=%d", ports[3]),
		// Nothing but the two servers and etcd: no controller adds load while we measure.
		"KUBE_CONTROLLER_MANAGER=false")
	return c, nil
}

// freePorts returns n distinct free loopback ports. The listeners stay open until all n are
// picked: closed one by one, the kernel may hand out the same port twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// script runs hack/local-up-cluster.sh ARG, its output going to our stderr.
func (c *cluster) script(ctx context.Context, arg string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.root, "hack", "local-up-cluster.sh"), arg)
	cmd.Dir, cmd.Env = c.root, c.env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A cancelled bench asks the script to stop; down then cleans up whatever it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd.Run()
}

func (c *cluster) up(ctx context.Context) error { return c.script(ctx, "up") }

// down stops every process the cluster runs (including those restart started) and removes the
// state dir; it runs on its own deadline, since it is called when the bench's context is done.
func (c *cluster) down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := c.script(ctx, "down")
	if rmErr := os.Remove(filepath.Dir(c.state)); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}

func (c *cluster) path(name string) string { return filepath.Join(c.state, name) }

// pid returns the process id recorded for a component (etcd, kube-apiserver, network-apiserver).
func (c *cluster) pid(name string) (int, error) {
	b, err := os.ReadFile(c.path(name + ".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// stop sends SIGTERM to a component and waits until it has exited.
func (c *cluster) stop(ctx context.Context, name string) error {
	pid, err := c.pid(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for running(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) still running 2m after SIGTERM", name, pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// running reports whether pid is a live process (a zombie waiting for its parent counts as gone).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// start runs a component again with the command line cluster-up recorded in NAME.args, logging
// to NAME.log as before, and writes its pid back so that down stops it. It returns when the
// process has been started.
func (c *cluster) start(name string) (time.Time, error) {
	b, err := os.ReadFile(c.path(name + ".args"))
	if err != nil {
		return time.Time{}, err
	}
	args := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	log, err := os.OpenFile(c.path(name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return time.Time{}, err
	}
	defer log.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return time.Time{}, err
	}
	go cmd.Wait() //nolint:errcheck // reaps the process whenever down stops it
	if err := os.WriteFile(c.path(name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return time.Time{}, err
	}
	return started, nil
}

// rssBytes is a component's resident set size from /proc/<pid>/status.
func (c *cluster) rssBytes(name string) (int64, error) {
	pid, err := c.pid(name)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %s (pid %d)", name, pid)
}

// saveLogs copies the components' logs into dir, for a look after a failed run.
func (c *cluster) saveLogs(dir string) {
	logs, _ := filepath.Glob(c.path("*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
}
