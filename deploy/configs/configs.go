// Package configs holds the collector configs Fathom ships (the node, gateway and
// standalone pipelines and their plaintext overlays), embedded so that the demo and the
// tests derive what they run from these files (internal/collectorconfig) rather than
// from copies of them that drift.
package configs

import "embed"

// Files are deploy/configs/*.yaml, by file name.
//
//go:embed *.yaml
var Files embed.FS
