// etcd's server, built from go.etcd.io/etcd/server/v3 at the version Kubernetes names for its
// release (tests/cluster/cluster.sh build).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
