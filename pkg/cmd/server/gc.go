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

package server

import (
	"runtime/debug"

	"k8s.io/klog/v2"
)

// defaultGCPercent is the Go collector's target the server runs with unless GOGC says otherwise.
// The server's live heap is mostly its caches (the watch cache's Networks, the embedded etcd's
// index), and with Go's default of 100 the heap grows to twice that before each collection, and
// the process keeps the memory. At 75 the heap peaks at 1.75 times the live heap: in a fill of
// 100,000 Networks RSS was 16% lower for the same creates per second (at 50 it was 29% lower,
// and creates 29% slower: docs/performance.md, "The collector's target").
const defaultGCPercent = 75

// setGCPercent sets the collector's target to defaultGCPercent when GOGC is unset (Go has then
// read nothing from the environment) and says which target the server runs with.
func setGCPercent(lookup func(string) (string, bool)) int {
	if v, ok := lookup("GOGC"); ok {
		klog.V(1).InfoS("The Go collector's target is GOGC's", "GOGC", v)
		return -1
	}
	debug.SetGCPercent(defaultGCPercent)
	klog.V(1).InfoS("The Go collector's target is the server's default; GOGC overrides it", "percent", defaultGCPercent)
	return defaultGCPercent
}
