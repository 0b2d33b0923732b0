package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FileInfo describes one filesystem entry. mode is the permission bits written as octal
// digits in a decimal integer (0755 is 755), as execd does.
type FileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"`
}

// idNames caches uid/gid → name lookups; /etc/passwd rarely changes and listings
// would otherwise parse it once per entry.
var idNames = struct {
	sync.Mutex
	users, groups map[uint32]string
}{users: map[uint32]string{}, groups: map[uint32]string{}}

func userName(uid uint32) string {
	return cachedName(idNames.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func groupName(gid uint32) string {
	return cachedName(idNames.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

// cachedName answers the name of a uid or gid from names (one of idNames' maps),
// asking lookup once per id; an id lookup cannot name stays its number.
func cachedName(names map[uint32]string, id uint32, lookup func(id string) (string, error)) string {
	idNames.Lock()
	defer idNames.Unlock()
	if n, ok := names[id]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(id), 10)
	if name, err := lookup(n); err == nil {
		n = name
	}
	names[id] = n
	return n
}

// lookupUID resolves a user name (or numeric id) to a uid.
func lookupUID(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("unknown owner %q: %w", name, errBadRequest)
	}
	return strconv.Atoi(u.Uid)
}

// lookupGID resolves a group name (or numeric id) to a gid.
func lookupGID(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("unknown group %q: %w", name, errBadRequest)
	}
	return strconv.Atoi(g.Gid)
}

func modeDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

// parseModeDigits reads a mode written as octal digits in a decimal integer (755).
func parseModeDigits(v int) (fs.FileMode, error) {
	m, err := strconv.ParseUint(strconv.Itoa(v), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %d is not an octal permission like 755: %w", v, errBadRequest)
	}
	return fs.FileMode(m), nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "other"
	}
}

// describe builds the FileInfo of p from its lstat result.
func describe(p string, fi fs.FileInfo) FileInfo {
	info := FileInfo{
		Path: p, Type: fileType(fi.Mode()), Size: fi.Size(),
		ModifiedAt: fi.ModTime().UTC(), CreatedAt: fi.ModTime().UTC(), Mode: modeDigits(fi.Mode()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Owner, info.Group = userName(st.Uid), groupName(st.Gid)
		info.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx); err == nil && stx.Mask&unix.STATX_BTIME != 0 {
		info.CreatedAt = time.Unix(stx.Btime.Sec, int64(stx.Btime.Nsec)).UTC()
	}
	return info
}

func queryPaths(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 || paths[0] == "" {
		writeError(w, http.StatusBadRequest, CodeMissingQuery, "missing query parameter path")
		return nil, false
	}
	return paths, true
}

func (s *Server) handleFilesInfo(w http.ResponseWriter, r *http.Request) {
	paths, ok := queryPaths(w, r)
	if !ok {
		return
	}
	out := make(map[string]FileInfo, len(paths))
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			writeFSError(w, err)
			return
		}
		out[p] = describe(p, fi)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleRemoveFiles(w http.ResponseWriter, r *http.Request) {
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
		if fi.IsDir() {
			writeError(w, http.StatusBadRequest, CodeIsADirectory, p+" is a directory; use DELETE /directories")
			return
		}
		if err := os.Remove(p); err != nil {
			writeFSError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// permission is the body of one entry of POST /files/permissions and POST /directories.
type permission struct {
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  *int   `json:"mode,omitempty"`
}

// apply sets mode and ownership of p; a symlink is changed itself, never its target.
func (pm permission) apply(p string) error {
	if pm.Mode != nil {
		mode, err := parseModeDigits(*pm.Mode)
		if err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	if pm.Owner != "" || pm.Group != "" {
		uid, gid := -1, -1
		var err error
		if pm.Owner != "" {
			if uid, err = lookupUID(pm.Owner); err != nil {
				return err
			}
		}
		if pm.Group != "" {
			if gid, err = lookupGID(pm.Group); err != nil {
				return err
			}
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *Server) handlePermissions(w http.ResponseWriter, r *http.Request) {
	var req map[string]permission
	if !decodeJSON(w, r, &req) {
		return
	}
	for _, p := range sortedKeys(req) {
		if _, err := os.Lstat(p); err != nil {
			writeFSError(w, err)
			return
		}
		if err := req[p].apply(p); err != nil {
			writeFSError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

type moveItem struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

func (s *Server) handleMove(w http.ResponseWriter, r *http.Request) {
	var req []moveItem
	if !decodeJSON(w, r, &req) {
		return
	}
	for _, it := range req {
		if it.Src == "" || it.Dest == "" {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "src and dest are required")
			return
		}
		if _, err := os.Lstat(it.Src); err != nil {
			writeFSError(w, err)
			return
		}
		if err := movePath(it.Src, it.Dest); err != nil {
			writeFSError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// movePath renames src to dest; across filesystems, where rename cannot work, it copies
// (keeping modes and symlinks) and then removes src, as mv(1) does.
func movePath(src, dest string) error {
	err := os.Rename(src, dest)
	if !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err := copyTree(src, dest); err != nil {
		_ = os.RemoveAll(dest)
		return err
	}
	return os.RemoveAll(src)
}

func copyTree(src, dest string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dest)
	case fi.IsDir():
		if err := os.Mkdir(dest, fi.Mode().Perm()); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dest, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return fmt.Errorf("%s: cannot move a %s across filesystems", src, fi.Mode().Type())
}

// matchGlob matches a slash-separated relative path against a pattern in which "**"
// spans any number of directories. A pattern without a slash matches base names at any
// depth, so "*.py" finds every Python file under the root.
func matchGlob(pattern, rel string) bool {
	if pattern == "" || pattern == "**" {
		return true
	}
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(rel))
		return ok
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchSegments(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchSegments(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	if ok, _ := path.Match(pat[0], name[0]); !ok {
		return false
	}
	return matchSegments(pat[1:], name[1:])
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	root, ok := requiredQuery(w, r, "path")
	if !ok {
		return
	}
	pattern := r.URL.Query().Get("pattern")
	if pattern == "" {
		pattern = "**"
	}
	if _, err := path.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid pattern: "+err.Error())
		return
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
	out := []FileInfo{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Unreadable directories are skipped, not fatal: search is best effort.
			if d != nil && d.IsDir() && p != root {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || r.Context().Err() != nil {
			return r.Context().Err()
		}
		rel, _ := filepath.Rel(root, p)
		if !matchGlob(pattern, filepath.ToSlash(rel)) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			out = append(out, describe(p, info))
		}
		return nil
	})
	writeJSON(w, http.StatusOK, out)
}

type replaceItem struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// replaceResult is one path's entry in the verbose answer of POST /files/replace.
type replaceResult struct {
	ReplacedCount int `json:"replacedCount"`
}

// handleReplace replaces every occurrence of old with new in each named file. With
// ?verbose=true the 200 body maps each path to its replacedCount (0 when nothing
// matched), which the SDKs' replaceContentsDetailed decode; without it the body is empty.
func (s *Server) handleReplace(w http.ResponseWriter, r *http.Request) {
	verbose := false
	if v := r.URL.Query().Get("verbose"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "verbose must be true or false, got "+strconv.Quote(v))
			return
		}
		verbose = b
	}
	var req map[string]replaceItem
	if !decodeJSON(w, r, &req) {
		return
	}
	out := make(map[string]replaceResult, len(req))
	for _, p := range sortedKeys(req) {
		n, err := replaceInFile(p, req[p].Old, req[p].New)
		if err != nil {
			writeFSError(w, err)
			return
		}
		out[p] = replaceResult{ReplacedCount: n}
	}
	if verbose {
		writeJSON(w, http.StatusOK, out)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// replaceInFile rewrites p with every occurrence of old replaced by new, streaming
// through a temporary file beside it, and keeps p's mode and ownership. It returns the
// number of occurrences replaced; with none, p is left untouched (not even its mtime).
func replaceInFile(p, old, new string) (int, error) {
	if old == "" {
		return 0, fmt.Errorf("replace %s: old must not be empty: %w", p, errBadRequest)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	if fi.IsDir() {
		return 0, &os.PathError{Op: "replace", Path: p, Err: syscall.EISDIR}
	}
	in, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".replace-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := streamReplace(tmp, in, []byte(old), []byte(new))
	if err != nil || n == 0 {
		tmp.Close()
		return 0, err
	}
	_ = tmp.Chmod(fi.Mode().Perm())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		_ = tmp.Chown(int(st.Uid), int(st.Gid))
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp.Name(), p)
}

// streamReplace copies r to w replacing old with new, holding at most one buffer plus
// len(old)-1 bytes of carry (a match may straddle two reads). It returns how many
// occurrences it replaced.
func streamReplace(w io.Writer, r io.Reader, old, new []byte) (int, error) {
	buf := make([]byte, 0, 64<<10+len(old))
	chunk := make([]byte, 64<<10)
	count := 0
	for {
		n, rerr := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		for {
			i := bytes.Index(buf, old)
			if i < 0 {
				break
			}
			if _, err := w.Write(buf[:i]); err != nil {
				return count, err
			}
			if _, err := w.Write(new); err != nil {
				return count, err
			}
			count++
			buf = append(buf[:0], buf[i+len(old):]...)
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return count, rerr
			}
			_, err := w.Write(buf)
			return count, err
		}
		if keep := len(old) - 1; len(buf) > keep {
			if _, err := w.Write(buf[:len(buf)-keep]); err != nil {
				return count, err
			}
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		}
	}
}

// uploadMeta is the JSON of a "metadata" part of POST /files/upload.
type uploadMeta struct {
	Path  string `json:"path"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  *int   `json:"mode,omitempty"`
}

// handleUpload reads repeated (metadata, file) part pairs and streams each file to its
// path: parents are created, the file appears atomically, and mode/ownership apply.
// uploadBuffer is the size of the reads from an upload's body and of the writes to the
// file: mime/multipart reads its input 4 KiB at a time, which, straight from the
// connection, is one syscall per 4 KiB both ways.
const uploadBuffer = 1 << 20

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	mr, err := multipartReader(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "expected a multipart/form-data body: "+err.Error())
		return
	}
	// Metadata parts queue up and each file part takes the oldest: this accepts the
	// usual (metadata, file) pairs and also all metadata parts before all files.
	var pending []uploadMeta
	uploaded := 0
	buf := make([]byte, uploadBuffer)
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "read multipart body: "+err.Error())
			return
		}
		switch part.FormName() {
		case "metadata":
			var meta uploadMeta
			if err := json.NewDecoder(io.LimitReader(part, 1<<20)).Decode(&meta); err != nil {
				writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid metadata part: "+err.Error())
				return
			}
			if meta.Path == "" {
				writeError(w, http.StatusBadRequest, CodeInvalidRequest, "metadata part has no path")
				return
			}
			pending = append(pending, meta)
		case "file":
			if len(pending) == 0 {
				writeError(w, http.StatusBadRequest, CodeInvalidRequest, "file part without a preceding metadata part")
				return
			}
			meta := pending[0]
			pending = pending[1:]
			if err := writeUpload(meta, part, buf); err != nil {
				if be := (*uploadBodyError)(nil); errors.As(err, &be) {
					// The client's body broke off or is malformed: its mistake, not ours.
					writeError(w, http.StatusBadRequest, CodeInvalidRequest, "read multipart body: "+be.err.Error())
					return
				}
				writeFSError(w, err)
				return
			}
			uploaded++
		}
		part.Close()
	}
	if len(pending) > 0 {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%d metadata part(s) without a file part", len(pending)))
		return
	}
	if uploaded == 0 {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "no file part in upload")
		return
	}
	addTiming(w, "file-upload", start)
	w.WriteHeader(http.StatusOK)
}

func writeUpload(meta uploadMeta, part *multipart.Part, buf []byte) error {
	dir := filepath.Dir(meta.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(meta.Path); err == nil {
		if fi.IsDir() {
			return &os.PathError{Op: "upload", Path: meta.Path, Err: syscall.EISDIR}
		}
		mode = fi.Mode().Perm()
	}
	if meta.Mode != nil {
		m, err := parseModeDigits(*meta.Mode)
		if err != nil {
			return err
		}
		mode = m
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(meta.Path)+".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := copyInFullWrites(tmp, part, buf); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", meta.Path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := (permission{Owner: meta.Owner, Group: meta.Group}).apply(tmp.Name()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), meta.Path)
}

// multipartReader is http.Request.MultipartReader over a buffered body (uploadBuffer).
func multipartReader(r *http.Request) (*multipart.Reader, error) {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	if mediaType != "multipart/form-data" && mediaType != "multipart/mixed" {
		return nil, fmt.Errorf("content type %s is not multipart/form-data", mediaType)
	}
	boundary := params["boundary"]
	if boundary == "" {
		return nil, errors.New("no multipart boundary")
	}
	return multipart.NewReader(bufio.NewReaderSize(r.Body, uploadBuffer), boundary), nil
}

// copyInFullWrites copies src to dst in writes of len(buf) bytes (the last one
// shorter), however little each read of src yields. (io.CopyBuffer would hand an
// *os.File the reads as they come: one write per 4 KiB multipart read.)
func copyInFullWrites(dst io.Writer, src io.Reader, buf []byte) error {
	for {
		// Not io.ReadFull: it reports a short last read as io.ErrUnexpectedEOF, which is
		// also what a multipart part says when the body breaks off.
		n := 0
		var err error
		for n < len(buf) && err == nil {
			var m int
			m, err = src.Read(buf[n:])
			n += m
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &uploadBodyError{err}
		}
	}
}

// uploadBodyError is a failure to read an upload's body (as opposed to writing the file).
type uploadBodyError struct{ err error }

func (e *uploadBodyError) Error() string { return "read upload body: " + e.err.Error() }
func (e *uploadBodyError) Unwrap() error { return e.err }

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p, ok := requiredQuery(w, r, "path")
	if !ok {
		return
	}
	lines, ok := lineWindowQuery(w, r)
	if !ok {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		writeFSError(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeFSError(w, err)
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, CodeIsADirectory, p+" is a directory")
		return
	}
	if lines != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		addTiming(w, "file-open", start)
		w.WriteHeader(http.StatusOK)
		_ = copyLines(w, f, lines.first, lines.count)
		return
	}
	if rng := r.Header.Get("Range"); rng != "" && !rangeSatisfiable(rng, fi.Size()) {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", fi.Size()))
		writeError(w, http.StatusRequestedRangeNotSatisfiable, CodeRangeNotSatisfy, "range "+rng+" not satisfiable for a file of "+strconv.FormatInt(fi.Size(), 10)+" bytes")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(filepath.Base(p)))
	addTiming(w, "file-open", start)
	// ServeContent streams from the file and implements Range (206) itself.
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// lineWindow is a line-based read: count lines (all when 0) from line first (1-based).
type lineWindow struct{ first, count int64 }

// lineWindowQuery reads a download's offset (first line, 1-based, default 1) and limit
// (number of lines, default all). It answers nil when neither is given (a byte read), and
// refuses the request when either is not a positive integer or comes with a Range header.
func lineWindowQuery(w http.ResponseWriter, r *http.Request) (*lineWindow, bool) {
	q := r.URL.Query()
	if !q.Has("offset") && !q.Has("limit") {
		return nil, true
	}
	if r.Header.Get("Range") != "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "offset/limit (lines) and a Range header (bytes) are mutually exclusive")
		return nil, false
	}
	win := &lineWindow{first: 1}
	for _, param := range []struct {
		name string
		dst  *int64
	}{{"offset", &win.first}, {"limit", &win.count}} {
		if !q.Has(param.name) {
			continue
		}
		n, err := strconv.ParseInt(q.Get(param.name), 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%s must be a positive integer (lines, the first is 1), got %q", param.name, q.Get(param.name)))
			return nil, false
		}
		*param.dst = n
	}
	return win, true
}

// copyLines writes count lines (all when 0) of src from line first (1-based), each with
// its line ending as in the file.
func copyLines(dst io.Writer, src io.Reader, first, count int64) error {
	br := bufio.NewReaderSize(src, 64<<10)
	for line := int64(1); count == 0 || line < first+count; {
		chunk, err := br.ReadSlice('\n')
		if line >= first && len(chunk) > 0 {
			if _, werr := dst.Write(chunk); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
			line++
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the buffer: the rest of it comes with the next read.
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
	return nil
}

// rangeSatisfiable reports whether a bytes= Range header selects at least one byte of a
// file of size bytes. Malformed headers count as satisfiable: ServeContent then answers
// them as HTTP says (it ignores what it cannot parse).
func rangeSatisfiable(h string, size int64) bool {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return true
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		a, b, ok := strings.Cut(part, "-")
		if !ok {
			return true
		}
		if a == "" {
			n, err := strconv.ParseInt(b, 10, 64)
			if err != nil || (n > 0 && size > 0) {
				return true
			}
			continue
		}
		start, err := strconv.ParseInt(a, 10, 64)
		if err != nil || start < size {
			return true
		}
	}
	return false
}
