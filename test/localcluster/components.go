/*
Copyright The network-apiserver Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PID is the process id the scripts recorded for a component in NAME.pid (etcd,
// kube-apiserver, network-apiserver; nodes/NAME for local-up-nodes.sh's).
func (c *Cluster) PID(name string) (int, error) {
	b, err := os.ReadFile(c.Path(name + ".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Running reports whether pid is a live process (a zombie waiting for its parent counts as gone).
func Running(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	// pid (comm) STATE ...; comm may contain spaces, so look after the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// Stop sends SIGTERM to a component and waits until it has exited.
func (c *Cluster) Stop(ctx context.Context, name string) error {
	pid, err := c.PID(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for Running(pid) {
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

// Start runs a component again with the command line cluster-up recorded in NAME.args, logging
// to NAME.log as before, and writes its pid back so that down stops it. It returns when the
// process has been started.
func (c *Cluster) Start(name string) (time.Time, error) {
	b, err := os.ReadFile(c.Path(name + ".args"))
	if err != nil {
		return time.Time{}, err
	}
	args := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	log, err := os.OpenFile(c.Path(name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
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
	if err := os.WriteFile(c.Path(name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return time.Time{}, err
	}
	return started, nil
}

// RSSBytes is a component's resident set size from /proc/<pid>/status.
func (c *Cluster) RSSBytes(name string) (int64, error) {
	pid, err := c.PID(name)
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

// SaveLogs copies the components' logs into dir, for a look after a failed run.
func (c *Cluster) SaveLogs(dir string) {
	logs, _ := filepath.Glob(c.Path("*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
}
