package gateway

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// ReservedMetadataPrefix marks metadata keys that only sandgate writes.
const ReservedMetadataPrefix = "sandgate.io/"

var (
	labelNameRe   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefixRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validateMetadata applies Kubernetes label rules to keys (optional DNS prefix + "/" +
// name) and values, and refuses keys under the reserved prefixes.
func validateMetadata(md map[string]string, allowReserved bool) error {
	for k, v := range md {
		if err := validateMetadataKey(k, allowReserved); err != nil {
			return err
		}
		if v != "" && (len(v) > 63 || !labelNameRe.MatchString(v)) {
			return Errorf(KindInvalid, CodeInvalidMetadata, "metadata value %q of key %q: must be at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", v, k)
		}
	}
	return nil
}

func validateMetadataKey(k string, allowReserved bool) error {
	if !allowReserved && (strings.HasPrefix(k, ReservedMetadataPrefix) || strings.HasPrefix(k, "opensandbox.io/")) {
		return Errorf(KindInvalid, CodeInvalidMetadata, "metadata key %q: the prefixes %q and %q are reserved", k, ReservedMetadataPrefix, "opensandbox.io/")
	}
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !labelPrefixRe.MatchString(prefix) {
			return Errorf(KindInvalid, CodeInvalidMetadata, "metadata key %q: prefix %q must be a lowercase DNS subdomain", k, prefix)
		}
		name = rest
	}
	if name == "" || len(name) > 63 || !labelNameRe.MatchString(name) {
		return Errorf(KindInvalid, CodeInvalidMetadata, "metadata key %q: name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit", k)
	}
	return nil
}

// ParseCPU turns "500m", "1", "0.5" into millicores.
func ParseCPU(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if m, ok := strings.CutSuffix(s, "m"); ok {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("cpu %q: want millicores like \"500m\" or cores like \"1\"", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || math.IsInf(f, 0) || f > 1024 {
		return 0, fmt.Errorf("cpu %q: want millicores like \"500m\" or cores like \"1\"", s)
	}
	return int64(math.Round(f * 1000)), nil
}

var memUnits = []struct {
	suffix string
	mult   int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1000}, {"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000}, {"T", 1000 * 1000 * 1000 * 1000},
}

// ParseMemory turns "512Mi", "2Gi", "1G", "1048576" into bytes.
func ParseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	num := s
	for _, u := range memUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || math.IsInf(f, 0) || f*float64(mult) > float64(1<<50) {
		return 0, fmt.Errorf("memory %q: want a quantity like \"512Mi\" or \"2Gi\"", s)
	}
	bytes := int64(f * float64(mult))
	if bytes < 6<<20 {
		return 0, fmt.Errorf("memory %q: at least 6Mi is needed to start a sandbox", s)
	}
	return bytes, nil
}
