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
