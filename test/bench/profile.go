package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// saveProfile fetches a pprof endpoint of a server into dir/name.
func saveProfile(ctx context.Context, ep *endpoint, path, dir, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	status, body, err := ep.get(ctx, path, "")
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", path, status, truncate(body))
	}
	file := filepath.Join(dir, name)
	return file, os.WriteFile(file, body, 0o644)
}

// cpuProfile starts a CPU profile of seconds in the background; wait returns its file.
func cpuProfile(ctx context.Context, ep *endpoint, seconds int, dir, name string) (wait func() (string, error)) {
	type result struct {
		file string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		f, err := saveProfile(ctx, ep, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), dir, name)
		done <- result{f, err}
	}()
	return func() (string, error) {
		r := <-done
		return r.file, r.err
	}
}

func heapProfile(ctx context.Context, ep *endpoint, dir, name string) (string, error) {
	return saveProfile(ctx, ep, "/debug/pprof/heap?gc=1", dir, name)
}
