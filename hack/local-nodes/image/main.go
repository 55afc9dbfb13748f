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

// Command image writes the small images the local cluster's real nodes run
// (hack/local-up-nodes.sh), as docker-archive tarballs for `ctr images import`: no container
// daemon, no registry, no base image. Each image is one layer holding the given static binaries
// and an empty /tmp; its entrypoint is the first binary.
//
//	go run ./image -tag local/pause:1 -out _output/images/pause.tar -file /pause=_output/images/pause
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// files is a repeated -file DEST=SOURCE flag.
type files [][2]string

func (f *files) String() string { return fmt.Sprint(*f) }
func (f *files) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(dst, "/") || src == "" {
		return fmt.Errorf("want /DEST=SOURCE, got %q", v)
	}
	*f = append(*f, [2]string{dst, src})
	return nil
}

func main() {
	var fs files
	flag.Var(&fs, "file", "a static binary to put in the image, /DEST=SOURCE (repeatable; the first is the entrypoint)")
	tag := flag.String("tag", "", "the image's name, e.g. local/pause:1 (containerd stores it as docker.io/local/pause:1)")
	out := flag.String("out", "", "the docker-archive tarball to write")
	flag.Parse()
	if len(fs) == 0 || *tag == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "image: -file, -tag and -out are required")
		os.Exit(2)
	}
	if err := write(fs, *tag, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// write builds the image and writes it to out; args follow the entrypoint.
func write(fs files, tag, out string, args []string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	layerTar, err := layer(fs)
	if err != nil {
		return err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{
		Entrypoint: append([]string{fs[0][0]}, args...),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/"},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(out, ref, img)
}

// layer is a tar of the binaries and /tmp, every entry owned by root and dated 1970.
func layer(fs files) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	for _, f := range fs {
		b, err := os.ReadFile(f[1])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f[0], "/"), Mode: 0o755,
			Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
