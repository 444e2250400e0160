//go:build !linux

package main

import "os/exec"

// startChild starts cmd; outside Linux nothing kills it if the bench dies
// without stopping it.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
