// Command writecheck keeps internal/runstore the only code that writes
// job_runs, job_locks and job_pauses (the fire path's records): every other
// package reads them, and asks the store for a write (an operator's lock
// release, a resume, a backfill's missed record, the relay's cleared
// notices). It reads the module's Go files (tests, test data and nested
// modules left out) and fails on a write call — InsertOne, UpdateMany,
// BulkWrite, DeleteOne, Drop, … — made outside internal/runstore on a
// handle of one of those collections: see Check for what counts as one.
//
//	go run ./internal/tools/writecheck [module root, default .]
//
// scripts/test.sh runs it among its repository checks.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	root := "."
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: writecheck [module root]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	os.Exit(run(root, os.Stderr))
}

// run checks the tree at root and prints the violations to errOut. It
// returns the process's exit code: 0 when there is none, 1 when there
// are, 2 when the tree cannot be read.
func run(root string, errOut io.Writer) int {
	found, err := Check(root)
	if err != nil {
		fmt.Fprintf(errOut, "writecheck: %v\n", err)
		return 2
	}
	for _, v := range found {
		fmt.Fprintf(errOut, "writecheck: %s\n", v)
	}
	if len(found) > 0 {
		return 1
	}
	return 0
}
