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

// Package frontproxy authenticates the requests kube-apiserver's aggregator proxies to us
// without verifying the proxy's client certificate chain on every request.
//
// k8s.io/apiserver's request-header authenticator verifies the front proxy's chain against the
// request-header CA bundle for each request (an RSA signature check: about 7% of this server's
// CPU for a create proxied by the aggregator), although the aggregator sends its requests over
// a few long-lived connections with one certificate. Authenticator remembers a chain it has
// verified, for the CA bundle it verified it against, while every certificate of the chain is
// valid; everything else about a request is decided as k8s.io/apiserver decides it.
package frontproxy

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
)

const (
	// maxChains bounds the remembered chains (a front proxy presents one, or two while its
	// certificate rotates); past it the oldest go first.
	maxChains = 64
	// maxAge is how long a verification is trusted even when the chain stays valid longer.
	maxAge = 10 * time.Minute
)

// Authenticator is the delegated authenticator k8s.io/apiserver builds, with the front proxy's
// chain verification remembered. A request whose client certificate chain was verified against
// the current request-header CA bundle, within every certificate's validity and at most maxAge
// ago, and whose leaf's common name is allowed now, is authenticated from its request headers
// exactly as k8s.io/apiserver's request-header authenticator would (with system:authenticated
// added, as the delegated authenticator adds it). Every other request — no client certificate,
// a chain that does not verify, a name not allowed, no user header — goes to the delegated
// authenticator unchanged, which decides it as it always has.
type Authenticator struct {
	next    authenticator.Request
	headers authenticator.Request
	options func() (x509.VerifyOptions, bool)
	allowed headerrequest.StringSliceProvider
	now     func() time.Time

	mu       sync.Mutex
	verified map[chainKey]window

	// verifications counts the chain verifications made (not answered from memory).
	verifications atomic.Int64
}

// chainKey names a chain verified against one CA bundle. The bundle is its verify options'
// root pool: k8s.io/apiserver's CA providers build a new pool whenever the bundle changes and
// hand out the same one until then (and no intermediates pool; one a provider handed out would
// be part of the key too). The key holds the pools, so a pool in the map is never freed and its
// address never names another.
type chainKey struct {
	roots, intermediates *x509.CertPool
	chain                [sha256.Size]byte
}

// window is when a verification may be trusted: within the validity of every certificate of
// the chain it found, and no later than maxAge after it.
type window struct {
	notBefore, notAfter time.Time
}

// New wraps next, the authenticator k8s.io/apiserver built from the delegated authentication
// options, for the request-header configuration rh it was built with. With no request-header
// configuration (no front proxy is trusted) next is returned as it is.
func New(next authenticator.Request, rh *authenticatorfactory.RequestHeaderConfig) authenticator.Request {
	if next == nil || rh == nil || rh.CAContentProvider == nil {
		return next
	}
	return newAuthenticator(next, rh, time.Now)
}

func newAuthenticator(next authenticator.Request, rh *authenticatorfactory.RequestHeaderConfig, now func() time.Time) *Authenticator {
	return &Authenticator{
		next:     next,
		headers:  group.NewAuthenticatedGroupAdder(headerrequest.NewDynamic(rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes)),
		options:  rh.CAContentProvider.VerifyOptions,
		allowed:  rh.AllowedClientNames,
		now:      now,
		verified: map[chainKey]window{},
	}
}

// AuthenticateRequest authenticates a request from a verified front proxy from its headers, and
// hands every other request to the delegated authenticator.
func (a *Authenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if a.fromFrontProxy(req) {
		// The request-header authenticator comes first in k8s.io/apiserver's union: its success
		// is the answer. Without a user header it has none, and the union asks the others.
		if resp, ok, err := a.headers.AuthenticateRequest(req); ok && err == nil {
			return resp, true, nil
		}
	}
	return a.next.AuthenticateRequest(req)
}

// fromFrontProxy says whether the request's client certificate chain verifies against the
// request-header CA bundle now and its leaf's common name is an allowed front proxy's, as
// k8s.io/apiserver's x509 Verifier decides both: the same verify options, the certificates after
// the leaf as intermediates when the options name none, the common name checked against the
// allowed names of the moment (none allowed means any).
func (a *Authenticator) fromFrontProxy(req *http.Request) bool {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return false
	}
	certs := req.TLS.PeerCertificates
	if !a.allowedName(certs[0].Subject.CommonName) {
		return false
	}
	opts, ok := a.options()
	if !ok || opts.Roots == nil {
		return false
	}
	now := a.now()
	key := chainKey{roots: opts.Roots, intermediates: opts.Intermediates, chain: digest(certs)}
	a.mu.Lock()
	w, seen := a.verified[key]
	a.mu.Unlock()
	if seen && !now.Before(w.notBefore) && now.Before(w.notAfter) {
		return true
	}

	if opts.Intermediates == nil && len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	opts.CurrentTime = now
	a.verifications.Add(1)
	chains, err := certs[0].Verify(opts)
	if err != nil || len(chains) == 0 {
		return false
	}
	a.remember(key, validity(chains[0], now))
	return true
}

func (a *Authenticator) allowedName(cn string) bool {
	if a.allowed == nil {
		return true
	}
	names := a.allowed.Value()
	return len(names) == 0 || slices.Contains(names, cn)
}

// validity is the window in which chain, verified at now, may be trusted.
func validity(chain []*x509.Certificate, now time.Time) window {
	w := window{notAfter: now.Add(maxAge)}
	for _, c := range chain {
		if c.NotBefore.After(w.notBefore) {
			w.notBefore = c.NotBefore
		}
		// x509 accepts a certificate up to and including NotAfter.
		if end := c.NotAfter.Add(time.Nanosecond); end.Before(w.notAfter) {
			w.notAfter = end
		}
	}
	return w
}

func (a *Authenticator) remember(key chainKey, w window) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.verified[key]; !ok && len(a.verified) >= maxChains {
		// Drop the one that runs out first.
		var first chainKey
		var end time.Time
		for k, v := range a.verified {
			if end.IsZero() || v.notAfter.Before(end) {
				first, end = k, v.notAfter
			}
		}
		delete(a.verified, first)
	}
	a.verified[key] = w
}

// digest names a chain: every certificate's DER, each after its length.
func digest(certs []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, c := range certs {
		binary.BigEndian.PutUint64(n[:], uint64(len(c.Raw)))
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
