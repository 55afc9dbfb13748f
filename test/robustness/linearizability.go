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

package robustness

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The requests on one name, checked for linearizability with porcupine against a model of one
// Network name: absent, or present with a uid. This checks the answers themselves (201, 200,
// 404, 409 AlreadyExists, and their uids) against each other in real time, independently of
// the etcd history the other checks compare them with.

// nameState is the model's state of one name: present or not, and with which uid ("" when a
// create whose answer was lost may have made it).
type nameState struct {
	Exists bool
	UID    string
}

type linInput struct {
	Kind string
}

type linOutput struct {
	Code    int
	Reason  string
	UID     string
	Unknown bool // no answer, or a 5xx: it may or may not have happened
}

func sameUID(s nameState, uid string) bool { return s.UID == "" || uid == "" || s.UID == uid }

var nameModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{nameState{}} },
	Step: func(st, in, out interface{}) []interface{} {
		s, i, o := st.(nameState), in.(linInput), out.(linOutput)
		creates := strings.HasPrefix(i.Kind, "create") || i.Kind == "apply"
		if o.Unknown {
			next := []interface{}{s}
			switch {
			case creates && !s.Exists:
				next = append(next, nameState{Exists: true})
			case i.Kind == "delete" && s.Exists:
				next = append(next, nameState{})
			}
			return next
		}
		ok := func(b bool, next nameState) []interface{} {
			if b {
				return []interface{}{next}
			}
			return nil
		}
		switch {
		case i.Kind == "claim" && (o.Code == http.StatusCreated || o.Code == http.StatusOK):
			// A claim answers the Network's uid: it was present, and stays.
			return ok(s.Exists && sameUID(s, o.UID), nameState{Exists: true, UID: o.UID})
		case o.Code == http.StatusCreated:
			return ok(creates && !s.Exists, nameState{Exists: true, UID: o.UID})
		case o.Code == http.StatusOK && i.Kind == "delete":
			return ok(s.Exists && sameUID(s, o.UID), nameState{})
		case o.Code == http.StatusOK:
			return ok(s.Exists && sameUID(s, o.UID), nameState{Exists: true, UID: o.UID})
		case o.Code == http.StatusNotFound:
			return ok(!s.Exists, s)
		case o.Code == http.StatusConflict && o.Reason == "AlreadyExists" && creates:
			return ok(s.Exists, s)
		}
		return []interface{}{s} // 422, other conflicts: no change, any state
	},
	Equal: func(a, b interface{}) bool { return a.(nameState) == b.(nameState) },
	DescribeOperation: func(in, out interface{}) string {
		o := out.(linOutput)
		if o.Unknown {
			return in.(linInput).Kind + " -> ?"
		}
		return fmt.Sprintf("%s -> %d %s %s", in.(linInput).Kind, o.Code, o.Reason, o.UID)
	},
	DescribeState: func(st interface{}) string { return fmt.Sprintf("%+v", st.(nameState)) },
}

// neverSent says the request did not reach the server (refused connection): it had no effect.
func neverSent(o op) bool {
	return o.Err != "" && (strings.Contains(o.Err, "connection refused") || strings.Contains(o.Err, "no such host"))
}

// checkLinearizable runs porcupine on each name's requests. A name the checker cannot decide
// within timeout is reported in the note, not as a violation.
func checkLinearizable(f *findings, ops []op, timeout time.Duration) (note string) {
	byName := map[string][]porcupine.Operation{}
	for _, o := range ops {
		if neverSent(o) || o.End == 0 {
			continue
		}
		out := linOutput{Code: o.Code, Reason: o.Reason, UID: o.UID}
		ret := o.End
		if o.Err != "" || o.Code >= 500 {
			out, ret = linOutput{Unknown: true}, math.MaxInt64
		}
		key := o.Namespace + "/" + o.Name
		byName[key] = append(byName[key], porcupine.Operation{ClientId: o.Client, Input: linInput{Kind: o.Kind},
			Call: o.Start, Output: out, Return: ret, Metadata: o.ID})
	}
	names := make([]string, 0, len(byName))
	for k := range byName {
		names = append(names, k)
	}
	sort.Strings(names)
	model := nameModel.ToModel()
	var undecided []string
	for _, k := range names {
		switch porcupine.CheckOperationsTimeout(model, byName[k], timeout) {
		case porcupine.Illegal:
			f.add(checkLinear, "the %d requests on %s are not linearizable (porcupine)", len(byName[k]), k)
		case porcupine.Unknown:
			undecided = append(undecided, k)
		}
	}
	if len(undecided) > 0 {
		return fmt.Sprintf("porcupine could not decide within %s for %v", timeout, undecided)
	}
	return fmt.Sprintf("porcupine: the requests on each of %d names are linearizable", len(names))
}
