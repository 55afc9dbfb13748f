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
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
)

const (
	acceptJSON     = "application/json"
	acceptProtobuf = "application/vnd.kubernetes.protobuf"
)

// listResult is a LIST measured several times: the median, and the size of one response.
type listResult struct {
	Accept string `json:"accept"`
	// Status is 406 when the server cannot serve the encoding (the CRD and protobuf).
	Status   int       `json:"status"`
	Items    int       `json:"items"`
	Bytes    int       `json:"bytes"`
	Pages    int       `json:"pages,omitempty"`
	MedianMs float64   `json:"medianMs"`
	RunsMs   []float64 `json:"runsMs"`
	// CPUMs is each process's CPU milliseconds per LIST (per whole collection when paged).
	CPUMs map[string]float64 `json:"cpuMsPerList,omitempty"`
}

// notAcceptable says the server refused the encoding, which the bench records as N/A.
func (l *listResult) notAcceptable() bool { return l.Status == http.StatusNotAcceptable }

// listAll fetches the whole collection in one response, runs times, timing request to last byte.
func listAll(ctx context.Context, ep *endpoint, path, accept string, runs int) (*listResult, error) {
	res := &listResult{Accept: accept}
	var times []time.Duration
	for range runs {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		t := time.Now()
		status, body, err := ep.get(rctx, path, accept)
		d := time.Since(t)
		cancel()
		if err != nil {
			return nil, err
		}
		res.Status = status
		if status == http.StatusNotAcceptable && accept == acceptProtobuf {
			return res, nil
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("LIST %s (%s): %d %s", path, accept, status, truncate(body))
		}
		if res.Bytes == 0 {
			if res.Items, err = countItems(body, accept); err != nil {
				return nil, fmt.Errorf("LIST %s (%s): %w", path, accept, err)
			}
		}
		res.Bytes = len(body)
		times = append(times, d)
		res.RunsMs = append(res.RunsMs, ms(d))
	}
	res.MedianMs = ms(median(times))
	return res, nil
}

// listPaged fetches the collection in pages of limit, runs times; each run's time is the whole
// walk, reading only each page's continue token on the client.
func listPaged(ctx context.Context, ep *endpoint, path, accept string, limit, runs int) (*listResult, error) {
	res := &listResult{Accept: accept}
	var times []time.Duration
	for range runs {
		var total time.Duration
		items, size, pages, cont := 0, 0, 0, ""
		for {
			q := url.Values{"limit": {fmt.Sprint(limit)}}
			if cont != "" {
				q.Set("continue", cont)
			}
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			t := time.Now()
			status, body, err := ep.get(rctx, path+"?"+q.Encode(), accept)
			if err == nil && status == http.StatusOK {
				cont, err = continueToken(body, accept)
			}
			total += time.Since(t)
			cancel()
			if err != nil {
				return nil, err
			}
			res.Status = status
			if status == http.StatusNotAcceptable && accept == acceptProtobuf {
				return res, nil
			}
			if status != http.StatusOK {
				return nil, fmt.Errorf("LIST %s (%s, page %d): %d %s", path, accept, pages+1, status, truncate(body))
			}
			if res.Items == 0 {
				n, err := countItems(body, accept)
				if err != nil {
					return nil, err
				}
				items += n
			}
			size += len(body)
			pages++
			if cont == "" {
				break
			}
		}
		if res.Items == 0 {
			res.Items = items
		}
		res.Bytes, res.Pages = size, pages
		times = append(times, total)
		res.RunsMs = append(res.RunsMs, ms(total))
	}
	res.MedianMs = ms(median(times))
	return res, nil
}

// countItems decodes a list fully, outside the timed part, to check what came back.
func countItems(body []byte, accept string) (int, error) {
	if accept == acceptProtobuf {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return 0, err
		}
		l, ok := obj.(*v1.NetworkList)
		if !ok {
			return 0, fmt.Errorf("decoded %T, not a NetworkList", obj)
		}
		return len(l.Items), nil
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	err := json.Unmarshal(body, &l)
	return len(l.Items), err
}

// continueToken reads metadata.continue without decoding the items: in JSON the list's metadata
// precedes its items; in protobuf the list's first field is its ListMeta.
func continueToken(body []byte, accept string) (string, error) {
	if accept == acceptProtobuf {
		var u runtime.Unknown
		if !bytes.HasPrefix(body, []byte("k8s\x00")) {
			return "", fmt.Errorf("not a protobuf response: %q", truncate(body))
		}
		if err := u.Unmarshal(body[4:]); err != nil {
			return "", err
		}
		raw := u.Raw
		if len(raw) == 0 || raw[0] != 0x0a { // field 1, length-delimited
			return "", nil
		}
		n, w := binary.Uvarint(raw[1:])
		if w <= 0 || uint64(len(raw)-1-w) < n {
			return "", fmt.Errorf("malformed list metadata")
		}
		var lm metav1.ListMeta
		if err := lm.Unmarshal(raw[1+w : 1+w+int(n)]); err != nil {
			return "", err
		}
		return lm.Continue, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // {
		return "", err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key == "metadata" {
			var lm metav1.ListMeta
			err := dec.Decode(&lm)
			return lm.Continue, err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", err
		}
	}
	return "", nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
