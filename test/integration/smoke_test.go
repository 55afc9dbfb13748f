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
