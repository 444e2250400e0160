package main

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cronswap/cronswap/internal/tools/modtree"
)

// The most exported names a public package may have: the embedding
// package (EmbeddingPackage) exports what a user needs to run cronswap
// inside a Go service and no more; every other public package stays within
// DefaultBudget.
const (
	EmbeddingPackage = "daemon"
	EmbeddingBudget  = 40
	DefaultBudget    = 60
)

// budget is the most exported names the package named name may have.
func budget(name string) int {
	if name == EmbeddingPackage {
		return EmbeddingBudget
	}
	return DefaultBudget
}

// skipDir reports whether the directory at rel (relative to the module
// root, with slashes) and below holds no public API: internal packages,
// the end-to-end tests and the example programs (top-level e2e and
// examples), the scripts, test data, and what the go tool ignores (names
// starting with "." or "_").
func skipDir(rel string) bool {
	parts := strings.Split(rel, "/")
	switch parts[0] {
	case "e2e", "examples", "scripts":
		return true
	}
	for _, part := range parts {
		if part == "internal" || part == "testdata" || part == "node_modules" ||
			strings.HasPrefix(part, ".") || strings.HasPrefix(part, "_") {
			return true
		}
	}
	return false
}

// Report is what apicheck found in one package.
type Report struct {
	// ImportPath is the package's import path; Dir its directory relative
	// to the module root, with slashes ("." for the root).
	ImportPath, Dir string
	// Count is the number of exported names; Budget the most allowed.
	Count, Budget int
	// Names lists the counted names ("Type", "Type.Method", "Func").
	Names []string
	// Problems lists what fails the check: an exceeded budget, a missing
	// package or name doc comment.
	Problems []string
}

// CheckModule checks every public package of the module rooted at root
// (the directory holding go.mod), in import-path order. Nested modules
// (a directory with a go.mod of its own) are not part of it.
func CheckModule(root string) ([]Report, error) {
	modPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var reports []Report
	err = modtree.Dirs(root, skipDir, func(p, rel string) error {
		importPath := modPath
		if rel != "." {
			importPath = path.Join(modPath, rel)
		}
		r, ok, err := CheckDir(p, importPath)
		if err != nil {
			return err
		}
		if ok {
			r.Dir = rel
			reports = append(reports, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].ImportPath < reports[j].ImportPath })
	return reports, nil
}

// CheckDir checks the package in dir (its non-test files for the current
// platform). ok is false when dir holds no Go package, or a main package,
// which is a program and exports nothing to importers.
func CheckDir(dir, importPath string) (r Report, ok bool, err error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return Report{}, false, nil
		}
		return Report{}, false, fmt.Errorf("%s: %w", dir, err)
	}
	if bp.Name == "main" {
		return Report{}, false, nil
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return Report{}, false, err
		}
		files = append(files, f)
	}
	r = Report{ImportPath: importPath, Budget: budget(bp.Name)}
	names, undocumented := exported(fset, files)
	r.Names = names
	r.Count = len(names)
	if !hasPackageDoc(files) {
		r.Problems = append(r.Problems, "the package has no doc comment (// Package "+bp.Name+" ...)")
	}
	for _, u := range undocumented {
		r.Problems = append(r.Problems, u+" has no doc comment")
	}
	if r.Count > r.Budget {
		r.Problems = append(r.Problems, fmt.Sprintf("%d exported names, over the budget of %d: %s",
			r.Count, r.Budget, strings.Join(names, ", ")))
	}
	return r, true, nil
}

// exported returns the package's exported names, sorted, and those of them
// that have no doc comment, each with its position.
func exported(fset *token.FileSet, files []*ast.File) (names, undocumented []string) {
	// Types first: a method counts only when its receiver type is exported.
	for _, f := range files {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if !spec.Name.IsExported() {
							continue
						}
						names = append(names, spec.Name.Name)
						if !documented(decl, spec.Doc, spec.Comment) {
							undocumented = append(undocumented, at(fset, spec.Pos())+"type "+spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							if !id.IsExported() {
								continue
							}
							names = append(names, id.Name)
							if !documented(decl, spec.Doc, spec.Comment) {
								undocumented = append(undocumented, at(fset, id.Pos())+decl.Tok.String()+" "+id.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if !decl.Name.IsExported() {
					continue
				}
				name := decl.Name.Name
				if decl.Recv != nil {
					recv := receiverType(decl.Recv)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				names = append(names, name)
				if decl.Doc == nil || strings.TrimSpace(decl.Doc.Text()) == "" {
					undocumented = append(undocumented, at(fset, decl.Pos())+"func "+name)
				}
			}
		}
	}
	sort.Strings(names)
	return names, undocumented
}

// documented reports whether a spec has a doc comment: its own, a comment
// at the end of its line, or that of its declaration (a documented group
// of constants documents each of them, as go doc shows it).
func documented(decl *ast.GenDecl, doc, line *ast.CommentGroup) bool {
	for _, c := range []*ast.CommentGroup{doc, line, decl.Doc} {
		if c != nil && strings.TrimSpace(c.Text()) != "" {
			return true
		}
	}
	return false
}

// receiverType is the name of a method's receiver type, without pointer or
// type parameters.
func receiverType(recv *ast.FieldList) string {
	if len(recv.List) == 0 {
		return ""
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func hasPackageDoc(files []*ast.File) bool {
	for _, f := range files {
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			return true
		}
	}
	return false
}

func at(fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	return fmt.Sprintf("%s:%d: ", filepath.Base(p.Filename), p.Line)
}

// modulePath reads the module path from a go.mod file.
func modulePath(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", goMod, err)
	}
	return "", fmt.Errorf("%s: no module line", goMod)
}
