package agent

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// handleListDirectory lists entries under path down to depth levels (1 = direct
// children). Symlinks are reported, never followed.
func (s *Server) handleListDirectory(w http.ResponseWriter, r *http.Request) {
	root, ok := requiredQuery(w, r, "path")
	if !ok {
		return
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "depth must be a positive integer")
			return
		}
		depth = n
	}
	fi, err := os.Stat(root)
	if err != nil {
		writeFSError(w, err)
		return
	}
	if !fi.IsDir() {
		writeError(w, http.StatusBadRequest, CodeNotADirectory, root+" is not a directory")
		return
	}
	if _, err := os.ReadDir(root); err != nil {
		writeFSError(w, err)
		return
	}
	clean := filepath.Clean(root)
	out := []FileInfo{}
	_ = filepath.WalkDir(clean, func(p string, d fs.DirEntry, err error) error {
		if p == clean {
			return nil
		}
		if ctxErr := r.Context().Err(); ctxErr != nil {
			return ctxErr
		}
		rel, _ := filepath.Rel(clean, p)
		level := strings.Count(rel, string(filepath.Separator)) + 1
		if d != nil {
			if info, ierr := d.Info(); ierr == nil {
				out = append(out, describe(p, info))
			}
		}
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() && level >= depth {
			return fs.SkipDir
		}
		return nil
	})
	writeJSON(w, http.StatusOK, out)
}

// handleMakeDirs creates each directory with its parents (mkdir -p) and applies the
// requested mode (exactly, regardless of the umask) and ownership.
func (s *Server) handleMakeDirs(w http.ResponseWriter, r *http.Request) {
	var req map[string]permission
	if !decodeJSON(w, r, &req) {
		return
	}
	for _, p := range sortedKeys(req) {
		perm := req[p]
		mode := fs.FileMode(0o755)
		if perm.Mode != nil {
			m, err := parseModeDigits(*perm.Mode)
			if err != nil {
				writeFSError(w, err)
				return
			}
			mode = m
		}
		if err := os.MkdirAll(p, mode); err != nil {
			writeFSError(w, err)
			return
		}
		perm.Mode = nil
		if err := os.Chmod(p, mode); err != nil {
			writeFSError(w, err)
			return
		}
		if err := perm.apply(p); err != nil {
			writeFSError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// handleRemoveDirs removes each directory and everything in it (rm -rf).
func (s *Server) handleRemoveDirs(w http.ResponseWriter, r *http.Request) {
	paths, ok := queryPaths(w, r)
	if !ok {
		return
	}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			writeFSError(w, err)
			return
		}
		if !fi.IsDir() {
			writeError(w, http.StatusBadRequest, CodeNotADirectory, p+" is not a directory; use DELETE /files")
			return
		}
		if filepath.Clean(p) == "/" {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "refusing to remove /")
			return
		}
		if err := os.RemoveAll(p); err != nil {
			writeFSError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
