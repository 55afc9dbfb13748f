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

package frontproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// issuer is a certificate with its key, able to sign others.
type issuer struct {
	cert *x509.Certificate
	key  crypto.Signer
}

var serial atomic.Int64

func newKey(t testing.TB, rsaKey bool) crypto.Signer {
	t.Helper()
	var key crypto.Signer
	var err error
	if rsaKey {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// sign makes a certificate for cn, signed by parent (self-signed when parent is nil).
func sign(t testing.TB, parent *issuer, cn string, ca bool, notBefore, notAfter time.Time, rsaKey bool) *issuer {
	t.Helper()
	key := newKey(t, rsaKey)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		IsCA:                  ca,
	}
	if ca {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	signerCert, signerKey := tmpl, key
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{cert: cert, key: key}
}

// caBundle is a CA content provider whose bundle a test can replace, handing out the same
// verify options (and so the same root pool) until then, as k8s.io/apiserver's providers do.
type caBundle struct {
	opts atomic.Pointer[x509.VerifyOptions]
}

func newCABundle(cas ...*x509.Certificate) *caBundle {
	b := &caBundle{}
	b.set(cas...)
	return b
}

func (b *caBundle) set(cas ...*x509.Certificate) {
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	b.opts.Store(&x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (b *caBundle) AddListener(dynamiccertificates.Listener)  {}
func (b *caBundle) Name() string                              { return "test-request-header" }
func (b *caBundle) CurrentCABundleContent() []byte            { return nil }
func (b *caBundle) VerifyOptions() (x509.VerifyOptions, bool) { return *b.opts.Load(), true }

type names struct{ v atomic.Pointer[[]string] }

func (n *names) set(v ...string) { n.v.Store(&v) }
func (n *names) Value() []string { return *n.v.Load() }

// fixture is a request-header configuration as the delegated authentication options build it.
type fixture struct {
	root, other *issuer
	bundle      *caBundle
	allowed     *names
	rh          *authenticatorfactory.RequestHeaderConfig
}

func newFixture(t testing.TB, rsaKeys bool) *fixture {
	now := time.Now()
	f := &fixture{
		root:    sign(t, nil, "front-proxy-ca", true, now.Add(-time.Hour), now.Add(24*time.Hour), rsaKeys),
		other:   sign(t, nil, "other-ca", true, now.Add(-time.Hour), now.Add(24*time.Hour), rsaKeys),
		allowed: &names{},
	}
	f.allowed.set("front-proxy-client")
	f.bundle = newCABundle(f.root.cert)
	f.rh = &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		CAContentProvider:   f.bundle,
		AllowedClientNames:  f.allowed,
	}
	return f
}

// upstream is the authenticator k8s.io/apiserver builds for the configuration alone.
func (f *fixture) upstream(t testing.TB) authenticator.Request {
	a, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{RequestHeaderConfig: f.rh}.New()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// request is a request over a connection whose client presented certs, with the front proxy's
// headers for alice when user is set.
func request(withUser bool, certs ...*x509.Certificate) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/apis/samplecrd.k8s.io/v1/networks", nil)
	if len(certs) > 0 {
		req.TLS = &tls.ConnectionState{PeerCertificates: certs}
	}
	if withUser {
		req.Header.Set("X-Remote-User", "alice")
		req.Header.Set("X-Remote-Uid", "uid-1")
		req.Header.Add("X-Remote-Group", "team-a")
		req.Header.Add("X-Remote-Group", "team-b")
		req.Header.Set("X-Remote-Extra-Scopes", "one")
	}
	return req
}

type outcome struct {
	user    user.Info
	ok      bool
	err     string
	headers http.Header
}

func run(a authenticator.Request, req *http.Request) outcome {
	resp, ok, err := a.AuthenticateRequest(req)
	o := outcome{ok: ok, headers: req.Header}
	if err != nil {
		o.err = err.Error()
	}
	if resp != nil {
		o.user = resp.User
	}
	return o
}

// TestSameAnswersAsUpstream sends the same sequence of requests to k8s.io/apiserver's delegated
// authenticator and to ours around it, and expects the same answer to each — user, groups,
// extra, error, the request's headers afterwards — while ours verifies a chain once for as long
// as the bundle and the allowed names stay.
func TestSameAnswersAsUpstream(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	proxy := sign(t, f.root, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Hour), false)
	intermediate := sign(t, f.root, "front-proxy-intermediate", true, now.Add(-time.Hour), now.Add(time.Hour), false)
	viaIntermediate := sign(t, intermediate, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Hour), false)
	otherName := sign(t, f.root, "someone-else", false, now.Add(-time.Hour), now.Add(time.Hour), false)
	otherCA := sign(t, f.other, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Hour), false)
	expired := sign(t, f.root, "front-proxy-client", false, now.Add(-2*time.Hour), now.Add(-time.Hour), false)
	notYet := sign(t, f.root, "front-proxy-client", false, now.Add(time.Hour), now.Add(2*time.Hour), false)

	up := f.upstream(t)
	ours := newAuthenticator(f.upstream(t), f.rh, time.Now)

	steps := []struct {
		name          string
		change        func()
		req           func() *http.Request
		wantOK        bool
		verifications int64 // ours, in all, after the step
	}{
		{name: "front proxy", req: func() *http.Request { return request(true, proxy.cert) }, wantOK: true, verifications: 1},
		{name: "front proxy again, remembered", req: func() *http.Request { return request(true, proxy.cert) }, wantOK: true, verifications: 1},
		{name: "front proxy without a user header", req: func() *http.Request { return request(false, proxy.cert) }, verifications: 1},
		{name: "no client certificate", req: func() *http.Request { return request(true) }, verifications: 1},
		{name: "a name not allowed", req: func() *http.Request { return request(true, otherName.cert) }, verifications: 1},
		{name: "another CA", req: func() *http.Request { return request(true, otherCA.cert) }, verifications: 2},
		{name: "another CA again", req: func() *http.Request { return request(true, otherCA.cert) }, verifications: 3},
		{name: "expired", req: func() *http.Request { return request(true, expired.cert) }, verifications: 4},
		{name: "not yet valid", req: func() *http.Request { return request(true, notYet.cert) }, verifications: 5},
		{name: "through an intermediate", req: func() *http.Request { return request(true, viaIntermediate.cert, intermediate.cert) }, wantOK: true, verifications: 6},
		{name: "through an intermediate again", req: func() *http.Request { return request(true, viaIntermediate.cert, intermediate.cert) }, wantOK: true, verifications: 6},
		{name: "intermediate left out", req: func() *http.Request { return request(true, viaIntermediate.cert) }, verifications: 7},
		{name: "the name no longer allowed", change: func() { f.allowed.set("another-proxy") },
			req: func() *http.Request { return request(true, proxy.cert) }, verifications: 7},
		{name: "any name allowed", change: func() { f.allowed.set() },
			req: func() *http.Request { return request(true, otherName.cert) }, wantOK: true, verifications: 8},
		{name: "the bundle rotated to another CA", change: func() { f.allowed.set("front-proxy-client"); f.bundle.set(f.other.cert) },
			req: func() *http.Request { return request(true, proxy.cert) }, verifications: 9},
		{name: "the new CA's proxy", req: func() *http.Request { return request(true, otherCA.cert) }, wantOK: true, verifications: 10},
		{name: "both CAs", change: func() { f.bundle.set(f.root.cert, f.other.cert) },
			req: func() *http.Request { return request(true, proxy.cert) }, wantOK: true, verifications: 11},
		{name: "both CAs, remembered", req: func() *http.Request { return request(true, proxy.cert) }, wantOK: true, verifications: 11},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		want, got := run(up, s.req()), run(ours, s.req())
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: ours answered %+v, k8s.io/apiserver %+v", s.name, got, want)
		}
		if got.ok != s.wantOK {
			t.Errorf("%s: authenticated %v, want %v (%+v)", s.name, got.ok, s.wantOK, got)
		}
		if s.wantOK && (got.user.GetName() != "alice" || !slices.Contains(got.user.GetGroups(), user.AllAuthenticated) || len(got.headers) != 0) {
			t.Errorf("%s: user %+v, headers left %v: want alice in %s with the headers cleared", s.name, got.user, got.headers, user.AllAuthenticated)
		}
		if n := ours.verifications.Load(); n != s.verifications {
			t.Errorf("%s: %d chain verifications in all, want %d", s.name, n, s.verifications)
		}
	}
}

// TestRememberedOnlyWhileValid moves the clock: a remembered chain is verified again after
// maxAge, and not trusted once a certificate of it has expired.
func TestRememberedOnlyWhileValid(t *testing.T) {
	f := newFixture(t, false)
	t0 := time.Now().Truncate(time.Second)
	proxy := sign(t, f.root, "front-proxy-client", false, t0.Add(-time.Hour), t0.Add(30*time.Minute), false)
	clock := t0
	var delegated atomic.Int64
	next := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		delegated.Add(1)
		return nil, false, fmt.Errorf("refused by the delegated authenticator")
	})
	a := newAuthenticator(next, f.rh, func() time.Time { return clock })

	steps := []struct {
		at            time.Duration
		wantOK        bool
		verifications int64
	}{
		{at: 0, wantOK: true, verifications: 1},
		{at: 9 * time.Minute, wantOK: true, verifications: 1},
		{at: maxAge + time.Second, wantOK: true, verifications: 2}, // verified again after maxAge
		{at: 29 * time.Minute, wantOK: true, verifications: 3},     // the second window ran out at maxAge after it
		{at: 30 * time.Minute, wantOK: true, verifications: 3},     // NotAfter itself is still valid
		{at: 30*time.Minute + time.Second, verifications: 4},       // expired: verified again, refused
		{at: 31 * time.Minute, verifications: 5},                   // and not remembered
	}
	for _, s := range steps {
		clock = t0.Add(s.at)
		before := delegated.Load()
		got := run(a, request(true, proxy.cert))
		if got.ok != s.wantOK {
			t.Errorf("at +%s: authenticated %v, want %v (%+v)", s.at, got.ok, s.wantOK, got)
		}
		if asked := delegated.Load() > before; asked == s.wantOK {
			t.Errorf("at +%s: delegated authenticator asked %v, want %v", s.at, asked, !s.wantOK)
		}
		if n := a.verifications.Load(); n != s.verifications {
			t.Errorf("at +%s: %d verifications in all, want %d", s.at, n, s.verifications)
		}
	}
}

// TestBundleFromFileRotates uses k8s.io/apiserver's provider of --requestheader-client-ca-file:
// a chain is remembered while the file's bundle stays, and verified against the new bundle
// once the file changes.
func TestBundleFromFileRotates(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	proxy := sign(t, f.root, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Hour), false)
	file := filepath.Join(t.TempDir(), "requestheader-ca.crt")
	write := func(ca *x509.Certificate) {
		if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(f.root.cert)
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("request-header", file)
	if err != nil {
		t.Fatal(err)
	}
	f.rh.CAContentProvider = provider
	a := newAuthenticator(f.upstream(t), f.rh, time.Now)
	for i := 0; i < 3; i++ {
		if got := run(a, request(true, proxy.cert)); !got.ok {
			t.Fatalf("request %d: %+v", i, got)
		}
	}
	if n := a.verifications.Load(); n != 1 {
		t.Fatalf("%d verifications for three requests with one bundle, want 1", n)
	}
	write(f.other.cert)
	if err := provider.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := run(a, request(true, proxy.cert)); got.ok || got.err == "" {
		t.Fatalf("after the bundle changed to another CA: %+v, want the delegated authenticator's refusal", got)
	}
	if n := a.verifications.Load(); n != 2 {
		t.Fatalf("%d verifications after the bundle changed, want 2", n)
	}
}

// TestBoundedMemory presents more chains than it keeps: the map stays at maxChains and the
// latest chain is remembered.
func TestBoundedMemory(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	a := newAuthenticator(f.upstream(t), f.rh, time.Now)
	var last *issuer
	for i := 0; i < maxChains+8; i++ {
		last = sign(t, f.root, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Duration(i+1)*time.Hour), false)
		if got := run(a, request(true, last.cert)); !got.ok {
			t.Fatalf("chain %d: %+v", i, got)
		}
	}
	if n := len(a.verified); n != maxChains {
		t.Fatalf("%d chains remembered, want %d", n, maxChains)
	}
	n := a.verifications.Load()
	run(a, request(true, last.cert))
	if a.verifications.Load() != n {
		t.Fatalf("the latest chain was verified again")
	}
}

// TestNoRequestHeaderConfigIsUnchanged: without a trusted front proxy the delegated
// authenticator is used as it is.
func TestNoRequestHeaderConfigIsUnchanged(t *testing.T) {
	next := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { return nil, false, nil })
	if got := New(next, nil); reflect.ValueOf(got).Pointer() != reflect.ValueOf(next).Pointer() {
		t.Fatalf("New without a request-header configuration returned %T, want the delegated authenticator", got)
	}
}

// BenchmarkFrontProxy is one proxied request's authentication with RSA-2048 certificates, as
// kube-apiserver's aggregator presents them: k8s.io/apiserver's delegated authenticator against
// ours around it.
func BenchmarkFrontProxy(b *testing.B) {
	f := newFixture(b, true)
	now := time.Now()
	proxy := sign(b, f.root, "front-proxy-client", false, now.Add(-time.Hour), now.Add(time.Hour), true)
	for _, c := range []struct {
		name string
		a    authenticator.Request
	}{{"k8s.io-apiserver", f.upstream(b)}, {"remembered", New(f.upstream(b), f.rh)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok, err := c.a.AuthenticateRequest(request(true, proxy.cert)); !ok || err != nil {
					b.Fatalf("not authenticated: %v", err)
				}
			}
		})
	}
}
