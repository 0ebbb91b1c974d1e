package userconfig

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// seeds evaluates the seed constants of the workspace package from its source, so
// the examples users are given are checked against these parsers without the
// workspace package having to export them.
func seeds(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../workspace/seeds.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]ast.Expr{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				consts[n.Name] = vs.Values[i]
			}
		}
	}
	out := map[string]string{}
	for _, name := range []string{"cronSeed", "heartbeatSeed", "briefingsSeed", "tasksSeed"} {
		v := evalString(t, consts, consts[name])
		if v == "" {
			t.Fatalf("seed %s not found or empty", name)
		}
		out[name] = v
	}
	return out
}

// evalString folds a constant string expression of string literals, + and other
// constants of the same file.
func evalString(t *testing.T, consts map[string]ast.Expr, e ast.Expr) string {
	t.Helper()
	switch e := e.(type) {
	case *ast.BasicLit:
		return constant.StringVal(constant.MakeFromLiteral(e.Value, e.Kind, 0))
	case *ast.BinaryExpr:
		return evalString(t, consts, e.X) + evalString(t, consts, e.Y)
	case *ast.Ident:
		if c, ok := consts[e.Name]; ok {
			return evalString(t, consts, c)
		}
	case *ast.ParenExpr:
		return evalString(t, consts, e.X)
	}
	t.Fatalf("cannot evaluate %s", types.ExprString(e))
	return ""
}

func uncomment(s string) string {
	return strings.NewReplacer("<!--", "", "-->", "").Replace(s)
}

func TestSeedsParse(t *testing.T) {
	s := seeds(t)
	// As seeded, every file is inert: its example sits in an HTML comment.
	if f, p := ParseCron([]byte(s["cronSeed"]), "UTC"); len(f.Jobs) != 0 || len(p) != 0 {
		t.Errorf("CRON.md seed: %+v %v", f, p)
	}
	if f, p := ParseHeartbeat([]byte(s["heartbeatSeed"]), false); len(f.Checks) != 0 || len(p) != 0 {
		t.Errorf("HEARTBEAT.md seed: %+v %v", f, p)
	}
	if f, p := ParseBriefings([]byte(s["briefingsSeed"])); len(f.Briefings) != 0 || len(p) != 0 {
		t.Errorf("BRIEFINGS.md seed: %+v %v", f, p)
	}
	if tasks := ParseTasks([]byte(s["tasksSeed"])); len(tasks) != 0 {
		t.Errorf("TASKS.md seed: %+v", tasks)
	}
	// With the comment marks removed, each example is valid as the seed promises.
	if f, p := ParseCron([]byte(uncomment(s["cronSeed"])), "UTC"); len(f.Jobs) != 1 || len(p) != 0 {
		t.Errorf("CRON.md example: %+v %v", f, p)
	}
	if f, p := ParseHeartbeat([]byte(uncomment(s["heartbeatSeed"])), false); len(f.Checks) != 1 || len(p) != 0 {
		t.Errorf("HEARTBEAT.md example: %+v %v", f, p)
	}
	if f, p := ParseBriefings([]byte(uncomment(s["briefingsSeed"]))); len(f.Briefings) != 1 || len(p) != 0 {
		t.Errorf("BRIEFINGS.md example: %+v %v", f, p)
	}
	if tasks := ParseTasks([]byte(uncomment(s["tasksSeed"]))); len(tasks) != 1 {
		t.Errorf("TASKS.md example: %+v", tasks)
	}
}
