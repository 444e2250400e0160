// Package buildinfo says which build of cronswap is running: the version
// `cronswap version` prints and an http action's User-Agent carries.
package buildinfo

import "runtime/debug"

// Version is set at build time with
// -ldflags "-X github.com/cronswap/cronswap/internal/buildinfo.Version=v1.2.3";
// read it through String.
var Version = "dev"

// String returns the version: the one set at build time, else the main
// module's version when the binary was built by `go install module@version`,
// else "dev".
func String() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}
