package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cronswap/cronswap/internal/tools/modtree"
)

// Owner is the one package (its directory, relative to the module root)
// that may write the fire path's collections.
const Owner = "internal/runstore"

// collectionNames are the fire path's collections and the names of the
// constants that hold them (package record).
var collectionNames = map[string]bool{
	"job_runs": true, "job_locks": true, "job_pauses": true,
	"RunsCollection": true, "LocksCollection": true, "PausesCollection": true,
}

// handleFuncs are the functions of package record that return handles of
// those collections.
var handleFuncs = map[string]bool{"Collections": true, "PausesCollectionOf": true}

// conventionalNames are the names the code gives a handle of those
// collections when it comes from another package (a parameter, a field
// set by a caller): a write on a value so named counts as a write of them.
var conventionalNames = map[string]bool{"runs": true, "locks": true, "pauses": true}

// writeMethods are the methods of *mongo.Collection that write documents
// (or drop them all).
var writeMethods = map[string]bool{
	"InsertOne": true, "InsertMany": true, "UpdateOne": true, "UpdateMany": true, "UpdateByID": true,
	"ReplaceOne": true, "DeleteOne": true, "DeleteMany": true, "BulkWrite": true,
	"FindOneAndUpdate": true, "FindOneAndReplace": true, "FindOneAndDelete": true, "Drop": true,
}

// Violation is one write of the fire path's collections outside Owner.
type Violation struct {
	// Pos is the call's file (relative to the root, with slashes) and line.
	Pos string
	// Call is the receiver and method, as written.
	Call string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s writes job_runs, job_locks or job_pauses outside %s (ask the store: runstore.Store)",
		v.Pos, v.Call, Owner)
}

// Check reads every package of the tree at root but Owner — non-test Go
// files; testdata, vendor, node_modules, names starting with "." or "_"
// and nested modules (a go.mod of their own) left out — and returns the
// write calls whose receiver is a handle of the fire path's collections:
//
//   - an expression that makes one: db.Collection(record.RunsCollection)
//     (or any of the three constants, or their names as string literals),
//     record.Collections(db), record.PausesCollectionOf(db);
//   - a name the same package binds to such an expression (a variable, a
//     struct field set by an assignment or a composite literal, a function
//     that returns one);
//   - a name the code gives such a handle passed in from elsewhere: runs,
//     locks, pauses (any case).
//
// It sees names, not types: a handle renamed on its way through another
// package escapes it, and a value of another collection under one of those
// names is reported (rename it).
func Check(root string) ([]Violation, error) {
	var out []Violation
	skip := func(rel string) bool {
		name := path.Base(rel)
		return name == "testdata" || name == "vendor" || name == "node_modules" ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || rel == Owner
	}
	err := modtree.Dirs(root, skip, func(p, _ string) error {
		vs, err := checkDir(root, p)
		out = append(out, vs...)
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Pos < out[j].Pos })
	return out, err
}

// checkDir checks the non-test Go files of dir as one package.
func checkDir(root, dir string) ([]Violation, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, nil
	}
	bound := boundNames(files)
	var out []Violation
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !writeMethods[sel.Sel.Name] {
				return true
			}
			if makesHandle(sel.X) || isHandleName(sel.X, bound) {
				pos := fset.Position(call.Pos())
				rel, err := filepath.Rel(root, pos.Filename)
				if err != nil {
					rel = pos.Filename
				}
				out = append(out, Violation{Pos: filepath.ToSlash(rel) + ":" + strconv.Itoa(pos.Line),
					Call: exprString(sel.X) + "." + sel.Sel.Name})
			}
			return true
		})
	}
	return out, nil
}

// makesHandle reports whether e is a call that returns a handle of the
// fire path's collections.
func makesHandle(e ast.Expr) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return false
	}
	switch fun := call.Fun.(type) {
	case *ast.Ident: // inside package record
		return handleFuncs[fun.Name]
	case *ast.SelectorExpr:
		if x, ok := fun.X.(*ast.Ident); ok && x.Name == "record" && handleFuncs[fun.Sel.Name] {
			return true
		}
		return fun.Sel.Name == "Collection" && len(call.Args) > 0 && namesCollection(call.Args[0])
	}
	return false
}

// namesCollection reports whether e names one of the fire path's
// collections: one of record's constants, or a string literal.
func namesCollection(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return collectionNames[e.Name]
	case *ast.SelectorExpr:
		return collectionNames[e.Sel.Name]
	case *ast.BasicLit:
		s, err := strconv.Unquote(e.Value)
		return err == nil && collectionNames[s]
	}
	return false
}

// boundNames returns the names the package binds to handles: variables
// and fields assigned one (or both results of record.Collections), fields
// set to one in a composite literal, functions that return one.
func boundNames(files []*ast.File) map[string]bool {
	bound := map[string]bool{}
	bind := func(lhs []ast.Expr, rhs []ast.Expr) {
		for i, l := range lhs {
			if (len(rhs) == 1 && makesHandle(rhs[0])) || (len(rhs) == len(lhs) && makesHandle(rhs[i])) {
				if name := lastName(l); name != "" && name != "_" {
					bound[name] = true
				}
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				bind(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				lhs := make([]ast.Expr, len(n.Names))
				for i, id := range n.Names {
					lhs[i] = id
				}
				bind(lhs, n.Values)
			case *ast.KeyValueExpr:
				if makesHandle(n.Value) {
					if name := lastName(n.Key); name != "" {
						bound[name] = true
					}
				}
			case *ast.FuncDecl:
				if n.Body == nil {
					return true
				}
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if _, ok := m.(*ast.FuncLit); ok {
						return false // its returns are its own
					}
					if r, ok := m.(*ast.ReturnStmt); ok {
						for _, e := range r.Results {
							if makesHandle(e) {
								bound[n.Name.Name] = true
							}
						}
					}
					return true
				})
			}
			return true
		})
	}
	return bound
}

// isHandleName reports whether e is a value the package bound to a handle,
// or one under a conventional name: x, s.x, or a call of such a function.
func isHandleName(e ast.Expr, bound map[string]bool) bool {
	e = ast.Unparen(e)
	if call, ok := e.(*ast.CallExpr); ok {
		e = call.Fun
	}
	name := lastName(e)
	return name != "" && (bound[name] || conventionalNames[strings.ToLower(name)])
}

// lastName is the name e ends in: x for x and a.b.x; "" for anything else.
func lastName(e ast.Expr) string {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// exprString renders e briefly for a report.
func exprString(e ast.Expr) string {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.CallExpr:
		args := make([]string, len(e.Args))
		for i, a := range e.Args {
			args[i] = exprString(a)
		}
		return exprString(e.Fun) + "(" + strings.Join(args, ", ") + ")"
	case *ast.BasicLit:
		return e.Value
	}
	return "…"
}
