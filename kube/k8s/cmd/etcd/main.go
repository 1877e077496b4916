// Command etcd: etcd's own server (etcdmain), at the release the API server's client is of.
// Debian's etcd (3.4) lacks the RequestWatchProgress feature that Kubernetes 1.37's watch
// lists need (Spark's Kubernetes client asks for them).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
