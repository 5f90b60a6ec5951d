package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/poligon/poligon/hostapi/calls"
)

// results are the shapes a JavaScript verb may give its answer; each is a
// shaper of runtime/js/prelude.js, so a new one is written there too.
var results = []calls.Result{
	calls.AsAnswer, calls.AsNothing, calls.AsStdout, calls.AsStdoutIfOK, calls.AsSeconds,
	calls.AsBox, calls.AsSpotIfOK, calls.AsSpotIfFound, calls.AsUTF8, calls.AsPath,
}

// argTS is the TypeScript of the positional arguments with a JS kind of
// their own; all of them are optional but ArgText.
var argTS = map[calls.Arg]struct {
	ts       string
	optional bool
}{
	calls.ArgText:    {"string", false},
	calls.ArgStrings: {"{ [name: string]: string }", true},
	calls.ArgShot:    {"{ShotAnswer}", true},
}

// call is one registry entry with its types resolved.
type call struct {
	calls.Call
	args, answer reflect.Type
	fields       map[string]reflect.StructField // Args' fields by JSON name
	constName    string                         // the Go constant of its name: "Exec"
}

// field answers the Args field a param fills.
func (c *call) field(p calls.Param) reflect.StructField {
	return c.fields[cmp.Or(p.Field, p.Name)]
}

// jsCheck answers how the prelude checks a positional argument.
func (c *call) jsCheck(p calls.Param) string {
	if p.JS != "" {
		return string(p.JS)
	}
	if isNumber(c.field(p).Type) {
		return "num"
	}
	return "str"
}

// jsVerb splits the call's name into the group of vm its verb is in ("" for
// vm itself) and the verb's name: "screen.shot" is vm.screen.shot.
func (c *call) jsVerb() (group, name string) {
	if g, n, ok := strings.Cut(c.Name, "."); ok {
		return g, n
	}
	return "", c.Name
}

// goVerb splits the SDK verb into its group ("" for a VM method) and name.
func (c *call) goVerb() (group, name string) {
	if g, n, ok := strings.Cut(c.Go, "."); ok {
		return g, n
	}
	return "", c.Go
}

// model is everything the generators read: the registry, with the docs of
// the calls package's source.
type model struct {
	calls    []*call
	docs     map[string]typeDocs // by Go type name
	consts   map[string]string   // call name -> constant
	typesOf  map[string]reflect.Type
	problems []string
}

type typeDocs struct {
	doc    string
	fields map[string]string // by Go field name
}

// load reads the calls package under root (its source for the docs and
// constants) and checks the registry; a problem is an error naming the call.
func load(root string, registry []calls.Call) (*model, error) {
	m := &model{docs: map[string]typeDocs{}, consts: map[string]string{}, typesOf: map[string]reflect.Type{}}
	if err := m.parse(filepath.Join(root, "hostapi", "calls")); err != nil {
		return nil, err
	}
	for _, c := range registry {
		m.add(c)
	}
	m.checkShared()
	for _, c := range m.calls { // once every call's types are known
		for _, ts := range []string{c.Result.TS, argTSOf(c.Params)} {
			for _, ph := range placeholder.FindAllStringSubmatch(ts, -1) {
				if ph[1] != "answer" && m.typesOf[ph[1]] == nil {
					m.problem("%q: %s names no type of package calls", c.Name, ph[0])
				}
			}
		}
	}
	registered := map[string]bool{}
	for _, c := range m.calls {
		registered[c.Name] = true
	}
	for name, constant := range m.consts {
		if !registered[name] {
			m.problem("calls.%s (%q) has no Registry entry", constant, name)
		}
	}
	if len(m.problems) > 0 {
		slices.Sort(m.problems)
		return nil, fmt.Errorf("hostapi/calls/registry.go:\n\t%s", strings.Join(m.problems, "\n\t"))
	}
	return m, nil
}

func (m *model) problem(format string, a ...any) {
	m.problems = append(m.problems, fmt.Sprintf(format, a...))
}

// parse reads the type and field docs and the call constants.
func (m *model) parse(dir string) error {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if doc == nil {
						doc = gd.Doc
					}
					td := typeDocs{doc: text(doc), fields: map[string]string{}}
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, f := range st.Fields.List {
							d := text(f.Doc)
							if d == "" {
								d = text(f.Comment)
							}
							for _, n := range f.Names {
								td.fields[n.Name] = d
							}
						}
					}
					m.docs[s.Name.Name] = td
				case *ast.ValueSpec:
					if gd.Tok != token.CONST || s.Type != nil || len(s.Values) != 1 { // untyped: a call's name
						continue
					}
					if lit, ok := s.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						m.consts[v] = s.Names[0].Name
					}
				}
			}
		}
	}
	return nil
}

// text is a comment as one line of prose.
func text(cg *ast.CommentGroup) string {
	return strings.Join(strings.Fields(cg.Text()), " ")
}

var placeholder = regexp.MustCompile(`\{(\w+)\}`)

func (m *model) add(c calls.Call) {
	where := fmt.Sprintf("%q", c.Name)
	if c.Name == "" {
		m.problem("an entry has no Name")
		return
	}
	for _, other := range m.calls {
		if other.Name == c.Name {
			m.problem("%s: registered twice", where)
		}
		if other.Go == c.Go {
			m.problem("%s: Go verb %s is %q's too", where, c.Go, other.Name)
		}
	}
	if group, _, ok := strings.Cut(c.Name, "."); ok && len(m.calls) > 0 && !strings.HasPrefix(m.calls[len(m.calls)-1].Name, group+".") {
		for _, other := range m.calls {
			if strings.HasPrefix(other.Name, group+".") {
				m.problem("%s: the calls of vm.%s follow one another in the registry (%q is apart)", where, group, other.Name)
				break
			}
		}
	}
	x := &call{Call: c, constName: m.consts[c.Name], fields: map[string]reflect.StructField{}}
	if x.constName == "" {
		m.problem("%s: no constant of package calls has this name", where)
	}
	if c.Doc == "" || c.Go == "" {
		m.problem("%s: Doc and Go are required", where)
	}
	if c.Args == nil || reflect.TypeOf(c.Args).Kind() != reflect.Struct || c.Answer == nil {
		m.problem("%s: Args must be a struct (calls.Empty for none) and Answer set", where)
		return
	}
	x.args, x.answer = reflect.TypeOf(c.Args), reflect.TypeOf(c.Answer)
	m.collect(x.args)
	m.collect(x.answer)
	for _, f := range jsonFields(x.args) {
		x.fields[jsonName(f)] = f
	}
	if !slices.Contains(results, c.Result) {
		m.problem("%s: Result %q is none of calls.As*", where, c.Result.JS)
	}
	var order []string // the JSON fields the verb fills, as it sends them
	for _, p := range c.Params {
		f, ok := x.fields[cmp.Or(p.Field, p.Name)]
		switch {
		case !ok:
			m.problem("%s: param %s fills no field of %s", where, p.Name, x.args.Name())
		case p.JS == "" && f.Type.Kind() != reflect.String && !isNumber(f.Type):
			m.problem("%s: param %s is a %s; give it a JS kind (calls.Arg)", where, p.Name, f.Type)
		case p.JS != "" && argTS[p.JS].ts == "":
			m.problem("%s: param %s has an unknown JS kind %q", where, p.Name, p.JS)
		case slices.Contains(jsReserved, p.Name):
			m.problem("%s: param %s would shadow the prelude's %s", where, p.Name, p.Name)
		}
		order = append(order, cmp.Or(p.Field, p.Name))
	}
	for _, o := range c.Options {
		f, ok := x.fields[o.Name]
		if !ok {
			m.problem("%s: option %s is no field of %s", where, o.Name, x.args.Name())
			continue
		}
		if !jsonOmitEmpty(f) {
			m.problem("%s: option %s: its field must be omitempty (left out, the host applies the default)", where, o.Name)
		}
		switch o.Default.(type) {
		case nil:
		case int:
			if !isNumber(f.Type) {
				m.problem("%s: option %s: an int default for a %s", where, o.Name, f.Type)
			}
		case string:
			if f.Type.Kind() != reflect.String {
				m.problem("%s: option %s: a string default for a %s", where, o.Name, f.Type)
			}
		default:
			m.problem("%s: option %s: a default is an int or a string, not %T", where, o.Name, o.Default)
		}
		order = append(order, o.Name)
	}
	var fieldOrder []string
	for _, f := range jsonFields(x.args) {
		if slices.Contains(order, jsonName(f)) {
			fieldOrder = append(fieldOrder, jsonName(f))
		}
	}
	if !slices.Equal(order, fieldOrder) {
		m.problem("%s: params then options must follow %s's field order (%s), not %s", where, x.args.Name(),
			strings.Join(fieldOrder, ", "), strings.Join(order, ", "))
	}
	if (c.GoOpts == "") != (len(c.Options) == 0) {
		m.problem("%s: GoOpts names the options struct of a call with options, and only then", where)
	}
	m.calls = append(m.calls, x)
}

func argTSOf(params []calls.Param) string {
	var s string
	for _, p := range params {
		s += argTS[p.JS].ts
	}
	return s
}

// checkShared holds calls that share a Go options struct to the same
// options.
func (m *model) checkShared() {
	first := map[string]*call{}
	for _, c := range m.calls {
		if c.GoOpts == "" {
			continue
		}
		f, ok := first[c.GoOpts]
		if !ok {
			first[c.GoOpts] = c
			continue
		}
		same := len(f.Options) == len(c.Options)
		for i := 0; same && i < len(c.Options); i++ {
			a, b := f.Options[i], c.Options[i]
			same = a == b && f.fields[a.Name].Type == c.fields[b.Name].Type
		}
		if !same {
			m.problem("%q: shares %s with %q but not its options", c.Name, c.GoOpts, f.Name)
		}
	}
}

// collect records the named types of package calls t reaches.
func (m *model) collect(t reflect.Type) {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[calls.Empty]().PkgPath() || m.typesOf[t.Name()] != nil {
		return
	}
	m.typesOf[t.Name()] = t
	for i := range t.NumField() {
		m.collect(t.Field(i).Type)
	}
}

// jsonFields answers a struct's fields as JSON sees them: embedded
// structs' fields in place, unexported and "-" fields left out.
func jsonFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() || f.Tag.Get("json") == "-" {
			continue
		}
		out = append(out, f)
	}
	return out
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return cmp.Or(name, f.Name)
}

func jsonOmitEmpty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}

func isNumber(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

var rawMessage = reflect.TypeFor[json.RawMessage]()
