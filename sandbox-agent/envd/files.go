package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The /files routes move whole files: GET downloads the file at ?path= (gzip-encoded
// when the client accepts it, ranges otherwise), POST uploads one raw body
// (application/octet-stream, ?path= required) or every `file` part of a multipart form
// (each to ?path= when given, else to the part's filename, taken as a path), creating
// missing directories; a gzip Content-Encoding is decoded. ?username= picks the user
// whose home relative paths start from and who owns what is created. Signed-URL
// parameters (signature, signature_expiration) are the gateway's to check.

// httpError is the error body of the /files routes: the status again, and a message.
type httpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeHTTPError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(httpError{Code: status, Message: message})
}

// fileStatus maps a file system error to the status of a /files answer.
func fileStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, fs.ErrExist),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTSUP):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// filesUser is the user of a /files request (?username=, else the default user),
// answering 401 itself for a user the sandbox does not have, as envd does.
func (s *Service) filesUser(w http.ResponseWriter, r *http.Request) (*account, bool) {
	u, err := s.lookupUser(r.URL.Query().Get("username"))
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, errUnknownUser) {
			status = http.StatusUnauthorized
		}
		writeHTTPError(w, status, err.Error())
		return nil, false
	}
	return u, true
}

func (s *Service) handleDownload(w http.ResponseWriter, r *http.Request) {
	u, ok := s.filesUser(w, r)
	if !ok {
		return
	}
	path := resolvePath(r.URL.Query().Get("path"), u)
	f, err := os.Open(path)
	if err != nil {
		writeHTTPError(w, fileStatus(err), fmt.Sprintf("open %s: %v", path, errors.Unwrap(err)))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeHTTPError(w, fileStatus(err), err.Error())
		return
	}
	if fi.IsDir() {
		writeHTTPError(w, http.StatusBadRequest, path+" is a directory")
		return
	}
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r) && r.Header.Get("Range") == "" && r.Header.Get("If-Range") == "" {
		ct := mime.TypeByExtension(filepath.Ext(path))
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Encoding", "gzip")
		// The fastest level: the bytes it saves are on the gateway's hop.
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		_, _ = io.Copy(gz, f) // a failure past the header can only truncate the body
		_ = gz.Close()
		return
	}
	if w.Header().Get("Content-Type") == "" && mime.TypeByExtension(filepath.Ext(path)) == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	http.ServeContent(w, r, path, fi.ModTime(), f)
}

// acceptsGzip reports whether the request asks for a gzip answer: gzip is the one coding
// Accept-Encoding lists with a non-zero weight, as the SDKs send it when a read asks for
// gzip. The default of HTTP libraries ("gzip, deflate", which both SDKs send on every
// read) leaves the choice to the server, which answers uncompressed: the hop the body
// crosses is the gateway's, where compressing costs more time than it saves.
func acceptsGzip(r *http.Request) bool {
	gzipAsked := false
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.TrimSpace(coding)
		if coding == "" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		if q == "q=0" || q == "q=0.0" || q == "q=0.00" || q == "q=0.000" {
			continue
		}
		if !strings.EqualFold(coding, "gzip") {
			return false
		}
		gzipAsked = true
	}
	return gzipAsked
}

// uploadedEntry is one file of an upload's answer.
type uploadedEntry struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (s *Service) handleUpload(w http.ResponseWriter, r *http.Request) {
	u, ok := s.filesUser(w, r)
	if !ok {
		return
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			writeHTTPError(w, http.StatusBadRequest, "the body is not gzip: "+err.Error())
			return
		}
		defer gz.Close()
		body = gz
	default:
		writeHTTPError(w, http.StatusBadRequest, "unsupported Content-Encoding "+enc+" (gzip or none)")
		return
	}
	md := metadataFromHeader(r.Header)
	queryPath := r.URL.Query().Get("path")
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []uploadedEntry
	switch {
	case mediaType == "application/octet-stream":
		if queryPath == "" {
			writeHTTPError(w, http.StatusBadRequest, "the path query parameter is required for an application/octet-stream upload")
			return
		}
		path := resolvePath(queryPath, u)
		if status, err := writeUpload(path, body, u, md); err != nil {
			writeHTTPError(w, status, err.Error())
			return
		}
		written = append(written, uploadedEntry{Name: filepath.Base(path), Type: "file", Path: path, Metadata: md})
	case strings.HasPrefix(mediaType, "multipart/"):
		if params["boundary"] == "" {
			writeHTTPError(w, http.StatusBadRequest, "the multipart Content-Type has no boundary")
			return
		}
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeHTTPError(w, http.StatusBadRequest, "read the multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			target := queryPath
			if target == "" {
				target = partFilename(part)
			}
			if target == "" {
				part.Close()
				writeHTTPError(w, http.StatusBadRequest, "a file part names no path: give ?path= or the part's filename")
				return
			}
			path := resolvePath(target, u)
			for _, e := range written {
				if e.Path == path {
					part.Close()
					writeHTTPError(w, http.StatusBadRequest, "two files of one upload go to "+path)
					return
				}
			}
			status, err := writeUpload(path, part, u, md)
			part.Close()
			if err != nil {
				writeHTTPError(w, status, err.Error())
				return
			}
			written = append(written, uploadedEntry{Name: filepath.Base(path), Type: "file", Path: path, Metadata: md})
		}
	default:
		writeHTTPError(w, http.StatusBadRequest, fmt.Sprintf("unsupported Content-Type %q: multipart/form-data or application/octet-stream", r.Header.Get("Content-Type")))
		return
	}
	if written == nil {
		written = []uploadedEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(written)
}

// partFilename is the filename parameter of a part's Content-Disposition as sent: a
// path, which multipart.Part.FileName would cut to its last element.
func partFilename(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeUpload replaces the file at path with what src yields, creating missing
// directories; the file and the directories belong to u and the file gets md. It
// answers the status of a failure.
func writeUpload(path string, src io.Reader, u *account, md map[string]string) (int, error) {
	if err := makeDirs(filepath.Dir(path), u); err != nil {
		return fileStatus(err), fmt.Errorf("create the directories of %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return http.StatusBadRequest, fmt.Errorf("%s is a directory", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return fileStatus(err), fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if err := chownTo(path, u); err != nil {
		return fileStatus(err), fmt.Errorf("give %s to %s: %w", path, u.Name, err)
	}
	if _, err := io.Copy(f, readErrors{src}); err != nil {
		var re readError
		if errors.As(err, &re) {
			return http.StatusBadRequest, fmt.Errorf("read the upload for %s: %w", path, re.err)
		}
		return fileStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fileStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	if err := writeMetadata(path, md); err != nil {
		return fileStatus(err), err
	}
	return http.StatusOK, nil
}

// readErrors marks the errors of reading an upload's body (a client gone, a corrupt
// gzip stream), which are the caller's, apart from those of writing the file.
type readErrors struct{ r io.Reader }

type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }

func (rd readErrors) Read(p []byte) (int, error) {
	n, err := rd.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = readError{err}
	}
	return n, err
}
