package sandgate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// FileInfo describes one file in a sandbox. Mode is the permission bits.
type FileInfo struct {
	Path       string      `json:"path"`
	Type       string      `json:"type"` // file, directory, symlink or other
	Size       int64       `json:"size"`
	ModifiedAt time.Time   `json:"modified_at"`
	CreatedAt  time.Time   `json:"created_at"`
	Owner      string      `json:"owner"`
	Group      string      `json:"group"`
	Mode       fs.FileMode `json:"-"`
}

// UnmarshalJSON reads the agent's mode, octal digits written as a decimal number (644).
func (fi *FileInfo) UnmarshalJSON(data []byte) error {
	type plain FileInfo
	var w struct {
		plain
		Mode int `json:"mode"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*fi = FileInfo(w.plain)
	m, _ := strconv.ParseUint(strconv.Itoa(w.Mode), 8, 32)
	fi.Mode = fs.FileMode(m)
	return nil
}

// MarshalJSON writes the mode the way the agent does.
func (fi FileInfo) MarshalJSON() ([]byte, error) {
	type plain FileInfo
	return json.Marshal(struct {
		plain
		Mode int `json:"mode"`
	}{plain(fi), modeDigits(fi.Mode)})
}

func modeDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

// Upload streams r into path in the sandbox (parents created) with permission mode
// (0 keeps the agent's default). Nothing is buffered: any size works.
func (a *Agent) Upload(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		meta := map[string]any{"path": path}
		if mode != 0 {
			meta["mode"] = modeDigits(mode)
		}
		err := func() error {
			mp, err := mw.CreateFormFile("metadata", "metadata.json")
			if err != nil {
				return err
			}
			if err := json.NewEncoder(mp).Encode(meta); err != nil {
				return err
			}
			fp, err := mw.CreateFormFile("file", "file")
			if err != nil {
				return err
			}
			if _, err := io.Copy(fp, r); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := a.request(ctx, http.MethodPost, "/files/upload", nil, pr)
	if err != nil {
		pr.CloseWithError(err)
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := a.c.send(req)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if the server answered early
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// WriteFile writes data to path in the sandbox.
func (a *Agent) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return a.Upload(ctx, path, bytesReader(data), mode)
}

// Download streams a file of the sandbox; the caller closes the reader. size is -1
// when the agent did not say.
func (a *Agent) Download(ctx context.Context, path string) (body io.ReadCloser, size int64, err error) {
	return a.DownloadRange(ctx, path, 0)
}

// DownloadRange streams a file from byte offset on (to resume a transfer).
func (a *Agent) DownloadRange(ctx context.Context, path string, offset int64) (io.ReadCloser, int64, error) {
	req, err := a.request(ctx, http.MethodGet, "/files/download", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, 0, err
	}
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := a.c.send(req)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// ReadFile reads a whole file of the sandbox.
func (a *Agent) ReadFile(ctx context.Context, path string) ([]byte, error) {
	body, _, err := a.Download(ctx, path)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// Stat describes files of the sandbox, by path.
func (a *Agent) Stat(ctx context.Context, paths ...string) (map[string]FileInfo, error) {
	out := map[string]FileInfo{}
	err := a.do(ctx, http.MethodGet, "/files/info", url.Values{"path": paths}, nil, &out)
	return out, err
}

// ListDir lists a directory down to depth levels (1: its entries).
func (a *Agent) ListDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out []FileInfo
	err := a.do(ctx, http.MethodGet, "/directories/list", q, nil, &out)
	return out, err
}

// Search finds files under path matching a glob pattern ("" matches all, "**/*.go").
func (a *Agent) Search(ctx context.Context, path, pattern string) ([]FileInfo, error) {
	q := url.Values{"path": {path}}
	if pattern != "" {
		q.Set("pattern", pattern)
	}
	var out []FileInfo
	err := a.do(ctx, http.MethodGet, "/files/search", q, nil, &out)
	return out, err
}

// Replacement replaces every Old in a file with New.
type Replacement struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Replace applies replacements (path → replacement) and returns how many each file got.
func (a *Agent) Replace(ctx context.Context, replacements map[string]Replacement) (map[string]int, error) {
	var out map[string]struct {
		ReplacedCount int `json:"replacedCount"`
	}
	if err := a.do(ctx, http.MethodPost, "/files/replace", url.Values{"verbose": {"true"}}, replacements, &out); err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(out))
	for p, r := range out {
		counts[p] = r.ReplacedCount
	}
	return counts, nil
}

// Remove deletes files.
func (a *Agent) Remove(ctx context.Context, paths ...string) error {
	return a.do(ctx, http.MethodDelete, "/files", url.Values{"path": paths}, nil, nil)
}

// Move renames src to dest.
func (a *Agent) Move(ctx context.Context, src, dest string) error {
	return a.do(ctx, http.MethodPost, "/files/mv", nil, []map[string]string{{"src": src, "dest": dest}}, nil)
}

// Chmod sets the permission bits of path.
func (a *Agent) Chmod(ctx context.Context, path string, mode fs.FileMode) error {
	return a.do(ctx, http.MethodPost, "/files/permissions", nil, map[string]any{path: map[string]any{"mode": modeDigits(mode)}}, nil)
}

// Mkdir creates a directory and its parents.
func (a *Agent) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o755
	}
	return a.do(ctx, http.MethodPost, "/directories", nil, map[string]any{path: map[string]any{"mode": modeDigits(mode)}}, nil)
}

// RemoveAll deletes a directory and everything below it.
func (a *Agent) RemoveAll(ctx context.Context, path string) error {
	return a.do(ctx, http.MethodDelete, "/directories", url.Values{"path": {path}}, nil, nil)
}
