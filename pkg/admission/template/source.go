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

package template

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// Source yields the current template: nil and no error when none is configured.
type Source interface {
	Load() (*Template, error)
}

// SyncingSource is a Source backed by a cache that must sync before Load can be trusted.
type SyncingSource interface {
	Source
	// Synced reports whether the cache has synced.
	Synced() bool
}

// FileSource reads the template from a file, again whenever the file changes.
type FileSource struct {
	Path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	cached  *Template
	err     error
}

// Load returns the parsed file, re-reading it when its modification time or size changed. A
// missing file means no template.
func (s *FileSource) Load() (*Template, error) {
	info, err := os.Stat(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil || s.err != nil {
		if info.ModTime().Equal(s.modTime) && info.Size() == s.size {
			return s.cached, s.err
		}
	}
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	s.modTime, s.size = info.ModTime(), info.Size()
	s.cached, s.err = Parse(fmt.Sprintf("file:%s@sha256:%s", s.Path, hex.EncodeToString(sum[:6])), data)
	return s.cached, s.err
}

// ConfigMapName and ConfigMapKey locate the template in the server's own namespace.
const (
	ConfigMapName = "network-template"
	ConfigMapKey  = "template"
)

// ConfigMapSource reads the template from a ConfigMap through an informer's lister.
type ConfigMapSource struct {
	Namespace string
	Lister    corev1listers.ConfigMapLister
	// HasSynced reports whether the informer behind Lister has synced.
	HasSynced func() bool

	mu     sync.Mutex
	rv     string
	cached *Template
	err    error
}

var _ SyncingSource = &ConfigMapSource{}

// Synced reports whether the informer behind Lister has synced.
func (s *ConfigMapSource) Synced() bool { return s.HasSynced == nil || s.HasSynced() }

// Load returns the parsed ConfigMap, parsing again only when its resourceVersion changed. A
// missing ConfigMap means no template.
func (s *ConfigMapSource) Load() (*Template, error) {
	if !s.Synced() {
		return nil, fmt.Errorf("the ConfigMap informer for %s/%s has not synced yet", s.Namespace, ConfigMapName)
	}
	cm, err := s.Lister.ConfigMaps(s.Namespace).Get(ConfigMapName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm.ResourceVersion == s.rv {
		return s.cached, s.err
	}
	identity := fmt.Sprintf("configmap:%s/%s@%s", cm.Namespace, cm.Name, cm.ResourceVersion)
	data, ok := cm.Data[ConfigMapKey]
	if ok {
		s.cached, s.err = Parse(identity, []byte(data))
	} else {
		s.cached, s.err = nil, fmt.Errorf("template %s has no key %q", identity, ConfigMapKey)
	}
	s.rv = cm.ResourceVersion
	return s.cached, s.err
}
