package envd

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"
)

// A file's metadata are its extended attributes in metadataPrefix (the user namespace,
// so any file owner may have them): uploads set them from X-Metadata-<key> headers,
// keys lowercased, and every EntryInfo reports them without the prefix.
const (
	metadataPrefix       = "user.e2b."
	metadataHeaderPrefix = "X-Metadata-"
)

// metadataFromHeader collects the X-Metadata-* headers of an upload (the first value of
// each; an empty key is dropped); nil when there are none.
func metadataFromHeader(h http.Header) map[string]string {
	var out map[string]string
	for name, values := range h {
		if len(name) <= len(metadataHeaderPrefix) || !strings.EqualFold(name[:len(metadataHeaderPrefix)], metadataHeaderPrefix) || len(values) == 0 {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.ToLower(name[len(metadataHeaderPrefix):])] = values[0]
	}
	return out
}

// writeMetadata stores md on the file at path.
func writeMetadata(path string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Setxattr(path, metadataPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return fmt.Errorf("store metadata on %s: the file system has no extended attributes: %w", path, err)
			}
			return fmt.Errorf("store metadata %q on %s: %w", k, path, err)
		}
	}
	return nil
}

// readMetadata returns the metadata of the entry at path (not following a symlink);
// nil when it has none or the file system keeps none.
func readMetadata(path string) map[string]string {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataPrefix)
		if !ok || key == "" {
			continue
		}
		n, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(path, name, val); err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:n])
	}
	return out
}
