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

package e2e

import (
	"crypto/tls"
	"regexp"
	"testing"

	"k8s.io/client-go/rest"
)

// regexpLine reports whether some line of out matches pattern.
func regexpLine(out, pattern string) bool {
	return regexp.MustCompile(`(?m)^` + pattern + `\s*$`).MatchString(out)
}

// mustTLS returns cfg's TLS settings without its credentials.
func mustTLS(t *testing.T, cfg *rest.Config) *tls.Config {
	t.Helper()
	anon := rest.AnonymousClientConfig(cfg)
	tc, err := rest.TLSConfigFor(anon)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
