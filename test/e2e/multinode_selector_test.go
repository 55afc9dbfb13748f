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
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// TestMultiNodeSelector: spec.nodeSelector on three standalone nodes labelled by --node-labels.
// n3, outside the selector, holds no block, no bridge, no VXLAN device, no configuration and no
// entry, while n1's and n2's pods reach each other; selected by a changed selector, n3 claims a
// block and its pod reaches the others; n2, deselected with a pod attached, says NotSelected and
// keeps its bridge and configuration (its pod still reachable) until the pod's DEL, then removes
// everything and withdraws its entry.
func TestMultiNodeSelector(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "loopback")
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	s := startStandalone(t, "--controllers=false")
	client := s.clientset(t)
	ctx := context.Background()

	ul := newUnderlay(t)
	labels := map[string]string{"n1": "zone=a,node=n1", "n2": "zone=a,node=n2", "n3": "zone=b,node=n3"}
	nodes := map[string]*mnNode{}
	for i := 1; i <= 3; i++ {
		n := ul.addNode(t, i, pluginDir)
		n.startAgent(s.kubeconfig, "--underlay-interface", "eth0", "--node-labels", labels[n.name])
		nodes[n.name] = n
	}
	n1, n2, n3 := nodes["n1"], nodes["n2"], nodes["n3"]

	const name, key = "sel", "default/sel"
	nw, err := client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.NetworkSpec{CIDR: "10.67.0.0/24",
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.waitConfList(key)
	n2.waitConfList(key)
	selWaitNetwork(t, client, name, "n1 and n2 ready with their segment, no n3", func(nw *v1.Network) bool {
		e1, e2 := selEntry(nw, "n1"), selEntry(nw, "n2")
		return nw.Status.VNI != 0 && selEntry(nw, "n3") == nil && e1 != nil && e1.Ready && e1.VXLAN != "" &&
			e2 != nil && e2.Ready && e2.VXLAN != ""
	})
	// n3's agent has looked at the Network (it logs so) and has nothing of it.
	selWaitLog(t, n3, `"The network does not select this node; nothing of it here" network="default/sel"`)
	selAssertNothingOn(t, s, client, n3, name, key)

	p1 := selAddPod(t, n1, key, "n1-pod")
	p2 := selAddPod(t, n2, key, "n2-pod")
	pingOnceNS(t, "n1-pod -> n2-pod", p1.ns.Path, p2.ip)
	pingOnceNS(t, "n2-pod -> n1-pod", p2.ns.Path, p1.ip)

	// Selected: n3 claims a block, and its pod reaches n1's.
	start := time.Now()
	selSetSelector(t, client, name, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}})
	n3.waitConfList(key)
	t.Logf("n3 selected: configuration list %s after the selector change", time.Since(start).Round(time.Millisecond))
	if got := selNodeBlocks(t, client, "n3"); len(got) == 0 {
		t.Fatal("n3, selected, holds no block")
	}
	selWaitNetwork(t, client, name, "n3 ready with its segment", func(nw *v1.Network) bool {
		e := selEntry(nw, "n3")
		return e != nil && e.Ready && e.VXLAN != "" && e.UnderlayAddress == n3.underlay.String()
	})
	t.Logf("n3 selected: entry ready with its segment %s after the selector change", time.Since(start).Round(time.Millisecond))
	p3 := selAddPod(t, n3, key, "n3-pod")
	pingOnceNS(t, "n3-pod -> n1-pod", p3.ns.Path, p1.ip)
	pingOnceNS(t, "n1-pod -> n3-pod", p1.ns.Path, p3.ip)

	// n2 deselected with its pod attached: drains.
	start = time.Now()
	selSetSelector(t, client, name, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "node", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"n2"}}}})
	nw = selWaitNetwork(t, client, name, "n2 NotSelected with its pod", func(nw *v1.Network) bool {
		e := selEntry(nw, "n2")
		return e != nil && !e.Ready && e.Reason == "NotSelected" && e.Attachments == 1 && nw.Status.ObservedGeneration == nw.Generation
	})
	t.Logf("n2 NotSelected %s after the selector change; Ready while n2 drains: %+v", time.Since(start).Round(time.Millisecond), nw.Status.Conditions)
	if !selHasLink(n2, netbackend.BridgeName(key)) {
		t.Fatal("n2's bridge went while its pod is attached")
	}
	if _, err := os.Stat(linux.ConfPath(n2.confDir, key)); err != nil {
		t.Fatalf("n2's configuration list went while its pod is attached: %v", err)
	}
	// The draining node stays a peer: its pod still reaches the others.
	pingOnceNS(t, "n2-pod -> n3-pod (n2 draining)", p2.ns.Path, p3.ip)

	// The runtime's DEL works with what was kept, then everything goes.
	start = time.Now()
	if err := selDelPod(n2, key, p2); err != nil {
		t.Fatalf("DEL of n2's pod while n2 drains: %v", err)
	}
	selWaitNetwork(t, client, name, "n2's entry withdrawn", func(nw *v1.Network) bool { return selEntry(nw, "n2") == nil })
	t.Logf("n2's entry withdrawn %s after its last pod's DEL", time.Since(start).Round(time.Millisecond))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, statErr := os.Stat(linux.ConfPath(n2.confDir, key))
		return !selHasLink(n2, netbackend.BridgeName(key)) && !selHasLink(n2, netbackend.SegmentDeviceName(key)) && errors.Is(statErr, os.ErrNotExist), nil
	})
	if err != nil {
		t.Fatalf("n2 kept its bridge, VXLAN device or configuration after draining\nagent log:\n%s", n2.log.tail())
	}
	if leases, err := os.ReadDir(filepath.Join(n2.ipamDir, linux.NetworkName(key))); err == nil && len(leases) > 1 {
		t.Errorf("n2's host-local directory kept %d entries after the DEL", len(leases))
	}
	// n1 and n3 still reach each other.
	pingOnceNS(t, "n1-pod -> n3-pod (n2 gone)", p1.ns.Path, p3.ip)
}

// selEntry returns node's entry of nw, nil when it has none.
func selEntry(nw *v1.Network, node string) *v1.NetworkNodeStatus {
	for i := range nw.Status.Nodes {
		if nw.Status.Nodes[i].NodeName == node {
			return &nw.Status.Nodes[i]
		}
	}
	return nil
}

// selWaitNetwork waits until the Network satisfies ok and returns it.
func selWaitNetwork(t *testing.T, client versioned.Interface, name, what string, ok func(*v1.Network) bool) *v1.Network {
	t.Helper()
	var nw *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if nw, err = client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return ok(nw), nil
	})
	if err != nil {
		t.Fatalf("never %s: %+v", what, nw.Status)
	}
	return nw
}

// selWaitLog waits for line in node's agent log.
func selWaitLog(t *testing.T, n *mnNode, line string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(n.log.String(), line), nil
	})
	if err != nil {
		t.Fatalf("%s never logged %s\nagent log:\n%s", n.name, line, n.log.tail())
	}
}

// selAssertNothingOn checks that node has nothing of the Network: no block (API and kubectl), no
// bridge, no VXLAN device, no configuration, no entry.
func selAssertNothingOn(t *testing.T, s *standalone, client versioned.Interface, n *mnNode, name, key string) {
	t.Helper()
	if got := selNodeBlocks(t, client, n.name); len(got) != 0 {
		t.Errorf("%s, not selected, holds blocks %v", n.name, got)
	}
	if out := s.kubectl(t, "get", "blk", "-n", "default"); strings.Contains(out, name+"."+n.name) {
		t.Errorf("kubectl get blk lists %s.%s:\n%s", name, n.name, out)
	}
	for _, dev := range []string{netbackend.BridgeName(key), netbackend.SegmentDeviceName(key)} {
		if selHasLink(n, dev) {
			t.Errorf("%s, not selected, has %s", n.name, dev)
		}
	}
	if _, err := os.Stat(linux.ConfPath(n.confDir, key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s, not selected, has a configuration list: %v", n.name, err)
	}
	nw, err := client.SamplecrdV1().Networks("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := selEntry(nw, n.name); e != nil {
		t.Errorf("%s, not selected, has an entry: %+v", n.name, e)
	}
}

// selNodeBlocks lists the blocks node holds in namespace default.
func selNodeBlocks(t *testing.T, client versioned.Interface, node string) []string {
	t.Helper()
	list, err := client.SamplecrdV1().BlockAllocations("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("nodeName", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range list.Items {
		for _, b := range a.Blocks {
			out = append(out, b.CIDR)
		}
	}
	return out
}

// selSetSelector replaces the Network's spec.nodeSelector.
func selSetSelector(t *testing.T, client versioned.Interface, name string, selector *metav1.LabelSelector) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		nw.Spec.NodeSelector = selector
		_, err = client.SamplecrdV1().Networks("default").Update(ctx, nw, metav1.UpdateOptions{})
		return err == nil, nil // a conflict with a status write: again
	})
	if err != nil {
		t.Fatalf("setting spec.nodeSelector: %v", err)
	}
}

// selAddPod attaches a new pod namespace on n.
func selAddPod(t *testing.T, n *mnNode, key, id string) *mnPod {
	t.Helper()
	ns := netnstest.New(t, "pod")
	ns.DisableDAD(t)
	p, err := n.add(key, id, ns)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// selDelPod runs the CNI DEL of p with n's configuration list as it is now, as the runtime would.
func selDelPod(n *mnNode, key string, p *mnPod) error {
	list, err := libcni.ConfListFromFile(linux.ConfPath(n.confDir, key))
	if err != nil {
		return err
	}
	return netnstest.InNS(n.ns.Path, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return n.cni.DelNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.ns.Path, IfName: "eth0"})
	})
}

// selHasLink says whether n's namespace has a link named name.
func selHasLink(n *mnNode, name string) bool {
	_, err := n.ns.Netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		n.t.Fatalf("looking up %s on %s: %v", name, n.name, err)
	}
	return err == nil
}

// TestAggregatedClaimSelector: attached to a real kube-apiserver, network-apiserver refuses a
// block claim for a Node that the Network's spec.nodeSelector does not select (403 naming the
// node), grants one for a selected Node, lets a node it knows no Node of through (the agent's
// own match is the check there), and follows a relabelled Node.
func TestAggregatedClaimSelector(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)
	ctx := context.Background()
	for node, zone := range map[string]string{"sel-1": "a", "sel-3": "b"} {
		c.kubectl(t, "apply", "-f", writeManifest(t, node+".yaml",
			"apiVersion: v1\nkind: Node\nmetadata:\n  name: "+node+"\n  labels:\n    zone: "+zone+"\n"))
	}
	networks := c.clientset(t).SamplecrdV1().Networks("default")
	create := func(name, cidr string) {
		t.Helper()
		if _, err := networks.Create(ctx, &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.NetworkSpec{CIDR: cidr, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(network, node string) error {
		_, err := networks.ClaimBlocks(ctx, network, &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{})
		return err
	}
	// The server's Node informer has the Nodes once a probe Network refuses sel-3.
	create("probe", "10.41.0.0/24")
	eventually(t, 60*time.Second, "the server knows sel-3's labels", func() (bool, string) {
		err := claim("probe", "sel-3")
		return apierrors.IsForbidden(err), fmt.Sprint(err)
	})

	create("zoned", "10.40.0.0/24")
	if err := claim("zoned", "sel-1"); err != nil {
		t.Fatalf("claim for the selected sel-1: %v", err)
	}
	err := claim("zoned", "sel-3")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "sel-3 is not selected by spec.nodeSelector") {
		t.Fatalf("claim for sel-3 (zone=b): %v; want 403 sel-3 is not selected by spec.nodeSelector", err)
	}
	t.Logf("refused: %v", err)
	if out, _ := c.kubectlErr("get", "blk", "-n", "default"); strings.Contains(out, "zoned.sel-3") {
		t.Fatalf("sel-3 holds a block of zoned after the refusal:\n%s", out)
	}
	if err := claim("zoned", "no-such-node"); err != nil {
		t.Fatalf("claim for a node without a Node object: %v; want it granted (the agent checks)", err)
	}

	c.kubectl(t, "label", "node", "sel-3", "zone=a", "--overwrite")
	eventually(t, 30*time.Second, "sel-3, relabelled zone=a, may claim", func() (bool, string) {
		err := claim("zoned", "sel-3")
		return err == nil, fmt.Sprint(err)
	})
}
