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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// srcLabel returns the value of a template label, failing when the template is nil.
func srcLabel(t *testing.T, tmpl *Template, key string) string {
	t.Helper()
	if tmpl == nil {
		t.Fatalf("no template, want one with label %s", key)
	}
	meta, _ := tmplDecode(t, tmpl)["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	v, _ := labels[key].(string)
	return v
}

// srcWrite writes content to path and gives it modification time at, so a change is seen even
// on file systems with a coarse clock.
func srcWrite(t *testing.T, path, content string, at time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func TestFileSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "template.yaml")
	s := &FileSource{Path: path}

	tmpl, err := s.Load()
	if tmpl != nil || err != nil {
		t.Fatalf("missing file: got %v, %v; want no template and no error", tmpl, err)
	}

	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	srcWrite(t, path, "metadata:\n  labels:\n    version: one\n", base)
	first, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := srcLabel(t, first, "version"); got != "one" {
		t.Fatalf("label version=%q, want one", got)
	}
	if !strings.HasPrefix(first.Identity, "file:"+path+"@sha256:") {
		t.Fatalf("identity %q, want file:%s@sha256:…", first.Identity, path)
	}
	again, err := s.Load()
	if err != nil || again != first {
		t.Fatalf("unchanged file: got %p, %v; want the cached template %p", again, err, first)
	}

	// New content of another size and a later modification time.
	srcWrite(t, path, "metadata:\n  labels:\n    version: second\n", base.Add(time.Minute))
	second, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := srcLabel(t, second, "version"); got != "second" {
		t.Fatalf("after the change: label version=%q, want second", got)
	}
	if second.Identity == first.Identity {
		t.Fatalf("identity %q did not change with the content", second.Identity)
	}

	// Same size, only the modification time tells: still re-read.
	srcWrite(t, path, "metadata:\n  labels:\n    version: thirds\n", base.Add(2*time.Minute))
	third, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := srcLabel(t, third, "version"); got != "thirds" {
		t.Fatalf("after a same-size change: label version=%q, want thirds", got)
	}

	// Broken, then fixed again.
	srcWrite(t, path, "spec: [unclosed\n", base.Add(3*time.Minute))
	if tmpl, err := s.Load(); err == nil {
		t.Fatalf("broken file: got %s, want an error", tmpl.JSON)
	}
	if _, err := s.Load(); err == nil {
		t.Fatal("broken file, loaded twice: the error was not kept")
	}
	srcWrite(t, path, "metadata:\n  labels:\n    version: fixed\n", base.Add(4*time.Minute))
	fixed, err := s.Load()
	if err != nil {
		t.Fatalf("fixed file: %v", err)
	}
	if got := srcLabel(t, fixed, "version"); got != "fixed" {
		t.Fatalf("fixed file: label version=%q, want fixed", got)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := s.Load(); tmpl != nil || err != nil {
		t.Fatalf("removed file: got %v, %v; want no template and no error", tmpl, err)
	}
}

func srcConfigMap(namespace, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConfigMapName, ResourceVersion: rv},
		Data:       data,
	}
}

func TestConfigMapSource(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	synced := true
	s := &ConfigMapSource{
		Namespace: "netops",
		Lister:    corev1listers.NewConfigMapLister(indexer),
		HasSynced: func() bool { return synced },
	}

	if tmpl, err := s.Load(); tmpl != nil || err != nil {
		t.Fatalf("no ConfigMap: got %v, %v; want no template and no error", tmpl, err)
	}

	// The same name in another namespace is not ours.
	if err := indexer.Add(srcConfigMap("elsewhere", "3", map[string]string{ConfigMapKey: "metadata:\n  labels:\n    from: elsewhere\n"})); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := s.Load(); tmpl != nil || err != nil {
		t.Fatalf("ConfigMap in another namespace: got %v, %v; want no template", tmpl, err)
	}

	if err := indexer.Add(srcConfigMap("netops", "5", map[string]string{ConfigMapKey: "metadata:\n  labels:\n    version: one\n"})); err != nil {
		t.Fatal(err)
	}
	first, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := srcLabel(t, first, "version"); got != "one" {
		t.Fatalf("label version=%q, want one", got)
	}
	if want := "configmap:netops/" + ConfigMapName + "@5"; first.Identity != want {
		t.Fatalf("identity %q, want %q", first.Identity, want)
	}

	if err := indexer.Update(srcConfigMap("netops", "6", map[string]string{ConfigMapKey: "metadata:\n  labels:\n    version: two\n"})); err != nil {
		t.Fatal(err)
	}
	second, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := srcLabel(t, second, "version"); got != "two" {
		t.Fatalf("after the update: label version=%q, want two", got)
	}
	if !strings.HasSuffix(second.Identity, "@6") {
		t.Fatalf("identity %q does not carry resourceVersion 6", second.Identity)
	}

	if err := indexer.Update(srcConfigMap("netops", "7", map[string]string{"other": "x"})); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := s.Load(); err == nil || !strings.Contains(err.Error(), `no key "`+ConfigMapKey+`"`) {
		t.Fatalf("ConfigMap without the key: got %v, %v; want an error naming the key", tmpl, err)
	}

	if err := indexer.Update(srcConfigMap("netops", "8", map[string]string{ConfigMapKey: "kind: Pod\n"})); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := s.Load(); err == nil || !strings.Contains(err.Error(), "@8") {
		t.Fatalf("ConfigMap with a broken template: got %v, %v; want an error naming version 8", tmpl, err)
	}

	if err := indexer.Delete(srcConfigMap("netops", "8", nil)); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := s.Load(); tmpl != nil || err != nil {
		t.Fatalf("deleted ConfigMap: got %v, %v; want no template and no error", tmpl, err)
	}

	synced = false
	if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("informer not synced: got %v, want an error saying so", err)
	}
}
