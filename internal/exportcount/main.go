// Command exportcount counts the exported API of Go packages: exported
// top-level names (functions, types, variables, constants) plus exported
// methods, in non-test files, the measure issue 19 sets targets on. It
// prints two figures: "api", the names a user of the package can reach
// (methods of unexported types left out: they exist only to satisfy
// interfaces such as error, http.ResponseWriter or prometheus.Collector),
// and "all", every exported identifier however unreachable.
//
//	go run ./internal/exportcount [-v] pool gateway gradio
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list the names")
	flag.Parse()
	status := 0
	for _, dir := range flag.Args() {
		names, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			status = 1
			continue
		}
		api := 0
		for _, n := range names {
			if reachable(n) {
				api++
			}
		}
		fmt.Printf("%s\tapi %d\tall %d\n", dir, api, len(names))
		if *verbose {
			for _, n := range names {
				mark := ""
				if !reachable(n) {
					mark = "\t(method of an unexported type)"
				}
				fmt.Printf("\t%s%s\n", n, mark)
			}
		}
	}
	os.Exit(status)
}

// count returns the exported names of the package in dir, sorted.
func count(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil && len(d.Recv.List) > 0 {
					recv := recvName(d.Recv.List[0].Type)
					names = append(names, recv+"."+d.Name.Name)
				} else {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// reachable reports whether a counted name is reachable from outside the
// package: a top-level name, or a method of an exported type.
func reachable(name string) bool {
	recv, _, isMethod := strings.Cut(name, ".")
	return !isMethod || ast.IsExported(recv)
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
