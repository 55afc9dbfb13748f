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
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const repoRoot = "../.."

// makeImage runs `make image` into dir and returns the digest it printed.
func makeImage(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_DIR="+dir)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	digest, err := os.ReadFile(filepath.Join(dir, "digest"))
	if err != nil {
		t.Fatal(err)
	}
	d := strings.TrimSpace(string(digest))
	if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
		t.Fatalf("digest file holds %q", digest)
	}
	return d
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestMakeImage(t *testing.T) {
	dir1, dir2 := t.TempDir(), t.TempDir()
	digest := makeImage(t, dir1)
	// Reproducible: a second build of the same tree is the same image, byte for byte.
	if d2 := makeImage(t, dir2); d2 != digest {
		t.Errorf("two builds of the same tree: %s and %s", digest, d2)
	}
	if a, b := fileSum(t, filepath.Join(dir1, "network-apiserver.tar")), fileSum(t, filepath.Join(dir2, "network-apiserver.tar")); a != b {
		t.Errorf("the docker archives differ: %s and %s", a, b)
	}
	if a, b := fileSum(t, filepath.Join(dir1, "oci", "index.json")), fileSum(t, filepath.Join(dir2, "oci", "index.json")); a != b {
		t.Errorf("the OCI layouts' index.json differ")
	}

	// The OCI layout: one image, named, with OCI media types.
	index, err := layout.ImageIndexFromPath(filepath.Join(dir1, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the layout holds %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Digest.String() != digest || desc.MediaType != types.OCIManifestSchema1 ||
		desc.Annotations["org.opencontainers.image.ref.name"] != "network-apiserver:v1.37.2" {
		t.Errorf("layout manifest %+v, want %s, an OCI manifest named network-apiserver:v1.37.2", desc, digest)
	}
	img, err := index.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/local/bin/network-apiserver" {
		t.Errorf("entrypoint %q", got)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" || cfg.Created.IsZero() {
		t.Errorf("os %q, architecture %q, created %v", cfg.OS, cfg.Architecture, cfg.Created)
	}
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.TrimSpace(string(head))
	if got := cfg.Config.Labels["org.opencontainers.image.revision"]; got != commit {
		t.Errorf("revision label %q, want %s", got, commit)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 (no base image)", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}

	// The layer: the binary, the user database, /tmp; nothing else (no shell), all at the image's time.
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	entries := map[string]*tar.Header{}
	var binary, plugin, passwd []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
		if !h.ModTime.Equal(cfg.Created.Time) {
			t.Errorf("%s has mtime %v, the image was created %v", h.Name, h.ModTime, cfg.Created.Time)
		}
		switch h.Name {
		case "usr/local/bin/network-apiserver":
			binary, err = io.ReadAll(tr)
		case "usr/local/lib/network-apiserver/samplecrd-bridge":
			plugin, err = io.ReadAll(tr)
		case "etc/passwd":
			passwd, err = io.ReadAll(tr)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"etc/", "etc/passwd", "etc/group", "etc/nsswitch.conf", "home/", "home/nonroot/", "tmp/",
		"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/network-apiserver",
		"usr/local/lib/", "usr/local/lib/network-apiserver/", "usr/local/lib/network-apiserver/samplecrd-bridge"}
	if len(entries) != len(want) {
		t.Errorf("layer entries %v, want exactly %v", keys(entries), want)
	}
	for _, w := range want {
		if entries[w] == nil {
			t.Errorf("layer lacks %s", w)
		}
	}
	for _, name := range []string{"usr/local/bin/network-apiserver", "usr/local/lib/network-apiserver/samplecrd-bridge"} {
		if h := entries[name]; h == nil || h.Mode != 0o755 || h.Uid != 0 {
			t.Errorf("%s header %+v, want mode 0755 owned by root", name, h)
		}
	}
	if h := entries["home/nonroot/"]; h == nil || h.Uid != 65532 {
		t.Errorf("home directory header %+v, want uid 65532", h)
	}
	if !bytes.Contains(passwd, []byte("\nnonroot:x:65532:65532:")) {
		t.Errorf("/etc/passwd lacks the nonroot user:\n%s", passwd)
	}

	// The binary is static (no ELF interpreter) and runs.
	bin := filepath.Join(t.TempDir(), "network-apiserver")
	if err := os.WriteFile(bin, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary needs a dynamic loader")
		}
	}
	f.Close()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "network-apiserver v1.37.2 (commit "+commit) {
		t.Errorf("%s --version: %v\n%s", bin, err, out)
	}

	// The plugin is static too and answers a runtime's VERSION with the versions the lists use.
	pluginBin := filepath.Join(t.TempDir(), "samplecrd-bridge")
	if err := os.WriteFile(pluginBin, plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	if f, err := elf.Open(pluginBin); err != nil {
		t.Fatal(err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the plugin needs a dynamic loader")
			}
		}
		f.Close()
	}
	version := exec.Command(pluginBin)
	version.Env = []string{"CNI_COMMAND=VERSION"}
	version.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	if out, err := version.Output(); err != nil || !strings.Contains(string(out), `"1.1.0"`) {
		t.Errorf("the plugin's VERSION: %v\n%s", err, out)
	}

	// The docker archive holds the same image under the same name.
	tarImg, err := tarball.ImageFromPath(filepath.Join(dir1, "network-apiserver.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := img.ConfigName()
	c2, err := tarImg.ConfigName()
	if err != nil || c1 != c2 {
		t.Errorf("docker archive config %s (%v), OCI layout config %s", c2, err, c1)
	}
	var manifest []struct{ RepoTags []string }
	if err := json.Unmarshal(fileInTar(t, filepath.Join(dir1, "network-apiserver.tar"), "manifest.json"), &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || !strings.HasSuffix(manifest[0].RepoTags[0], "network-apiserver:v1.37.2") {
		t.Errorf("docker archive manifest.json %+v", manifest)
	}
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func fileInTar(t *testing.T, archive, name string) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s in %s: %v", name, archive, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
