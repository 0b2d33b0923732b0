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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		return fmt.Errorf("sandgate: %s %s: decode answer: %w", method, path, err)
	}
	return nil
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
	var w Whoami
	if err := c.do(ctx, http.MethodGet, "/whoami", nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// pollInterval is how often the waiting helpers look again.
const pollInterval = 250 * time.Millisecond
