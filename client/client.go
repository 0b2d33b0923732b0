// Package sandgate is the Go client of a sandgate gateway: the lifecycle API (sandboxes,
// pools, batches), each sandbox's agent API (commands, files, code, PTY) reached through
// the gateway, and the administration API (tenants, keys, policy, plugins, events).
//
// It speaks the wire protocol only and imports nothing of the gateway, so that it can be
// vendored into any Go program. Every call takes a context; every error the server
// answers is an *Error carrying its code, message and request id, matchable with
// errors.Is against the sentinel errors of this package (ErrNotFound, ErrDenied, …).
package sandgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Client talks to one gateway with one API key. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	key    string
	http   *http.Client
	userUA string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests with hc (for a custom transport,
// TLS settings or an in-process handler). Timeouts belong in contexts: a streamed
// command may run for as long as its context lets it.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userUA = ua } }

// New returns a client of the gateway at baseURL (e.g. "http://127.0.0.1:8080"; a
// trailing /v1 is accepted) authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		return nil, errors.New("sandgate: no gateway URL (set SANDGATE_URL or run `sandgate login`)")
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sandgate: gateway URL %q: want http(s)://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/v1")
	c := &Client{base: u, key: apiKey, http: &http.Client{}, userUA: "sandgate-go"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Config is what `sandgate login` stores: the gateway URL and the API key.
type Config struct {
	URL string `json:"url"`
	Key string `json:"key"`
}

// ConfigPath is the file `sandgate login` writes: $XDG_CONFIG_HOME/sandgate/config.json
// (~/.config/sandgate/config.json when XDG_CONFIG_HOME is unset).
func ConfigPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("sandgate: no config directory: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "sandgate", "config.json"), nil
}

// LoadConfig reads the stored login, then lets SANDGATE_URL and SANDGATE_API_KEY
// override its fields. A missing file is not an error.
func LoadConfig() (Config, error) {
	var cfg Config
	path, err := ConfigPath()
	if err == nil {
		data, rerr := os.ReadFile(path)
		switch {
		case rerr == nil:
			if err := json.Unmarshal(data, &cfg); err != nil {
				return cfg, fmt.Errorf("sandgate: %s: %w", path, err)
			}
		case !errors.Is(rerr, os.ErrNotExist):
			return cfg, fmt.Errorf("sandgate: %w", rerr)
		}
	}
	if v := os.Getenv("SANDGATE_URL"); v != "" {
		cfg.URL = v
	}
	if v := os.Getenv("SANDGATE_API_KEY"); v != "" {
		cfg.Key = v
	}
	return cfg, nil
}

// SaveConfig writes cfg where LoadConfig reads it, readable by the user alone (0600).
func SaveConfig(cfg Config) (string, error) {
	path, err := ConfigPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("sandgate: %w", err)
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return "", fmt.Errorf("sandgate: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.Write(append(data, '\n'))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("sandgate: write %s: %w", path, err)
	}
	return path, nil
}

// NewFromEnv returns a client configured by SANDGATE_URL and SANDGATE_API_KEY, falling
// back to the login `sandgate login` stored.
func NewFromEnv(opts ...Option) (*Client, error) {
	cfg, err := LoadConfig()
	if err != nil {
		return nil, err
	}
	return New(cfg.URL, cfg.Key, opts...)
}

// BaseURL is the gateway's URL, without the /v1 prefix.
func (c *Client) BaseURL() string { return c.base.String() }

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// newRequest builds a request with the client's key; body may be nil, an io.Reader
// (sent as is) or any value (sent as JSON).
func (c *Client) newRequest(ctx context.Context, method, fullURL string, body any) (*http.Request, error) {
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("sandgate: encode request: %w", err)
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, fullURL, rd)
	if err != nil {
		return nil, fmt.Errorf("sandgate: %w", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.key != "" {
		req.Header.Set("OPEN-SANDBOX-API-KEY", c.key)
	}
	req.Header.Set("User-Agent", c.userUA)
	return req, nil
}

// send performs req and turns any non-2xx answer into an *Error.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandgate: %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	return resp, nil
}

// do sends a JSON API call to path (under /v1) and decodes the answer into out (nil:
// discarded).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := c.newRequest(ctx, method, c.url("/v1"+path, q), body)
	if err != nil {
		return err
	}
	return c.exchange(req, path, out)
}

// exchange sends req and decodes its JSON answer into out (nil: discarded); path names
// the call in a decoding error.
func (c *Client) exchange(req *http.Request, path string, out any) error {
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("sandgate: %s %s: decode answer: %w", req.Method, path, err)
	}
	return nil
}

// caller is what sends JSON calls: the gateway's API (*Client) or a sandbox's agent or
// enforcer (*Agent).
type caller interface {
	do(ctx context.Context, method, path string, q url.Values, body, out any) error
}

// call sends one JSON call and answers the object it decodes.
func call[T any](ctx context.Context, c caller, method, path string, q url.Values, body any) (*T, error) {
	var v T
	if err := c.do(ctx, method, path, q, body, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// list GETs a list ({"items": […]}) and answers its items.
func list[T any](ctx context.Context, c caller, path string) ([]T, error) {
	var out struct {
		Items []T `json:"items"`
	}
	err := c.do(ctx, http.MethodGet, path, nil, nil, &out)
	return out.Items, err
}

// sseEvent is one event of a text/event-stream answer: its name (the last event: line,
// "" while there was none) and its data line.
type sseEvent struct{ name, data string }

// stream GETs path (under /v1) as a text/event-stream and yields each event that has a
// data line, until ctx ends or the stream breaks; a broken stream ends the sequence with
// its error, what naming the stream.
func (c *Client) stream(ctx context.Context, path string, q url.Values, what string) iter.Seq2[sseEvent, error] {
	return func(yield func(sseEvent, error) bool) {
		req, err := c.newRequest(ctx, http.MethodGet, c.url("/v1"+path, q), nil)
		if err != nil {
			yield(sseEvent{}, err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.send(req)
		if err != nil {
			yield(sseEvent{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "event:"); ok {
				name = strings.TrimSpace(n)
				continue
			}
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			if !yield(sseEvent{name: name, data: strings.TrimSpace(data)}, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil && ctx.Err() == nil {
			yield(sseEvent{}, fmt.Errorf("sandgate: %s: %w", what, err))
		}
	}
}

// Health reports whether the gateway answers GET /health.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/health", nil, nil, nil)
}

// Whoami describes the caller: tenant, role and key id.
type Whoami struct {
	Tenant string `json:"tenant"`
	Role   string `json:"role"`
	KeyID  string `json:"keyId,omitempty"`
	Admin  bool   `json:"admin,omitempty"`
}

// Whoami returns who the client's key authenticates as.
func (c *Client) Whoami(ctx context.Context) (*Whoami, error) {
	return call[Whoami](ctx, c, http.MethodGet, "/whoami", nil, nil)
}

// pollInterval is how often the waiting helpers look again.
const pollInterval = 250 * time.Millisecond
