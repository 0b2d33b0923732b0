package agent_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

func q(params ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		v.Add(params[i], params[i+1])
	}
	return "?" + v.Encode()
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixture builds a small tree with unicode, spaces and symlinks.
func fixture(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "alpha")
	writeFile(t, filepath.Join(dir, "sub dir", "ünï cødé.txt"), "unicode")
	writeFile(t, filepath.Join(dir, "sub dir", "nested", "b.go"), "package b")
	writeFile(t, filepath.Join(dir, "target", "inside.txt"), "behind a symlink")
	if err := os.Symlink(filepath.Join(dir, "a.txt"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func currentUser(t testing.TB) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestFilesInfo(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := fixture(t)
	uni := filepath.Join(dir, "sub dir", "ünï cødé.txt")
	var got map[string]agent.FileInfo
	a.mustJSON(http.MethodGet, "/files/info"+q("path", filepath.Join(dir, "a.txt"), "path", uni, "path", filepath.Join(dir, "link"), "path", filepath.Join(dir, "empty")), nil, 200, &got)
	type brief struct {
		Type  string
		Size  int64
		Mode  int
		Owner string
	}
	briefs := map[string]brief{}
	for p, fi := range got {
		if fi.Path != p || fi.ModifiedAt.IsZero() || fi.CreatedAt.IsZero() || fi.Group == "" {
			t.Fatalf("incomplete info for %s: %+v", p, fi)
		}
		b := brief{Type: fi.Type, Size: fi.Size, Mode: fi.Mode, Owner: fi.Owner}
		if fi.Type == "symlink" || fi.Type == "directory" {
			b.Size = 0
		}
		briefs[filepath.Base(p)] = b
	}
	me := currentUser(t)
	want := map[string]brief{
		"a.txt":        {"file", 5, 644, me},
		"ünï cødé.txt": {"file", 7, 644, me},
		"link":         {"symlink", 0, 777, me},
		"empty":        {"directory", 0, 700, me},
	}
	if diff := cmp.Diff(want, briefs); diff != "" {
		t.Fatalf("info (-want +got):\n%s", diff)
	}
	a.wantError(http.MethodGet, "/files/info"+q("path", filepath.Join(dir, "a.txt"), "path", filepath.Join(dir, "missing")), nil, 404, agent.CodeFileNotFound)
	a.wantError(http.MethodGet, "/files/info", nil, 400, agent.CodeMissingQuery)
}

func TestFilesPermissionsMoveDelete(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := fixture(t)
	file := filepath.Join(dir, "a.txt")
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
		check  func(t *testing.T)
	}{
		{"chmod", http.MethodPost, "/files/permissions", map[string]any{file: map[string]any{"mode": 600}}, 200, "", func(t *testing.T) {
			if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v", fi.Mode())
			}
		}},
		{"chown by name", http.MethodPost, "/files/permissions", map[string]any{file: map[string]any{"mode": 640, "owner": "nobody", "group": "nogroup"}}, 200, "", func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			var got map[string]agent.FileInfo
			a.with(t).mustJSON(http.MethodGet, "/files/info"+q("path", file), nil, 200, &got)
			if fi := got[file]; fi.Owner != "nobody" || fi.Group != "nogroup" || fi.Mode != 640 {
				t.Fatalf("info %+v", fi)
			}
		}},
		{"bad mode", http.MethodPost, "/files/permissions", map[string]any{file: map[string]any{"mode": 999}}, 400, agent.CodeInvalidRequest, nil},
		{"unknown owner", http.MethodPost, "/files/permissions", map[string]any{file: map[string]any{"mode": 644, "owner": "no-such-user-xyz"}}, 400, agent.CodeInvalidRequest, nil},
		{"chmod missing", http.MethodPost, "/files/permissions", map[string]any{filepath.Join(dir, "nope"): map[string]any{"mode": 644}}, 404, agent.CodeFileNotFound, nil},
		{"move", http.MethodPost, "/files/mv", []map[string]string{{"src": file, "dest": filepath.Join(dir, "sub dir", "moved ✓.txt")}}, 200, "", func(t *testing.T) {
			if b, err := os.ReadFile(filepath.Join(dir, "sub dir", "moved ✓.txt")); err != nil || string(b) != "alpha" {
				t.Fatalf("moved file: %q %v", b, err)
			}
		}},
		{"move missing source", http.MethodPost, "/files/mv", []map[string]string{{"src": file, "dest": filepath.Join(dir, "x")}}, 404, agent.CodeFileNotFound, nil},
		{"move into missing directory", http.MethodPost, "/files/mv", []map[string]string{{"src": filepath.Join(dir, "sub dir", "moved ✓.txt"), "dest": filepath.Join(dir, "no", "x")}}, 404, agent.CodeFileNotFound, nil},
		{"delete file", http.MethodDelete, "/files" + q("path", filepath.Join(dir, "sub dir", "moved ✓.txt")), nil, 200, "", func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(dir, "sub dir", "moved ✓.txt")); !os.IsNotExist(err) {
				t.Fatalf("still there: %v", err)
			}
		}},
		{"delete symlink not target", http.MethodDelete, "/files" + q("path", filepath.Join(dir, "dirlink")), nil, 200, "", func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(dir, "target", "inside.txt")); err != nil {
				t.Fatalf("target removed: %v", err)
			}
		}},
		{"delete directory refused", http.MethodDelete, "/files" + q("path", filepath.Join(dir, "empty")), nil, 400, agent.CodeIsADirectory, nil},
		{"delete missing", http.MethodDelete, "/files" + q("path", filepath.Join(dir, "nope")), nil, 404, agent.CodeFileNotFound, nil},
		{"delete forbidden", http.MethodDelete, "/files" + q("path", "/proc/version"), nil, 403, agent.CodePermissionDenied, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := a.with(t)
			if tt.code != "" {
				a.wantError(tt.method, tt.path, tt.body, tt.status, tt.code)
			} else {
				a.mustJSON(tt.method, tt.path, tt.body, tt.status, nil)
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
}

func TestFilesSearch(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := fixture(t)
	tests := []struct {
		pattern string
		want    []string
	}{
		{"", []string{"a.txt", "dirlink", "link", "sub dir/nested/b.go", "sub dir/ünï cødé.txt", "target/inside.txt"}},
		{"**", []string{"a.txt", "dirlink", "link", "sub dir/nested/b.go", "sub dir/ünï cødé.txt", "target/inside.txt"}},
		{"*.txt", []string{"a.txt", "sub dir/ünï cødé.txt", "target/inside.txt"}},
		{"*.go", []string{"sub dir/nested/b.go"}},
		{"sub dir/**/*.go", []string{"sub dir/nested/b.go"}},
		{"**/*.txt", []string{"a.txt", "sub dir/ünï cødé.txt", "target/inside.txt"}},
		{"sub dir/*", []string{"sub dir/ünï cødé.txt"}},
		{"*.none", nil},
	}
	for _, tt := range tests {
		t.Run("pattern="+tt.pattern, func(t *testing.T) {
			var got []agent.FileInfo
			a.with(t).mustJSON(http.MethodGet, "/files/search"+q("path", dir, "pattern", tt.pattern), nil, 200, &got)
			var rel []string
			for _, fi := range got {
				r, _ := filepath.Rel(dir, fi.Path)
				rel = append(rel, r)
			}
			sort.Strings(rel)
			if diff := cmp.Diff(tt.want, rel); diff != "" {
				t.Fatalf("search %q (-want +got):\n%s", tt.pattern, diff)
			}
		})
	}
	a.wantError(http.MethodGet, "/files/search"+q("path", filepath.Join(dir, "nope")), nil, 404, agent.CodeFileNotFound)
	a.wantError(http.MethodGet, "/files/search"+q("path", dir, "pattern", "[bad"), nil, 400, agent.CodeInvalidRequest)
}

func TestFilesReplace(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	// The needle straddles the 64 KiB read boundary of the streaming replacer.
	big := strings.Repeat("x", 64<<10-3) + "NEEDLE" + strings.Repeat("y", 100) + "NEEDLE"
	file := filepath.Join(dir, "big.txt")
	writeFile(t, file, big)
	if err := os.Chmod(file, 0o751); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.txt")
	writeFile(t, small, "host=localhost:8080 localhost")
	a.mustJSON(http.MethodPost, "/files/replace", map[string]any{
		file:  map[string]string{"old": "NEEDLE", "new": "pin"},
		small: map[string]string{"old": "localhost", "new": "0.0.0.0"},
	}, 200, nil)
	if b, _ := os.ReadFile(file); string(b) != strings.ReplaceAll(big, "NEEDLE", "pin") {
		t.Fatalf("big file not replaced correctly")
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o751 {
		t.Fatalf("mode changed to %v", fi.Mode())
	}
	if b, _ := os.ReadFile(small); string(b) != "host=0.0.0.0:8080 0.0.0.0" {
		t.Fatalf("small file %q", b)
	}
	a.wantError(http.MethodPost, "/files/replace", map[string]any{small: map[string]string{"old": "", "new": "x"}}, 400, agent.CodeInvalidRequest)
	a.wantError(http.MethodPost, "/files/replace", map[string]any{filepath.Join(dir, "nope"): map[string]string{"old": "a", "new": "b"}}, 404, agent.CodeFileNotFound)
	a.wantError(http.MethodPost, "/files/replace", map[string]any{dir: map[string]string{"old": "a", "new": "b"}}, 400, agent.CodeIsADirectory)
	a.wantError(http.MethodPost, "/files/replace?verbose=maybe", map[string]any{small: map[string]string{"old": "a", "new": "b"}}, 400, agent.CodeInvalidRequest)
	if b, _ := os.ReadFile(small); string(b) != "host=0.0.0.0:8080 0.0.0.0" {
		t.Fatalf("a refused replace changed the file: %q", b)
	}
}

// TestFilesReplaceVerbose: with ?verbose=true the answer counts the replacements per
// path (0, 1 and 3 here), as the SDKs' replaceContentsDetailed decode it; a file with no
// match is not rewritten.
func TestFilesReplaceVerbose(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	none, one, three := filepath.Join(dir, "none.txt"), filepath.Join(dir, "one.txt"), filepath.Join(dir, "three.txt")
	writeFile(t, none, "nothing here")
	writeFile(t, one, "a cat")
	writeFile(t, three, "cat cat\ncat")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(none, old, old); err != nil {
		t.Fatal(err)
	}
	var got map[string]struct {
		ReplacedCount *int `json:"replacedCount"`
	}
	a.mustJSON(http.MethodPost, "/files/replace?verbose=true", map[string]any{
		none:  map[string]string{"old": "cat", "new": "dog"},
		one:   map[string]string{"old": "cat", "new": "dog"},
		three: map[string]string{"old": "cat", "new": "dog"},
	}, 200, &got)
	counts := map[string]int{}
	for p, r := range got {
		if r.ReplacedCount == nil {
			t.Fatalf("%s: no replacedCount in the answer", p)
		}
		counts[p] = *r.ReplacedCount
	}
	if diff := cmp.Diff(map[string]int{none: 0, one: 1, three: 3}, counts); diff != "" {
		t.Fatalf("replacedCount (-want +got):\n%s", diff)
	}
	for p, want := range map[string]string{none: "nothing here", one: "a dog", three: "dog dog\ndog"} {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Fatalf("%s: %q, want %q", p, b, want)
		}
	}
	if fi, _ := os.Stat(none); !fi.ModTime().Equal(old) {
		t.Fatalf("a file with no match was rewritten (mtime %v, want %v)", fi.ModTime(), old)
	}
	// Without verbose the 200 stays empty, as before.
	status, body := a.do(http.MethodPost, "/files/replace", map[string]any{one: map[string]string{"old": "dog", "new": "cat"}})
	if status != 200 || len(body) != 0 {
		t.Fatalf("plain replace: %d %q, want an empty 200", status, body)
	}
}

// uploadPart is one (metadata, file) pair of a multipart upload.
type uploadPart struct {
	meta    map[string]any
	content io.Reader
}

// upload streams parts as a multipart body, the way the SDKs send it: metadata as a
// file part with JSON content, then the file.
func upload(t testing.TB, a *testAgent, parts []uploadPart) (int, []byte) {
	t.Helper()
	return uploadTo(t, a, "/files/upload", parts)
}

// uploadTo is upload to the upload route at path.
func uploadTo(t testing.TB, a *testAgent, path string, parts []uploadPart) (int, []byte) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for _, p := range parts {
			if p.meta != nil {
				h := textproto.MIMEHeader{}
				h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
				h.Set("Content-Type", "application/json")
				w, _ := mw.CreatePart(h)
				_ = json.NewEncoder(w).Encode(p.meta)
			}
			if p.content != nil {
				w, _ := mw.CreateFormFile("file", "blob")
				if _, err := io.Copy(w, p.content); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	resp := a.request(http.MethodPost, path, pr, http.Header{"Content-Type": {mw.FormDataContentType()}})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestFilesUploadDownload(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	p1 := filepath.Join(dir, "new", "deep dir", "script ✓.sh")
	p2 := filepath.Join(dir, "plain.txt")
	status, body := upload(t, a, []uploadPart{
		{map[string]any{"path": p1, "mode": 755}, strings.NewReader("#!/bin/sh\necho hi\n")},
		{map[string]any{"path": p2}, strings.NewReader("0123456789")},
	})
	if status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if fi, err := os.Stat(p1); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("uploaded script: %v %v", fi, err)
	}
	if fi, err := os.Stat(p2); err != nil || fi.Mode().Perm() != 0o644 || fi.Size() != 10 {
		t.Fatalf("uploaded file: %v %v", fi, err)
	}
	t.Run("all metadata before all files", func(t *testing.T) {
		a := a.with(t)
		p3, p4 := filepath.Join(dir, "batch", "one"), filepath.Join(dir, "batch", "two")
		status, body := upload(t, a, []uploadPart{
			{map[string]any{"path": p3}, nil},
			{map[string]any{"path": p4, "mode": 600}, nil},
			{nil, strings.NewReader("first")},
			{nil, strings.NewReader("second")},
		})
		if status != 200 {
			t.Fatalf("upload: %d %s", status, body)
		}
		for p, want := range map[string]string{p3: "first", p4: "second"} {
			if b, err := os.ReadFile(p); err != nil || string(b) != want {
				t.Fatalf("%s: %q %v", p, b, err)
			}
		}
		if fi, _ := os.Stat(p4); fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", fi.Mode())
		}
	})
	t.Run("upload errors", func(t *testing.T) {
		a := a.with(t)
		tests := []struct {
			name   string
			parts  []uploadPart
			status int
		}{
			{"file without metadata", []uploadPart{{nil, strings.NewReader("x")}}, 400},
			{"metadata without path", []uploadPart{{map[string]any{"mode": 644}, strings.NewReader("x")}}, 400},
			{"no file", []uploadPart{{map[string]any{"path": p2}, nil}}, 400},
			{"metadata left over", []uploadPart{{map[string]any{"path": filepath.Join(dir, "left")}, strings.NewReader("x")}, {map[string]any{"path": filepath.Join(dir, "over")}, nil}}, 400},
			{"bad mode", []uploadPart{{map[string]any{"path": p2, "mode": 8}, strings.NewReader("x")}}, 400},
			{"forbidden place", []uploadPart{{map[string]any{"path": "/sys/kernel/sandgate-test"}, strings.NewReader("x")}}, 403},
			{"onto a directory", []uploadPart{{map[string]any{"path": dir}, strings.NewReader("x")}}, 400},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				status, body := upload(t, a, tt.parts)
				if status != tt.status || !contains(body, `"code"`) {
					t.Fatalf("status %d body %s, want %d", status, body, tt.status)
				}
			})
		}
	})
	t.Run("download", func(t *testing.T) {
		a := a.with(t)
		tests := []struct {
			name       string
			path       string
			rng        string
			status     int
			body       string
			contentRng string
		}{
			{"whole", p2, "", 200, "0123456789", ""},
			{"unicode path", p1, "", 200, "#!/bin/sh\necho hi\n", ""},
			{"range", p2, "bytes=2-5", 206, "2345", "bytes 2-5/10"},
			{"open range", p2, "bytes=7-", 206, "789", "bytes 7-9/10"},
			{"suffix range", p2, "bytes=-3", 206, "789", "bytes 7-9/10"},
			{"range past end", p2, "bytes=10-", 416, "", "bytes */10"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				hdr := http.Header{}
				if tt.rng != "" {
					hdr.Set("Range", tt.rng)
				}
				resp := a.request(http.MethodGet, "/files/download"+q("path", tt.path), nil, hdr)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
				}
				if tt.status == 416 {
					if !contains(b, agent.CodeRangeNotSatisfy) {
						t.Fatalf("416 body %s", b)
					}
				} else if string(b) != tt.body {
					t.Fatalf("body %q, want %q", b, tt.body)
				}
				if got := resp.Header.Get("Content-Range"); got != tt.contentRng {
					t.Fatalf("Content-Range %q, want %q", got, tt.contentRng)
				}
				if tt.status == 200 && !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
					t.Fatalf("Content-Disposition %q", resp.Header.Get("Content-Disposition"))
				}
			})
		}
		a.wantError(http.MethodGet, "/files/download"+q("path", filepath.Join(dir, "missing")), nil, 404, agent.CodeFileNotFound)
		a.wantError(http.MethodGet, "/files/download"+q("path", dir), nil, 400, agent.CodeIsADirectory)
		a.wantError(http.MethodGet, "/files/download", nil, 400, agent.CodeMissingQuery)
	})
}

// TestFilesWithIdentity uses the /v1/filesystem/{uid}/{gid} routes: files are created,
// owned and checked as that user, and the agent's other requests, served meanwhile on
// other threads, stay the agent's own.
func TestFilesWithIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	a := newTestAgent(t, agent.Config{})
	// Not t.TempDir: its parent is closed to other users.
	dir, err := os.MkdirTemp("", "sandgate-identity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "root-only")
	writeFile(t, private, "secret")
	if err := os.Chmod(private, 0o600); err != nil {
		t.Fatal(err)
	}
	const as = "/v1/filesystem/1234/2345"
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			p := filepath.Join(dir, fmt.Sprintf("user-%d", i))
			if status, body := uploadTo(t, a, as+"/files/upload", []uploadPart{{map[string]any{"path": p}, strings.NewReader("mine")}}); status != 200 {
				t.Errorf("upload as 1234:2345: %d %s", status, body)
			}
		}()
		go func() {
			defer wg.Done()
			p := filepath.Join(dir, fmt.Sprintf("agent-%d", i))
			if status, body := upload(t, a, []uploadPart{{map[string]any{"path": p}, strings.NewReader("agent")}}); status != 200 {
				t.Errorf("upload: %d %s", status, body)
			}
		}()
	}
	wg.Wait()
	for i := range 8 {
		for name, want := range map[string]string{fmt.Sprintf("user-%d", i): "1234:2345", fmt.Sprintf("agent-%d", i): "0:0"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != want {
				t.Errorf("%s owned by %s, want %s", name, got, want)
			}
		}
	}
	status, body := a.do(http.MethodGet, as+"/files/download"+q("path", filepath.Join(dir, "user-0")), nil)
	if status != 200 || string(body) != "mine" {
		t.Fatalf("download as the owner: %d %s", status, body)
	}
	a.wantError(http.MethodGet, as+"/files/download"+q("path", private), nil, 403, agent.CodePermissionDenied)
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o755); err != nil {
		t.Fatal(err)
	}
	a.wantError(http.MethodPost, as+"/directories", map[string]any{filepath.Join(closed, "x"): map[string]any{"mode": 755}}, 403, agent.CodePermissionDenied)
	a.wantError(http.MethodGet, "/v1/filesystem/x/1/files/info"+q("path", dir), nil, 400, agent.CodeInvalidRequest)
	a.wantError(http.MethodGet, "/v1/filesystem/1/4294967295/files/info"+q("path", dir), nil, 400, agent.CodeInvalidRequest)
	if status, _ := a.do(http.MethodGet, "/files/download"+q("path", private), nil); status != 200 {
		t.Fatalf("the agent's own download after identity requests: %d", status)
	}
}

func TestFilesDownloadLines(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := t.TempDir()
	p := filepath.Join(dir, "lines.txt")
	long := strings.Repeat("x", 200<<10)
	writeFile(t, p, "line 1\nline 2\r\n"+long+"\nline 4\n\nline 6")
	tests := []struct {
		name, offset, limit, want string
	}{
		{"offset and limit", "2", "2", "line 2\r\n" + long + "\n"},
		{"offset alone reads to the end", "4", "", "line 4\n\nline 6"},
		{"limit alone reads from the first line", "", "1", "line 1\n"},
		{"last line without a newline", "6", "5", "line 6"},
		{"past the end", "7", "1", ""},
		{"empty line", "5", "1", "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := []string{"path", p}
			if tt.offset != "" {
				params = append(params, "offset", tt.offset)
			}
			if tt.limit != "" {
				params = append(params, "limit", tt.limit)
			}
			resp := a.request(http.MethodGet, "/files/download"+q(params...), nil, nil)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != tt.want {
				t.Fatalf("status %d body %.80q, want 200 %.80q", resp.StatusCode, b, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q, want text/plain", ct)
			}
		})
	}
	for _, bad := range [][]string{{"offset", "0"}, {"offset", "-1"}, {"limit", "0"}, {"limit", "x"}, {"offset", "1.5"}, {"offset", ""}} {
		a.wantError(http.MethodGet, "/files/download"+q("path", p, bad[0], bad[1]), nil, 400, agent.CodeInvalidRequest)
	}
	resp := a.request(http.MethodGet, "/files/download"+q("path", p, "offset", "1"), nil, http.Header{"Range": {"bytes=0-1"}})
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("lines and Range: status %d, want 400", resp.StatusCode)
	}
	a.wantError(http.MethodGet, "/files/download"+q("path", filepath.Join(dir, "missing"), "offset", "1"), nil, 404, agent.CodeFileNotFound)
}

// TestFilesLargeUploadDownload moves 100 MiB both ways, compares hashes, and checks that
// the heap stays far below the file size (nothing buffers the whole file).
func TestFilesLargeUploadDownload(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MiB transfer")
	}
	a := newTestAgent(t, agent.Config{})
	const size = 100 << 20
	dst := filepath.Join(t.TempDir(), "big.bin")
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	runtime.GC()

	src := io.LimitReader(rand.New(rand.NewSource(42)), size)
	up := sha256.New()
	status, body := upload(t, a, []uploadPart{{map[string]any{"path": dst}, io.TeeReader(src, up)}})
	if status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	resp := a.request(http.MethodGet, "/files/download"+q("path", dst), nil, nil)
	down := sha256.New()
	n, err := io.Copy(down, resp.Body)
	resp.Body.Close()
	close(stop)
	<-sampled
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	if !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Fatal("downloaded content differs from uploaded content")
	}
	if p := peak.Load(); p > 48<<20 {
		t.Fatalf("heap peaked at %d MiB while moving a 100 MiB file", p>>20)
	}
	// A ranged read of the last MiB matches the same bytes of the file.
	resp = a.request(http.MethodGet, "/files/download"+q("path", dst), nil, http.Header{"Range": {fmt.Sprintf("bytes=%d-", size-1<<20)}})
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f, _ := os.Open(dst)
	defer f.Close()
	want := make([]byte, 1<<20)
	_, _ = f.ReadAt(want, size-1<<20)
	if resp.StatusCode != 206 || !bytes.Equal(part, want) {
		t.Fatalf("ranged download: status %d, %d bytes", resp.StatusCode, len(part))
	}
}

func TestDirectories(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	dir := fixture(t)
	list := func(t *testing.T, depth string) []string {
		var got []agent.FileInfo
		path := "/directories/list" + q("path", dir)
		if depth != "" {
			path += "&depth=" + depth
		}
		a.with(t).mustJSON(http.MethodGet, path, nil, 200, &got)
		var out []string
		for _, fi := range got {
			r, _ := filepath.Rel(dir, fi.Path)
			out = append(out, r+":"+fi.Type)
		}
		sort.Strings(out)
		return out
	}
	t.Run("depth 1", func(t *testing.T) {
		want := []string{"a.txt:file", "dirlink:symlink", "empty:directory", "link:symlink", "sub dir:directory", "target:directory"}
		if diff := cmp.Diff(want, list(t, "")); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
	t.Run("depth 2 does not follow symlinks", func(t *testing.T) {
		want := []string{"a.txt:file", "dirlink:symlink", "empty:directory", "link:symlink", "sub dir/nested:directory", "sub dir/ünï cødé.txt:file", "sub dir:directory", "target/inside.txt:file", "target:directory"}
		if diff := cmp.Diff(want, list(t, "2")); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
	t.Run("mkdir -p with mode", func(t *testing.T) {
		a := a.with(t)
		p := filepath.Join(dir, "made", "deep", "ëxtra dir")
		a.mustJSON(http.MethodPost, "/directories", map[string]any{p: map[string]any{"mode": 700}}, 200, nil)
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("made dir: %v %v", fi, err)
		}
		// Idempotent, like mkdir -p.
		a.mustJSON(http.MethodPost, "/directories", map[string]any{p: map[string]any{"mode": 755}}, 200, nil)
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
			t.Fatalf("mode not applied to existing dir: %v", fi.Mode())
		}
		a.wantError(http.MethodPost, "/directories", map[string]any{filepath.Join(dir, "a.txt", "x"): map[string]any{"mode": 755}}, 400, agent.CodeNotADirectory)
	})
	t.Run("rm -rf", func(t *testing.T) {
		a := a.with(t)
		a.mustJSON(http.MethodDelete, "/directories"+q("path", filepath.Join(dir, "sub dir")), nil, 200, nil)
		if _, err := os.Stat(filepath.Join(dir, "sub dir")); !os.IsNotExist(err) {
			t.Fatalf("still there: %v", err)
		}
		a.wantError(http.MethodDelete, "/directories"+q("path", filepath.Join(dir, "sub dir")), nil, 404, agent.CodeFileNotFound)
		a.wantError(http.MethodDelete, "/directories"+q("path", filepath.Join(dir, "a.txt")), nil, 400, agent.CodeNotADirectory)
		a.wantError(http.MethodDelete, "/directories"+q("path", "/"), nil, 400, agent.CodeInvalidRequest)
	})
	t.Run("errors", func(t *testing.T) {
		a := a.with(t)
		a.wantError(http.MethodGet, "/directories/list"+q("path", filepath.Join(dir, "missing")), nil, 404, agent.CodeFileNotFound)
		a.wantError(http.MethodGet, "/directories/list"+q("path", filepath.Join(dir, "a.txt")), nil, 400, agent.CodeNotADirectory)
		a.wantError(http.MethodGet, "/directories/list"+q("path", dir, "depth", "0"), nil, 400, agent.CodeInvalidRequest)
		a.wantError(http.MethodGet, "/directories/list", nil, 400, agent.CodeMissingQuery)
	})
}

// TestFilesUploadTruncatedBody: a body that breaks off inside the file part (no closing
// boundary) is refused and leaves no file, however the part's last bytes are buffered.
func TestFilesUploadTruncatedBody(t *testing.T) {
	a := newTestAgent(t, agent.Config{})
	for _, size := range []int{10, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "cut.bin")
			var form bytes.Buffer
			mw := multipart.NewWriter(&form)
			meta, _ := mw.CreateFormField("metadata")
			_ = json.NewEncoder(meta).Encode(map[string]any{"path": dst})
			fw, _ := mw.CreateFormFile("file", "cut.bin")
			_, _ = fw.Write(bytes.Repeat([]byte("x"), size))
			// No mw.Close(): the closing boundary never comes.
			resp := a.request(http.MethodPost, "/files/upload", bytes.NewReader(form.Bytes()), http.Header{"Content-Type": {mw.FormDataContentType()}})
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Fatalf("truncated upload: %d %s, want a 4xx", resp.StatusCode, body)
			}
			if _, err := os.Stat(dst); !os.IsNotExist(err) {
				t.Fatalf("truncated upload left %s (stat: %v)", dst, err)
			}
		})
	}
}
