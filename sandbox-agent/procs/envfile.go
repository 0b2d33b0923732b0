package procs

import (
	"os"
	"strings"
)

// EnvFileVar names the environment file of a sandbox (OpenSandbox's EXECD_ENVS): every
// process the agent starts gets the variable, and the KEY=VALUE entries of the file it
// names when the process starts. The SDKs' set_env appends to it, so a variable set
// that way reaches every later command, session and terminal.
const EnvFileVar = "EXECD_ENVS"

// ParseEnvFile reads the entries of an environment file, later entries winning. Blank
// lines and lines starting with # are skipped, as are malformed and unterminated ones:
//
//	KEY=value     trimmed; $NAME and ${NAME} expanded with lookup
//	KEY="v a l"   kept as written; \n \r \t \\ \" unescaped; $NAME expanded
//	KEY='v a l'   literal, may span lines (the lossless form)
func ParseEnvFile(data string, lookup func(string) string) map[string]string {
	out := map[string]string{}
	expand := func(s string) string { return os.Expand(s, lookup) }
	for len(data) > 0 {
		line, rest, _ := strings.Cut(data, "\n")
		data = rest
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !validEnvKey(key) {
			continue
		}
		value = strings.TrimLeft(value, " \t")
		switch {
		case strings.HasPrefix(value, "'"):
			body := value[1:]
			// The closing quote may be on a later line.
			if end := strings.IndexByte(body, '\''); end >= 0 {
				out[key] = body[:end]
				continue
			}
			whole := body + "\n" + data
			end := strings.IndexByte(whole, '\'')
			if end < 0 {
				return out
			}
			out[key] = whole[:end]
			_, data, _ = strings.Cut(whole[end:], "\n")
		case strings.HasPrefix(value, `"`):
			if v, ok := unquoteDouble(value[1:]); ok {
				out[key] = expand(v)
			}
		default:
			out[key] = expand(strings.TrimSpace(value))
		}
	}
	return out
}

// unquoteDouble reads a double-quoted value up to its closing quote.
func unquoteDouble(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), true
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '\\', '"':
				b.WriteByte(s[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

func validEnvKey(k string) bool {
	if k == "" || strings.HasPrefix(k, reservedPrefix) {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
