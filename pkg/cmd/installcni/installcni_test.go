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

package installcni

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstall: the plugin lands executable under its name; an identical one is left alone; a
// different one (an upgrade) or one that lost its mode is replaced; nothing else stays in the
// directory; a missing source or directory is an error that names it.
func TestInstall(t *testing.T) {
	src := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(src, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, PluginName)
	check := func(what, content string, wantChanged, changed bool) {
		t.Helper()
		if changed != wantChanged {
			t.Errorf("%s: changed = %v, want %v", what, changed, wantChanged)
		}
		got, err := os.ReadFile(target)
		info, statErr := os.Stat(target)
		if err != nil || statErr != nil || string(got) != content || info.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %s holds %q (%v, mode %v), want %q, 0755", what, target, got, err, info, content)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("%s: the directory holds %d entries, want the plugin alone", what, len(entries))
		}
	}
	changed, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	check("first install", "v1", true, changed)
	changed, err = Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	check("again", "v1", false, changed)
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err = Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	check("after its mode changed", "v1", true, changed)
	if err := os.WriteFile(src, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err = Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	check("an upgrade", "v2", true, changed)

	if _, err := Install(filepath.Join(dir, "missing"), dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing source: %v", err)
	}
	if _, err := Install(src, filepath.Join(dir, "nodir")); err == nil || !strings.Contains(err.Error(), "nodir") {
		t.Errorf("a missing directory: %v", err)
	}
}

// TestCommand: the command asks for the directory and says what it did.
func TestCommand(t *testing.T) {
	src := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(src, []byte("p"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := NewCommand()
	cmd.SetArgs([]string{"--source", src})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--cni-bin-dir") {
		t.Fatalf("without --cni-bin-dir: %v", err)
	}
	dir := t.TempDir()
	for _, want := range []string{"installed", "already installed"} {
		var out bytes.Buffer
		cmd := NewCommand()
		cmd.SetArgs([]string{"--source", src, "--cni-bin-dir", dir})
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.String()); got != filepath.Join(dir, PluginName)+" "+want {
			t.Errorf("output %q, want %q", got, want)
		}
	}
}
