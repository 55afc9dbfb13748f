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
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// TestRuntimeBridgeOnAttach: the built server's controller with --bridge-on-attach, the
// samplecrd-bridge plugin `make build` puts beside the reference plugins, and a runtime's
// ADD, CHECK and DEL through libcni. A Network is Ready with its list and no interface; the
// first pod's ADD makes the bridge with the Network's MAC, MTU and gateway, and the pods reach
// the gateway and each other; the controller then counts the pod; a Network no pod used leaves
// with its list alone, and one that had pods with its bridge too.
func TestRuntimeBridgeOnAttach(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "portmap", "loopback", linux.AttachPluginType)
	nodeNS := netnstest.New(t, "node")
	nodeNS.DisableDAD(t)
	n := &node{t: t, ns: nodeNS, dataDir: t.TempDir(), confDir: t.TempDir(), ipamDir: t.TempDir(), port: freePort(t),
		pluginsD: pluginDir, args: []string{"--bridge-on-attach", "--count-report-interval", "1s"}}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)
	n.start()
	t.Cleanup(n.stop)
	ctx := context.Background()

	gateway := netip.MustParseAddr("10.124.0.1")
	for name, cidr := range map[string]string{"used": "10.124.0.0/24", "idle": "10.125.0.0/24"} {
		if _, err := n.client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: cidr},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"used", "idle"} {
		ready := n.waitReady(name, metav1.ConditionTrue)
		key := "default/" + name
		if len(ready.Status.Nodes) != 1 || ready.Status.Nodes[0].Bridge != netbackend.BridgeName(key) {
			t.Errorf("%s: status.nodes %+v; want the bridge a pod would attach to named", name, ready.Status.Nodes)
		}
		if l, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(key)); err == nil {
			t.Fatalf("%s: Ready with bridge %s already made (%s); want none before a pod", name, l.Attrs().Name, l.Type())
		}
		if list := n.confList(key); len(list.Plugins) != 3 || list.Plugins[0].Network.Type != linux.AttachPluginType {
			t.Fatalf("%s: the list's first plugin is not %s", name, linux.AttachPluginType)
		}
	}

	used := "default/used"
	first := n.add(used, "used-pod0")
	br, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(used))
	if err != nil {
		t.Fatalf("no bridge after the first ADD: %v", err)
	}
	if !bytes.Equal(br.Attrs().HardwareAddr, netbackend.BridgeMAC(used)) || br.Attrs().MTU != netbackend.DefaultMTU ||
		br.Attrs().Alias != linux.Alias(used) {
		t.Errorf("the bridge the first ADD made: MAC %s, MTU %d, alias %q; want %s, %d, %q", br.Attrs().HardwareAddr,
			br.Attrs().MTU, br.Attrs().Alias, netbackend.BridgeMAC(used), netbackend.DefaultMTU, linux.Alias(used))
	}
	if addrs, err := nodeNS.Netlink.AddrList(br, netlink.FAMILY_V4); err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.124.0.1/24" {
		t.Errorf("bridge addresses %v, %v; want the gateway 10.124.0.1/24", addrs, err)
	}
	second := n.add(used, "used-pod1")
	pingOnce(t, "the gateway from the first pod", first, gateway)
	pingOnce(t, "the second pod from the first", first, second.ip)
	if err := n.check(first); err != nil {
		t.Errorf("CHECK of the first pod: %v", err)
	}
	// The controller hears of the bridge (the link's event) and counts the pods.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := n.client.SamplecrdV1().Networks("default").Get(ctx, "used", metav1.GetOptions{})
		return err == nil && len(got.Status.Nodes) == 1 && got.Status.Nodes[0].Attachments == 2, nil
	})
	if err != nil {
		t.Fatalf("status never counted the two pods: %v", err)
	}
	n.del(first)
	n.del(second)
	if _, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(used)); err != nil {
		t.Errorf("the bridge went with the pods' DELs (%v); it is the Network's", err)
	}

	for _, name := range []string{"used", "idle"} {
		if err := n.client.SamplecrdV1().Networks("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		left = nil
		for _, name := range []string{"used", "idle"} {
			key := "default/" + name
			if _, err := n.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, name+": the Network")
			}
			if _, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(key)); err == nil {
				left = append(left, name+": its bridge")
			}
			if _, err := os.Stat(linux.ConfPath(n.confDir, key)); !errors.Is(err, os.ErrNotExist) {
				left = append(left, name+": its list")
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("after the deletes, still there: %s", strings.Join(left, ", "))
	}
	t.Logf("both Networks, the lists and the bridge gone %v after the deletes", time.Since(deleted).Round(time.Millisecond))
}
