// Package modtree walks the directories of a Go module for the repository's
// check tools (internal/tools/...): one rule for what belongs to the module.
package modtree

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Dirs calls visit for the module rooted at root and each directory below
// it, in lexical order, with its path (root joined) and its path relative
// to root with slashes ("." for root). A directory holding a go.mod of its
// own is another module and is left out with everything below it, as is a
// directory for which skip (given the relative path) says so. An error of
// visit ends the walk and is returned.
func Dirs(root string, skip func(rel string) bool, visit func(dir, rel string) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			if skip(rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		return visit(p, rel)
	})
}
