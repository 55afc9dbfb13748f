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
	"time"
)

// restartResult is one server stopped and started again with its stored objects.
type restartResult struct {
	Component string `json:"component"`
	Objects   int    `json:"objects"`
	// StopMs runs from SIGTERM to the process's exit.
	StopMs float64 `json:"stopMs"`
	// From process start to /readyz 200, and to the first LIST of all objects served in full.
	ReadyMs     float64 `json:"readyMs"`
	FirstListMs float64 `json:"firstListMs"`
}

// restartServer SIGTERMs component, starts it again with the same command line, and times its
// way back to serving: /readyz, then a LIST (through b) returning all objects.
func restartServer(ctx context.Context, cl *cluster, component string, b backend, objects int) (*restartResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	res := &restartResult{Component: component, Objects: objects}
	t := time.Now()
	if err := cl.Stop(ctx, component); err != nil {
		return nil, err
	}
	res.StopMs = ms(time.Since(t))
	started, err := cl.Start(component)
	if err != nil {
		return nil, err
	}
	ep := b.endpoint()
	var last string
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		status, body, err := ep.get(rctx, "/readyz", "")
		rcancel()
		if err == nil && status == http.StatusOK {
			break
		}
		last = fmt.Sprint(status, " ", truncate(body), err)
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s not ready: %w (last: %s)", component, err, last)
		}
	}
	res.ReadyMs = ms(time.Since(started))
	for {
		rctx, rcancel := context.WithTimeout(ctx, requestTimeout)
		_, n, err := b.list(rctx, "")
		rcancel()
		if err == nil && n == objects {
			break
		}
		last = fmt.Sprintf("%d objects, %v", n, err)
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%s: no full LIST: %w (last: %s)", component, err, last)
		}
	}
	res.FirstListMs = ms(time.Since(started))
	return res, nil
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
