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

// Command image builds network-apiserver's container image without a container daemon: one
// layer holding the static binary, the samplecrd-bridge CNI plugin (-cni-plugin; the agent's
// init container installs it on the node), /etc/passwd and /etc/group with a non-root user, and empty
// /tmp and home directories; no base image, no shell. Every timestamp is -created, so the same
// binary gives the same image digest. It writes an OCI image layout (-oci) and a docker-archive
// tarball (-tar, for `docker load`, `kind load image-archive`, `ctr images import`).
//
//	go run . -binary network-apiserver -cni-plugin samplecrd-bridge -oci _output/image/oci \
//	  -tar _output/image/network-apiserver.tar -tag network-apiserver:v1.37.2 -created 1700000000
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: the uid and gid distroless calls nonroot.
const (
	UID        = 65532
	BinaryPath = "/usr/local/bin/network-apiserver"
	// CNIPluginPath is where the image holds the samplecrd-bridge plugin, for
	// `network-apiserver install-cni-plugin` to copy onto the node.
	CNIPluginPath = "/usr/local/lib/network-apiserver/samplecrd-bridge"
)

func main() {
	binary := flag.String("binary", "", "the static network-apiserver binary (CGO_ENABLED=0)")
	plugin := flag.String("cni-plugin", "", "the static samplecrd-bridge CNI plugin (CGO_ENABLED=0)")
	ociDir := flag.String("oci", "", "write an OCI image layout to this directory (replaced)")
	tarFile := flag.String("tar", "", "write a docker-archive tarball to this file")
	tag := flag.String("tag", "network-apiserver:latest", "the image reference recorded in the layout and the tarball")
	created := flag.Int64("created", 0, "the image's creation time and every file's mtime, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	arch := flag.String("arch", "amd64", "the binary's architecture")
	revision := flag.String("revision", "", "the source revision, recorded as a label")
	version := flag.String("version", "", "the version, recorded as a label")
	flag.Parse()
	if *binary == "" || *plugin == "" || (*ociDir == "" && *tarFile == "") {
		fmt.Fprintln(os.Stderr, "image: -binary, -cni-plugin and at least one of -oci and -tar are required")
		os.Exit(2)
	}
	img, err := Build(*binary, *plugin, Options{Created: time.Unix(*created, 0).UTC(), Arch: *arch, Revision: *revision, Version: *version})
	if err == nil {
		err = Write(img, *tag, *ociDir, *tarFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	digest, _ := img.Digest()
	fmt.Println(digest)
}

// Options are what the image records besides the binary.
type Options struct {
	Created  time.Time
	Arch     string
	Revision string
	Version  string
}

// Build makes the image from the binary and the CNI plugin.
func Build(binary, plugin string, o Options) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	cni, err := os.ReadFile(plugin)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(bin, cni, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: o.Created},
		CreatedBy: "hack/image: " + BinaryPath + ", " + CNIPluginPath + ", /etc/passwd, /etc/group, /tmp",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: o.Created}
	cfg.OS, cfg.Architecture = "linux", o.Arch
	cfg.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		User:       fmt.Sprintf("%d:%d", UID, UID),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin", "HOME=/home/nonroot"},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "network-apiserver",
			"org.opencontainers.image.source":   "https://github.com/samplecrd/network-apiserver",
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.version":  o.Version,
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the layer's tar: directories, the user database, the binary and the plugin, owned
// by root except the user's home, all with mtime created.
func rootfs(bin, cni []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid,
			ModTime: created, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		// Go's resolver reads this; without it, it would try DNS before /etc/hosts.
		func() error { return file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, UID) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin) },
		func() error { return dir("usr/local/lib", 0o755, 0) },
		func() error { return dir("usr/local/lib/network-apiserver", 0o755, 0) },
		func() error { return file(strings.TrimPrefix(CNIPluginPath, "/"), 0o755, cni) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes the image as an OCI layout in ociDir and a docker archive at tarFile (either may
// be empty), both naming it tag.
func Write(img v1.Image, tag, ociDir, tarFile string) error {
	ref, err := name.NewTag(tag, name.WithDefaultRegistry(""))
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	if ociDir != "" {
		if err := os.RemoveAll(ociDir); err != nil {
			return err
		}
		p, err := layout.Write(ociDir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag,
		})); err != nil {
			return err
		}
	}
	if tarFile != "" {
		if err := os.MkdirAll(filepath.Dir(tarFile), 0o755); err != nil {
			return err
		}
		if err := tarball.WriteToFile(tarFile, ref, img); err != nil {
			return err
		}
	}
	return nil
}
