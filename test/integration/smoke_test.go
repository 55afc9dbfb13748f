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

package integration

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

func TestCreateDefaultsGateway(t *testing.T) {
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	created, err := client.SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec:       v1.NetworkSpec{CIDR: "10.20.0.0/16"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Gateway != "10.20.0.1" || created.Generation != 1 {
		t.Fatalf("got gateway %q generation %d, want 10.20.0.1 and 1", created.Spec.Gateway, created.Generation)
	}
}

func TestEmbeddedEtcdEndpointIsExposed(t *testing.T) {
	s := framework.StartForTest(t)
	if !strings.HasPrefix(s.EtcdEndpoint, "https://127.0.0.1:") {
		t.Fatalf("embedded etcd endpoint %q, want a loopback https URL", s.EtcdEndpoint)
	}
}
