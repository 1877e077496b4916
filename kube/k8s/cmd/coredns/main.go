// Command coredns: CoreDNS with only the plugins the node's cluster DNS uses (the full build
// carries every cloud's SDK; this one answers the cluster domain from the API server).
package main

import (
	"log"

	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	"github.com/coredns/coredns/coremain"
)

func main() {
	// Execution order, as in CoreDNS's own plugin.cfg.
	if err := dnsserver.SetDirectives([]string{
		"bind", "ready", "health", "errors", "log", "cache", "kubernetes",
	}); err != nil {
		log.Fatal(err)
	}
	coremain.Run()
}
