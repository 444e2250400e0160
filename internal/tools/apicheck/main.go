// Command apicheck keeps the module's public API small and documented. For
// every package of the module that is not under internal/ (main packages and
// the e2e and examples trees excluded) it counts the exported names — the
// exported top-level constants, variables, types and functions, plus the
// exported methods of exported types; struct fields and interface methods do
// not count — prints the counts, and fails when a package exceeds its budget
// (see budget) or when the package or one of its exported names has no doc
// comment.
//
//	go run ./internal/tools/apicheck [module root, default .]
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
		fmt.Fprintln(os.Stderr, "usage: apicheck [module root]")
		os.Exit(2)
	}
	if len(os.Args) == 2 {
		root = os.Args[1]
	}
	os.Exit(run(root, os.Stdout, os.Stderr))
}

// run checks the module at root, prints the counts to out and the
// violations to errOut, and returns the process's exit code: 0 when every
// package keeps its budget and documents every exported name, 1 when one
// does not, 2 when the module cannot be read.
func run(root string, out, errOut io.Writer) int {
	reports, err := CheckModule(root)
	if err != nil {
		fmt.Fprintf(errOut, "apicheck: %v\n", err)
		return 2
	}
	failed := false
	for _, r := range reports {
		fmt.Fprintf(out, "%-40s %3d exported names (budget %d)\n", r.ImportPath, r.Count, r.Budget)
		for _, p := range r.Problems {
			fmt.Fprintf(errOut, "apicheck: %s: %s\n", r.ImportPath, p)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}
