package main

import (
	"context"
	"os"
	"path/filepath"
)

// workspace is a benchmark run's scratch directory: where the daemons' logs
// go unless the caller named a directory, and the daemon binary, built
// there unless the caller named one.
type workspace struct {
	tmp    string
	logDir string
	binary string
}

// newWorkspace creates the scratch directory (prefix names it), the log
// directory logDir if given, and builds the daemon when binary is empty.
func newWorkspace(ctx context.Context, prefix, logDir, binary string) (*workspace, error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	ws := &workspace{tmp: tmp, logDir: logDir, binary: binary}
	if ws.logDir == "" {
		ws.logDir = tmp
	} else if err := os.MkdirAll(ws.logDir, 0o755); err != nil {
		ws.remove()
		return nil, err
	}
	if ws.binary == "" {
		ws.binary = filepath.Join(tmp, "cronswap")
		if err := buildDaemon(ctx, ws.binary); err != nil {
			ws.remove()
			return nil, err
		}
	}
	return ws, nil
}

// remove deletes the scratch directory and what is in it.
func (ws *workspace) remove() { _ = os.RemoveAll(ws.tmp) }
