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

// keepProfile waits for a profile cpuProfile started and records its file among s's profiles;
// a failed one fails the run, named by what.
func (b *bench) keepProfile(s *side, what string, wait func() (string, error)) {
	if f, err := wait(); err != nil {
		b.fail("%s: %s: %v", s.name, what, err)
	} else {
		s.fig.Profiles = append(s.fig.Profiles, f)
	}
}

func heapProfile(ctx context.Context, ep *endpoint, dir, name string) (string, error) {
	return saveProfile(ctx, ep, "/debug/pprof/heap?gc=1", dir, name)
}
