// Command pulumi-resource-kubernetes: Pulumi's Kubernetes provider, served as its own main does.
// The build writes schema-embed.json and terraform-mapping-embed.json beside this file (the
// module's schema.json stamped with the release, and its mapping, minified); see hanzo_stream/kube/build.py.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var mapping []byte

func main() { provider.Serve("kubernetes", version.Version, schema, mapping) }
