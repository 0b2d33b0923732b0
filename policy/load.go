package policy

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
)

//go:embed rego/*.rego
var defaultRego embed.FS

// Module origins.
const (
	OriginDefault  = "default"
	OriginOperator = "operator"
)

// defaultPrefix names embedded modules so that they never collide with an
// operator's relative paths.
const defaultPrefix = "default/"

// Module is one Rego source in force.
type Module struct {
	// Name is "default/<file>" for an embedded module and the path relative
	// to Options.Dir (slash-separated) for an operator's.
	Name    string `json:"name"`
	Origin  string `json:"origin"`
	Package string `json:"package"`
	// Overrides names the default module this one replaces, if any.
	Overrides string `json:"overrides,omitempty"`
	Source    string `json:"source"`
}

// sourceSet is everything one policy version is built from.
type sourceSet struct {
	modules []Module               // in force, sorted by name
	parsed  map[string]*ast.Module // by Module.Name
	data    map[string]any         // operator data documents
}

func isTestFile(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// overrideKey is the identity that lets an operator module replace a default:
// same package, same file name.
func overrideKey(m *ast.Module, name string) string {
	return m.Package.Path.String() + "|" + path.Base(name)
}

// parseModule parses Rego v1 source; the name appears in error locations.
func parseModule(name, src string) (*ast.Module, error) {
	return ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
}

// loadSources reads the embedded modules and the operator's directory (when
// dir is not empty), applying the override rule. extras add or replace
// operator modules without touching the disk, in order, a later one winning
// over an earlier one of the same name (stored overrides, then an editor's
// unsaved changes).
func loadSources(dir string, withTests bool, extras []Module) (sourceSet, error) {
	set := sourceSet{parsed: map[string]*ast.Module{}, data: map[string]any{}}

	var operator []Module
	operatorParsed := map[string]*ast.Module{}
	if dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return set, fmt.Errorf("policy directory: %w", err)
		}
		// Loading through an fs.FS rooted at dir names every file by its
		// path relative to dir, in modules and errors alike.
		loaded, err := loader.NewFileLoader().
			WithFS(os.DirFS(dir)).
			WithRegoVersion(ast.RegoV1).
			WithProcessAnnotation(true).
			Filtered([]string{"."}, skipNonPolicyFiles)
		if err != nil {
			return set, fmt.Errorf("load policy directory %s: %w", dir, err)
		}
		set.data = loaded.Documents
		for _, rf := range loaded.Modules {
			name := path.Clean(filepath.ToSlash(rf.Name))
			file := filepath.Join(dir, filepath.FromSlash(name))
			if !withTests && isTestFile(name) {
				continue
			}
			if strings.HasPrefix(name, defaultPrefix) {
				return set, fmt.Errorf("policy file %s: the directory name %q is reserved for the default modules", file, strings.TrimSuffix(defaultPrefix, "/"))
			}
			operator = append(operator, Module{Name: name, Origin: OriginOperator, Source: string(rf.Raw)})
			operatorParsed[name] = rf.Parsed
		}
	}
	for _, extra := range extras {
		if !withTests && isTestFile(extra.Name) {
			continue
		}
		parsed, err := parseModule(extra.Name, extra.Source)
		if err != nil {
			return set, err
		}
		origin := extra.Origin
		if origin == "" {
			origin = OriginOperator
		}
		operator = slices.DeleteFunc(operator, func(m Module) bool { return m.Name == extra.Name })
		operator = append(operator, Module{Name: extra.Name, Origin: origin, Source: extra.Source})
		operatorParsed[extra.Name] = parsed
	}

	overridden := map[string]string{} // override key → operator module name
	for _, m := range operator {
		overridden[overrideKey(operatorParsed[m.Name], m.Name)] = m.Name
	}

	entries, err := fs.ReadDir(defaultRego, "rego")
	if err != nil {
		return set, fmt.Errorf("read embedded policy: %w", err)
	}
	overrides := map[string]string{} // operator module name → default it replaces
	for _, entry := range entries {
		if !withTests && isTestFile(entry.Name()) {
			continue
		}
		raw, err := defaultRego.ReadFile("rego/" + entry.Name())
		if err != nil {
			return set, fmt.Errorf("read embedded policy %s: %w", entry.Name(), err)
		}
		name := defaultPrefix + entry.Name()
		parsed, err := parseModule(name, string(raw))
		if err != nil {
			return set, fmt.Errorf("embedded policy: %w", err)
		}
		if by, ok := overridden[overrideKey(parsed, name)]; ok {
			overrides[by] = name
			continue
		}
		set.modules = append(set.modules, Module{Name: name, Origin: OriginDefault, Package: packageName(parsed), Source: string(raw)})
		set.parsed[name] = parsed
	}
	for _, m := range operator {
		m.Package = packageName(operatorParsed[m.Name])
		m.Overrides = overrides[m.Name]
		set.modules = append(set.modules, m)
		set.parsed[m.Name] = operatorParsed[m.Name]
	}
	slices.SortFunc(set.modules, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })
	return set, nil
}

func packageName(m *ast.Module) string {
	return strings.TrimPrefix(m.Package.Path.String(), "data.")
}

// skipNonPolicyFiles keeps .rego, .json, .yaml and .yml files and drops
// hidden files and directories (editors' swap files, our own temp files).
func skipNonPolicyFiles(_ string, info fs.FileInfo, depth int) bool {
	name := info.Name()
	if depth > 0 && strings.HasPrefix(name, ".") {
		return true
	}
	if info.IsDir() {
		return false
	}
	switch filepath.Ext(name) {
	case ".rego", ".json", ".yaml", ".yml":
		return false
	}
	return true
}

// mergeData lays the platform data over the operator's documents at
// data.sandgate.platform, platform keys winning.
func mergeData(docs map[string]any, platform map[string]any) map[string]any {
	out := deepCopy(docs).(map[string]any)
	if len(platform) == 0 {
		return out
	}
	sg, _ := out["sandgate"].(map[string]any)
	if sg == nil {
		sg = map[string]any{}
		out["sandgate"] = sg
	}
	existing, _ := sg["platform"].(map[string]any)
	if existing == nil {
		existing = map[string]any{}
	}
	for k, v := range platform {
		existing[k] = v
	}
	sg["platform"] = existing
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, v := range x {
			out[k] = deepCopy(v)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = deepCopy(v)
		}
		return out
	default:
		return v
	}
}

// digest identifies a policy version by its modules and data.
func digest(set sourceSet, data map[string]any) (string, error) {
	h := sha256.New()
	for _, m := range set.modules {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", m.Name, len(m.Source), m.Source)
	}
	raw, err := json.Marshal(data) // map keys are sorted: stable
	if err != nil {
		return "", fmt.Errorf("encode policy data: %w", err)
	}
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// jsonRoundTrip turns Go values (structs, typed slices) into the plain JSON
// types the OPA store expects.
func jsonRoundTrip(in map[string]any) (map[string]any, error) {
	if in == nil {
		return map[string]any{}, nil
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// validatePlatformData rejects platform target lists the enforcer could not
// apply, so that a typo in the configuration fails at start, not at create.
func validatePlatformData(platform map[string]any) error {
	var errs []error
	for _, key := range []string{"gateway_addresses", "always_deny", "always_allow"} {
		v, ok := platform[key]
		if !ok || v == nil {
			continue
		}
		list, ok := v.([]any)
		if !ok {
			errs = append(errs, fmt.Errorf("platform data %s must be a list of targets", key))
			continue
		}
		for i, item := range list {
			s, ok := item.(string)
			if !ok {
				errs = append(errs, fmt.Errorf("platform data %s[%d] must be a string", key, i))
				continue
			}
			if _, err := NormalizeEgressTarget(s); err != nil {
				errs = append(errs, fmt.Errorf("platform data %s[%d]: %w", key, i, err))
			}
		}
	}
	if v, ok := platform["default_action"]; ok && v != ActionAllow && v != ActionDeny {
		errs = append(errs, fmt.Errorf("platform data default_action must be allow or deny"))
	}
	for _, key := range []string{"suspended_tenants", "denied_images", "allowed_registries", "volume_host_prefixes"} {
		if v, ok := platform[key]; ok && v != nil {
			if _, isList := v.([]any); !isList {
				errs = append(errs, fmt.Errorf("platform data %s must be a list", key))
			}
		}
	}
	if v, ok := platform["max_rules"]; ok {
		if n, isNumber := asNumber(v); !isNumber || n < 1 || n != float64(int(n)) {
			errs = append(errs, fmt.Errorf("platform data max_rules must be a whole number of at least 1"))
		}
	}
	return errors.Join(errs...)
}

// dirFingerprint summarizes the files a load would read, cheaply, so that
// Watch reloads only when something changed.
func dirFingerprint(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		depth := 0
		if p != dir {
			depth = 1
		}
		if skipNonPolicyFiles(p, info, depth) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Follow links: a Kubernetes ConfigMap updates its files by
			// swapping the hidden ..data link they point through.
			if target, err := os.Stat(p); err == nil {
				info = target
			}
		}
		if !info.IsDir() {
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, info.Size(), info.ModTime().UnixNano())
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// asNumber reads a JSON number as decoded by encoding/json (float64) or by
// OPA's loader (json.Number).
func asNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
