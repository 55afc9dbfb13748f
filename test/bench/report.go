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
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// sideFigures are the raw figures of one side.
type sideFigures struct {
	Server string        `json:"server"`
	Create *createResult `json:"create"`
	// Lists by kind: json, protobuf, paged-json, paged-protobuf, aggregated-json, aggregated-protobuf.
	Lists            map[string]*listResult `json:"lists"`
	Watch            *watchResult           `json:"watch"`
	Agents           *agentResult           `json:"nodeAgents"`
	CreateAggregated *createResult          `json:"createAggregated"`
	MemoryBaseline   *memSample             `json:"memoryBaseline"`
	Memory           []*memSample           `json:"memory"`
	Sync             *syncResult            `json:"informerSync"`
	Restart          *restartResult         `json:"restart"`
	CreateAtMax      *createResult          `json:"createAtMax"`
	Fills            []*createResult        `json:"fills"`
	Scale            *scaleResult           `json:"scale,omitempty"`
	Controller       *controllerResult      `json:"controller,omitempty"`
	Profiles         []string               `json:"profiles,omitempty"`
}

// results is everything one run measured; it is written as JSON.
type results struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Machine machine   `json:"machine"`
	// LoadBefore is how busy the machine was just before the run.
	LoadBefore *loadSample `json:"loadBefore"`
	Config     config      `json:"config"`
	Ours       sideFigures `json:"ours"`
	CRD        sideFigures `json:"crd"`
	Lines      []line      `json:"lines"`
	Errors     []string    `json:"errors,omitempty"`
}

// line is a row of the table: ours against the CRD, with a ratio above 1 when ours is better.
type line struct {
	Name string   `json:"name"`
	Unit string   `json:"unit"`
	Ours *float64 `json:"ours"`
	CRD  *float64 `json:"crd"`
	// CRDNote replaces a figure the CRD cannot have (406 for protobuf).
	CRDNote string `json:"crdNote,omitempty"`
	// RatioBase is the CRD figure the ratio uses when CRD has none (its JSON counterpart).
	RatioBase      *float64 `json:"ratioBase,omitempty"`
	Ratio          *float64 `json:"ratio"`
	Target         float64  `json:"target,omitempty"`
	HigherIsBetter bool     `json:"higherIsBetter"`
}

// Units of the lines.
const (
	unitRate   = "obj/s"
	unitMs     = "ms"
	unitBytes  = "bytes"
	unitPerObj = "bytes/object"
	unitCount  = "count"
	// unitCPU is CPU milliseconds per operation, read from /proc over the operation's run.
	unitCPU = "ms CPU"
	// unitCores is a process's CPU time over wall time; figures without a ratio.
	unitCores = "cores"
	// unitFactor is a side's own ratio (last against first); figures without a ratio.
	unitFactor = "factor"
	// unitPerNet is a count per Network (the controller step's costs); figures without a ratio.
	unitPerNet = "per Network"
)

func val(v float64) *float64 { return &v }

// addLine appends a line; nil figures mean missing.
func (r *results) addLine(name, unit string, ours, crd *float64, higher bool, target float64) *line {
	l := line{Name: name, Unit: unit, Ours: ours, CRD: crd, HigherIsBetter: higher, Target: target}
	l.computeRatio()
	r.Lines = append(r.Lines, l)
	return &r.Lines[len(r.Lines)-1]
}

func (l *line) computeRatio() {
	base := l.CRD
	if base == nil {
		base = l.RatioBase
	}
	l.Ratio = nil
	if l.Ours == nil || base == nil || l.Unit == unitCount || l.Unit == unitPerNet || l.Unit == unitCores || l.Unit == unitFactor {
		return
	}
	// A ratio of a negative figure (a memory difference lost in the noise) means nothing.
	if *l.Ours < 0 || *base < 0 {
		return
	}
	var r float64
	if l.HigherIsBetter {
		r = *l.Ours / *base
	} else {
		r = *base / *l.Ours
	}
	if !math.IsInf(r, 0) && !math.IsNaN(r) {
		l.Ratio = &r
	}
}

// missing names the lines that lack a figure that should be there.
func (r *results) missing() []string {
	var out []string
	for _, l := range r.Lines {
		if l.Ours == nil || (l.CRD == nil && l.CRDNote == "") {
			out = append(out, l.Name)
		}
	}
	return out
}

// printTable writes the machine header and the side-by-side table.
func (r *results) printTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nnetwork-apiserver vs the best CRD for the same API, %s\n", r.Started.Format(time.RFC3339))
	fmt.Fprintln(w, r.LoadBefore.String())
	fmt.Fprintf(w, "machine: %s, %d cores, Linux %s, %s\n", m.CPU, m.Cores, m.Kernel, m.Go)
	etcds := "one etcd for both"
	if r.Config.scaleMode() {
		etcds = "ours embedded"
	}
	fmt.Fprintf(w, "servers: network-apiserver %s; kube-apiserver %s; etcd %s (%s)\n", m.NetworkAPIServer, m.KubeAPIServer, m.Etcd, etcds)
	c := r.Config
	if c.scaleMode() {
		fmt.Fprintf(w, "scale point: ours is network-apiserver standalone (embedded etcd in its process, --controllers=false); the CRD is kube-apiserver + its etcd (network-apiserver stopped); one side at a time\n")
		for _, side := range []struct {
			name string
			s    *scaleResult
		}{{"ours", r.Ours.Scale}, {"CRD", r.CRD.Scale}} {
			if side.s == nil {
				continue
			}
			why := "reached the target"
			if side.s.StoppedBecause != "" {
				why = "stopped: " + side.s.StoppedBecause
			}
			fmt.Fprintf(w, "%s: %d stored of %d asked (%s)\n", side.name, side.s.Stored, side.s.Target, why)
		}
		fmt.Fprintf(w, "clients: %d for the creates, one HTTP/2 transport; ours: generated clientset (protobuf), CRD: dynamic client (JSON); paged LIST in JSON on both\n", c.Clients)
	} else if c.Only == onlyController {
		fmt.Fprintf(w, "controller step: network-apiserver standalone (embedded etcd) with its in-process controller confined to a network namespace the bench made; %d Networks created from %d clients, then deleted; one node, no pods\n", c.ControllerNetworks, c.Clients)
	} else {
		fmt.Fprintf(w, "clients: %d, one HTTP/2 transport per server, QPS unlimited, compression %v; ours: generated clientset (protobuf), CRD: dynamic client (JSON)\n",
			c.Clients, c.Compression)
		fmt.Fprintf(w, "node agents: each watcher its own transport and TLS connection (HTTP/2), JSON on both sides (the CRD has no protobuf), events read only as far as their type and annotation\n")
	}
	fmt.Fprintf(w, "run took %s; ratio > 1 means network-apiserver is better; targets are informational\n\n", (time.Duration(r.Seconds) * time.Second).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tours\tCRD\tratio (ours better > 1)\ttarget\t")
	for _, l := range r.Lines {
		ours, crd, ratio, target := "MISSING", "MISSING", "-", ""
		if l.Ours != nil {
			ours = format(*l.Ours, l.Unit)
		}
		if l.CRD != nil {
			crd = format(*l.CRD, l.Unit)
		} else if l.CRDNote != "" {
			crd = l.CRDNote
		}
		if l.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *l.Ratio)
			if l.CRD == nil {
				ratio += " vs JSON"
			}
		}
		if l.Target > 0 {
			target = fmt.Sprintf("≥%g×", l.Target)
			if l.Ratio != nil && *l.Ratio >= l.Target {
				target += " met"
			} else if l.Ratio != nil {
				target += " not met"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", l.Name, ours, crd, ratio, target)
	}
	tw.Flush()
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "\nerrors (%d):\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func format(v float64, unit string) string {
	switch unit {
	case unitRate:
		return fmt.Sprintf("%.0f obj/s", v)
	case unitMs:
		if v >= 1000 {
			return fmt.Sprintf("%.2f s", v/1000)
		}
		return fmt.Sprintf("%.1f ms", v)
	case unitBytes:
		switch {
		case v >= 1<<20:
			return fmt.Sprintf("%.2f MiB", v/(1<<20))
		case v >= 1<<10:
			return fmt.Sprintf("%.1f KiB", v/(1<<10))
		}
		return fmt.Sprintf("%.0f B", v)
	case unitPerObj:
		return fmt.Sprintf("%.0f B/obj", v)
	case unitCount:
		return fmt.Sprintf("%.0f", v)
	case unitCPU:
		return fmt.Sprintf("%.3f ms CPU", v)
	case unitCores:
		return fmt.Sprintf("%.2f cores", v)
	case unitFactor:
		return fmt.Sprintf("%.2f×", v)
	case unitPerNet:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprint(v)
}

// writeJSON writes the results into dir and returns the file.
func (r *results) writeJSON(dir string) (string, error) {
	prefix := "bench-"
	if r.Config.scaleMode() {
		prefix = "bench-scale-"
	}
	file := filepath.Join(dir, prefix+r.Started.Format("20060102-150405")+".json")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	return file, os.WriteFile(file, append(b, '\n'), 0o644)
}

// machine describes where the run happened.
type machine struct {
	CPU              string `json:"cpu"`
	Cores            int    `json:"cores"`
	Kernel           string `json:"kernel"`
	Go               string `json:"go"`
	NetworkAPIServer string `json:"networkAPIServer"`
	KubeAPIServer    string `json:"kubeAPIServer"`
	Etcd             string `json:"etcd"`
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
