// CoreDNS for the cluster lab, with the plugins a kubeadm cluster's stock
// Corefile uses and nothing else, so that it builds in a fraction of the
// time the full plugin set takes.
package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The plugins linked in above, by their Corefile names.
var linked = []string{
	"cache", "errors", "forward", "health", "kubernetes", "loadbalance",
	"log", "loop", "prometheus", "ready", "reload",
}

func main() {
	// The order of dnsserver.Directives is the order plugins run in; keep
	// CoreDNS's own order and drop the plugins that are not linked.
	dnsserver.Directives = slices.DeleteFunc(dnsserver.Directives, func(name string) bool {
		return !slices.Contains(linked, name)
	})
	coremain.Run()
}
