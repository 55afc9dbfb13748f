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
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Process is a child process a test can stop, freeze, kill and start again with the same
// command line; its output is appended to one log file across restarts.
type Process struct {
	Name string
	Args []string
	Log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// NewProcess names a command whose output goes to the file log; nothing runs yet.
func NewProcess(name, log string, args ...string) *Process {
	return &Process{Name: name, Args: args, Log: log}
}

// Start runs the command (again); it fails if the process is running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n==== %s: starting %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.Name)
	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that a SIGSTOP typed at the terminal never reaches it, and so
	// that it dies with the test (Pdeathsig) if the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Linux sends Pdeathsig when the thread that forked the child exits, not the process, and
	// the Go runtime ends a thread whose goroutine exits locked to it (netnstest.New does so on
	// purpose). A child forked from any thread could be killed that way in the middle of a test,
	// so it is forked from a goroutine that keeps its thread until the child has exited.
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	if err := <-started; err != nil {
		f.Close()
		return err
	}
	p.cmd, p.done = cmd, done
	return nil
}

// Running reports whether the current run has not ended.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the running process.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s was never started", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends sig (SIGKILL or SIGTERM) and waits for the exit; after grace it kills.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process cannot exit
	if err := cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-done
	if sig == syscall.SIGKILL {
		return nil
	}
	return fmt.Errorf("%s did not exit within %s of %s; killed", p.Name, grace, sig)
}

// Exited is closed when the current run of the process ends.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}
