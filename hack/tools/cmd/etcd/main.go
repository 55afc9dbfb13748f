// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3 module pinned in
// hack/tools/go.mod: that module has the server's entry point (etcdmain) but no main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
