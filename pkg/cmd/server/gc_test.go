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
	"testing"
)

// TestGCPercentDefaultUnlessGOGC: without GOGC the server runs the collector at its default
// target; with GOGC set it leaves Go's reading of it alone.
func TestGCPercentDefaultUnlessGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	if got := setGCPercent(func(string) (string, bool) { return "", false }); got != defaultGCPercent {
		t.Errorf("without GOGC: set %d, want %d", got, defaultGCPercent)
	}
	if now := debug.SetGCPercent(100); now != defaultGCPercent {
		t.Errorf("without GOGC the collector's target is %d, want %d", now, defaultGCPercent)
	}
	if got := setGCPercent(func(k string) (string, bool) { return "200", k == "GOGC" }); got != -1 {
		t.Errorf("with GOGC set: set %d, want nothing", got)
	}
	if now := debug.SetGCPercent(100); now != 100 {
		t.Errorf("with GOGC set the collector's target changed to %d", now)
	}
}
