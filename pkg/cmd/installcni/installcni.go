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

// Package installcni is `network-apiserver install-cni-plugin`: the node agent's init container
// copies the samplecrd-bridge CNI plugin (first in every list the agent writes) from
// the image into the node's CNI binary directory, where the container runtime looks for plugins.
package installcni

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

const (
	// PluginName is the plugin's file name: the type its entry in a list names.
	PluginName = "samplecrd-bridge"
	// DefaultSource is where the image holds the plugin (hack/image).
	DefaultSource = "/usr/local/lib/network-apiserver/" + PluginName
)

// NewCommand returns the install-cni-plugin command.
func NewCommand() *cobra.Command {
	source, binDir := DefaultSource, ""
	cmd := &cobra.Command{
		Use:          "install-cni-plugin",
		Short:        "Copy the samplecrd-bridge CNI plugin into the node's CNI binary directory",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(c *cobra.Command, _ []string) error {
			if binDir == "" {
				return errors.New("--cni-bin-dir is required (the node's CNI binary directory as mounted here)")
			}
			changed, err := Install(source, binDir)
			if err != nil {
				return err
			}
			what := "already installed"
			if changed {
				what = "installed"
			}
			_, err = fmt.Fprintf(c.OutOrStdout(), "%s %s\n", filepath.Join(binDir, PluginName), what)
			return err
		},
	}
	cmd.Flags().StringVar(&source, "source", source, "The plugin to install.")
	cmd.Flags().StringVar(&binDir, "cni-bin-dir", binDir, "The node's CNI binary directory (the runtime's bin_dir, /opt/cni/bin on most nodes), as mounted in this container.")
	return cmd
}

// Install copies source into dir as PluginName unless a file with the same content and mode
// 0755 is there, and reports whether it wrote. The copy is written to a temporary file in dir,
// synced, made executable and renamed over the old one, so that a runtime starting the plugin
// meanwhile runs the old one or the new one, never part of a file.
func Install(source, dir string) (bool, error) {
	content, err := os.ReadFile(source)
	if err != nil {
		return false, fmt.Errorf("reading the plugin: %w", err)
	}
	if info, err := os.Stat(dir); err != nil {
		return false, fmt.Errorf("the CNI binary directory: %w", err)
	} else if !info.IsDir() {
		return false, fmt.Errorf("the CNI binary directory %s is not a directory", dir)
	}
	target := filepath.Join(dir, PluginName)
	if old, err := os.ReadFile(target); err == nil && bytes.Equal(old, content) {
		if info, err := os.Stat(target); err == nil && info.Mode().Perm() == 0o755 && info.Mode().IsRegular() {
			return false, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading the installed plugin: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+PluginName+".*")
	if err != nil {
		return false, err
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(content); err != nil {
		return false, err
	}
	if err := tmp.Chmod(0o755); err != nil {
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return false, err
	}
	done = true
	d, err := os.Open(dir)
	if err != nil {
		return true, err
	}
	defer func() { _ = d.Close() }()
	return true, d.Sync()
}
