package robustness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the suite can stop, freeze, kill and start again with the same
// command line; its output is appended to one log file across restarts.
type proc struct {
	name string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newProc(name, log string, args ...string) *proc {
	return &proc{name: name, args: args, log: log}
}

// start runs the command (again); it fails if the process is running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n==== %s: starting %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that a SIGSTOP typed at the terminal never reaches it, and so
	// that it dies with the test (Pdeathsig) if the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func (p *proc) running() bool {
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

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s was never started", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// stop sends sig (SIGKILL or SIGTERM) and waits for the exit; after grace it kills.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
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
	return fmt.Errorf("%s did not exit within %s of %s; killed", p.name, grace, sig)
}

// exited is closed when the current run of the process ends.
func (p *proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// freePorts returns n distinct free loopback ports (the listeners stay open until all are picked).
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
