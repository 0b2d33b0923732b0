package envd_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
)

// do sends an HTTP request to the envd API (path and query relative to /envd).
func (sb *sandbox) do(method, pathAndQuery string, body io.Reader, hdr http.Header) (*http.Response, []byte) {
	sb.t.Helper()
	req, err := http.NewRequest(method, sb.url+pathAndQuery, body)
	if err != nil {
		sb.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	// The test's client must not decode gzip itself: the test looks at the encoding.
	if req.Header.Get("Accept-Encoding") == "" {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := sb.client.Do(req)
	if err != nil {
		sb.t.Fatalf("%s %s: %v", method, pathAndQuery, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		sb.t.Fatal(err)
	}
	return resp, b
}

type uploaded struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata"`
}

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func TestHealth(t *testing.T) {
	sb := newSandbox(t)
	resp, _ := sb.do("GET", "/health", nil, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("health: %d, want 204", resp.StatusCode)
	}
	resp, body := sb.do("GET", "/nothing", nil, nil)
	var e errorBody
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil || e.Code != 404 {
		t.Errorf("unknown route: %d %s, want a 404 error body", resp.StatusCode, body)
	}

	t.Run("the agent's own authentication applies", func(t *testing.T) {
		for _, tt := range []struct {
			name        string
			accessToken string
			token       string
			want        int
		}{
			{"no credential", "", "", http.StatusUnauthorized},
			{"E2B's access token is not the agent's", "e2b-envd-token", "", http.StatusUnauthorized},
			{"the agent's token", "", testToken, http.StatusNoContent},
		} {
			req, _ := http.NewRequest("GET", sb.url+"/health", nil)
			if tt.accessToken != "" {
				req.Header.Set("X-Access-Token", tt.accessToken)
			}
			if tt.token != "" {
				req.Header.Set(agent.TokenHeader, tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.want)
			}
		}
	})
}

func TestUploadDownload(t *testing.T) {
	sb := newSandbox(t)

	t.Run("octet-stream with metadata", func(t *testing.T) {
		hdr := http.Header{"Content-Type": {"application/octet-stream"}, "X-Metadata-Author": {"Ada"}, "x-metadata-purpose": {"test"}}
		resp, body := sb.do("POST", "/files?path=docs/a.txt", strings.NewReader("hello"), hdr)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upload: %d %s", resp.StatusCode, body)
		}
		var got []uploaded
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(sb.home, "docs", "a.txt")
		want := []uploaded{{Name: "a.txt", Type: "file", Path: path, Metadata: map[string]string{"author": "Ada", "purpose": "test"}}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
		if uid := ownerOf(t, path); uid != testUID {
			t.Errorf("file belongs to %d, want %d", uid, testUID)
		}
		if uid := ownerOf(t, filepath.Dir(path)); uid != testUID {
			t.Errorf("created directory belongs to %d, want %d", uid, testUID)
		}
		buf := make([]byte, 64)
		n, err := unix.Getxattr(path, "user.e2b.author", buf)
		if err != nil || string(buf[:n]) != "Ada" {
			t.Errorf("xattr user.e2b.author = %q (%v), want Ada", buf[:n], err)
		}
		entry, err := sb.stat(path)
		if err != nil || entry.GetMetadata()["purpose"] != "test" {
			t.Errorf("stat metadata %v (%v)", entry.GetMetadata(), err)
		}

		resp, body = sb.do("GET", "/files?path=docs/a.txt", nil, nil)
		if resp.StatusCode != http.StatusOK || string(body) != "hello" {
			t.Errorf("download: %d %q, want hello", resp.StatusCode, body)
		}
		resp, body = sb.do("GET", "/files?path="+url.QueryEscape(path), nil, http.Header{"Range": {"bytes=1-2"}})
		if resp.StatusCode != http.StatusPartialContent || string(body) != "el" {
			t.Errorf("range download: %d %q, want 206 el", resp.StatusCode, body)
		}
	})

	t.Run("gzip both ways", func(t *testing.T) {
		var zipped bytes.Buffer
		gz := gzip.NewWriter(&zipped)
		gz.Write([]byte(strings.Repeat("compressible ", 1000)))
		gz.Close()
		hdr := http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}
		resp, body := sb.do("POST", "/files?path=z.txt", &zipped, hdr)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("gzip upload: %d %s", resp.StatusCode, body)
		}
		resp, body = sb.do("GET", "/files?path=z.txt", nil, http.Header{"Accept-Encoding": {"gzip"}})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("gzip download: %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if string(plain) != strings.Repeat("compressible ", 1000) {
			t.Errorf("gzip round trip lost the content (%d bytes)", len(plain))
		}
		// What HTTP libraries send by default (both SDKs, on every read) leaves the
		// coding to the server: the answer is plain.
		for _, accept := range []string{"gzip, deflate", "gzip;q=0", "br, gzip"} {
			resp, body = sb.do("GET", "/files?path=z.txt", nil, http.Header{"Accept-Encoding": {accept}})
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || string(body) != strings.Repeat("compressible ", 1000) {
				t.Errorf("Accept-Encoding %q: %d, Content-Encoding %q, %d bytes; want it plain", accept, resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body))
			}
		}
	})

	t.Run("multipart, several files named by their filenames", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{"m/one.txt": "1", filepath.Join(sb.home, "m", "two.txt"): "2"})
		resp, answer := sb.do("POST", "/files?username=root", body, http.Header{"Content-Type": {ctype}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("multipart: %d %s", resp.StatusCode, answer)
		}
		var got []uploaded
		json.Unmarshal(answer, &got)
		if len(got) != 2 {
			t.Fatalf("answer %s, want two files", answer)
		}
		// Relative to root's home (/root) as root asked; the absolute one where it says.
		for path, want := range map[string]string{"/root/m/one.txt": "1", filepath.Join(sb.home, "m", "two.txt"): "2"} {
			b, err := os.ReadFile(path)
			if err != nil || string(b) != want {
				t.Errorf("%s: %q (%v), want %q", path, b, err, want)
			}
		}
		os.RemoveAll("/root/m")
	})

	t.Run("multipart to the path parameter", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{"ignored-name": "content"})
		resp, answer := sb.do("POST", "/files?path=single.txt", body, http.Header{"Content-Type": {ctype}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("multipart: %d %s", resp.StatusCode, answer)
		}
		if b, _ := os.ReadFile(filepath.Join(sb.home, "single.txt")); string(b) != "content" {
			t.Errorf("single.txt holds %q", b)
		}
	})

	t.Run("as another user", func(t *testing.T) {
		resp, answer := sb.do("POST", "/files?path=theirs.txt&username=other", strings.NewReader("x"), http.Header{"Content-Type": {"application/octet-stream"}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upload: %d %s", resp.StatusCode, answer)
		}
		path := filepath.Join(filepath.Dir(sb.home), "other", "theirs.txt")
		if uid := ownerOf(t, path); uid != testUID+1 {
			t.Errorf("file belongs to %d, want other's %d", uid, testUID+1)
		}
		resp, body := sb.do("GET", "/files?path=theirs.txt&username=other", nil, nil)
		if resp.StatusCode != http.StatusOK || string(body) != "x" {
			t.Errorf("download as other: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		if err := os.Mkdir(filepath.Join(sb.home, "adir"), 0o755); err != nil {
			t.Fatal(err)
		}
		octet := http.Header{"Content-Type": {"application/octet-stream"}}
		dup, dupType := multipartBody(t, nil)
		tests := []struct {
			name   string
			method string
			path   string
			body   io.Reader
			hdr    http.Header
			want   int
		}{
			{"download of nothing", "GET", "/files?path=missing.txt", nil, nil, http.StatusNotFound},
			{"download of a directory", "GET", "/files?path=adir", nil, nil, http.StatusBadRequest},
			{"download as an unknown user", "GET", "/files?path=a.txt&username=ghost", nil, nil, http.StatusUnauthorized},
			{"upload as an unknown user", "POST", "/files?path=a.txt&username=ghost", strings.NewReader("x"), octet, http.StatusUnauthorized},
			{"octet-stream without a path", "POST", "/files", strings.NewReader("x"), octet, http.StatusBadRequest},
			{"upload over a directory", "POST", "/files?path=adir", strings.NewReader("x"), octet, http.StatusBadRequest},
			{"unsupported content type", "POST", "/files?path=a.txt", strings.NewReader("x"), http.Header{"Content-Type": {"text/plain"}}, http.StatusBadRequest},
			{"corrupt gzip", "POST", "/files?path=a.txt", strings.NewReader("not gzip at all"), http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, http.StatusBadRequest},
			{"unsupported encoding", "POST", "/files?path=a.txt", strings.NewReader("x"), http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"br"}}, http.StatusBadRequest},
			{"multipart without boundary", "POST", "/files", strings.NewReader("x"), http.Header{"Content-Type": {"multipart/form-data"}}, http.StatusBadRequest},
			{"two parts to one path", "POST", "/files?path=same.txt", dup, http.Header{"Content-Type": {dupType}}, http.StatusBadRequest},
			{"wrong method", "DELETE", "/files?path=a.txt", nil, nil, http.StatusNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp, body := sb.do(tt.method, tt.path, tt.body, tt.hdr)
				if resp.StatusCode != tt.want {
					t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.want)
				}
				var e errorBody
				if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.want || e.Message == "" {
					t.Errorf("error body %s, want {code: %d, message}", body, tt.want)
				}
			})
		}
	})
}

// multipartBody is a form of `file` parts, each with its path as filename; files nil
// makes two parts with the same name.
func multipartBody(t testing.TB, files map[string]string) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	add := func(name, content string) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
	}
	if files == nil {
		add("x", "1")
		add("y", "2")
	}
	for name, content := range files {
		add(name, content)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

// TestConnectJSONWire checks the bytes the SDKs see: Connect's JSON codec for unary
// calls and its enveloped JSON for streams, and Connect's JSON error shape.
func TestConnectJSONWire(t *testing.T) {
	sb := newSandbox(t)

	t.Run("unary", func(t *testing.T) {
		resp, body := sb.do("POST", "/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/"}`), http.Header{"Content-Type": {"application/json"}})
		var got struct {
			Entry struct {
				Name, Type, Path, Permissions string
				ModifiedTime                  string `json:"modifiedTime"`
			}
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil ||
			got.Entry.Type != "FILE_TYPE_DIRECTORY" || got.Entry.Path != "/" || got.Entry.ModifiedTime == "" {
			t.Errorf("stat: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("unary error", func(t *testing.T) {
		hdr := http.Header{"Content-Type": {"application/json"}, "Authorization": {asUser("ghost")}}
		resp, body := sb.do("POST", "/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/"}`), hdr)
		var e struct{ Code, Message string }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Code != "invalid_argument" || !strings.Contains(e.Message, "ghost") {
			t.Errorf("unknown user: %d %s, want 400 {code: invalid_argument}", resp.StatusCode, body)
		}
		resp, body = sb.do("POST", "/filesystem.Filesystem/Stat", strings.NewReader(`{"path":`), http.Header{"Content-Type": {"application/json"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":"invalid_argument"`) {
			t.Errorf("truncated JSON: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("server stream", func(t *testing.T) {
		msg := []byte(`{"process":{"cmd":"/bin/bash","args":["-c","printf hi; exit 2"]}}`)
		var frame bytes.Buffer
		frame.WriteByte(0)
		frame.Write([]byte{0, 0, 0, byte(len(msg))})
		frame.Write(msg)
		resp, body := sb.do("POST", "/process.Process/Start", &frame, http.Header{"Content-Type": {"application/connect+json"}})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/connect+json" {
			t.Fatalf("start: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var messages []string
		for len(body) >= 5 {
			n := int(body[1])<<24 | int(body[2])<<16 | int(body[3])<<8 | int(body[4])
			messages = append(messages, string(body[5:5+n]))
			body = body[5+n:]
		}
		if len(messages) != 4 ||
			!strings.HasPrefix(messages[0], `{"event":{"start":{"pid":`) ||
			strings.ReplaceAll(messages[1], " ", "") != `{"event":{"data":{"stdout":"aGk="}}}` ||
			messages[3] != `{}` {
			t.Fatalf("messages %q", messages)
		}
		var end struct {
			Event struct {
				End map[string]any
			}
		}
		want := map[string]any{"exitCode": 2.0, "exited": true, "status": "exit status 2", "error": "exit status 2"}
		if err := json.Unmarshal([]byte(messages[2]), &end); err != nil || !cmp.Equal(end.Event.End, want) {
			t.Errorf("end message %s, want %v", messages[2], want)
		}
	})
}
