package envd_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/sandbox-agent/agent"
	"github.com/sandgate/sandgate/sandbox-agent/agentauth"
	"github.com/sandgate/sandgate/sandbox-agent/envd"
	fspb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem/filesystemconnect"
	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/process/processconnect"
)

const testToken = "envd-test-token"

// testUID is the uid of the sandbox's `user` in the tests' passwd file: E2B's.
const testUID = 1000

// sandbox is a real agent, serving envd under /envd on loopback, with a passwd file of
// its own: root, `user` (uid 1000, home under the test's temp dir, also in group
// `extra`) and `other` (uid 1001).
type sandbox struct {
	t       testing.TB
	url     string // the envd base URL: the agent's plus /envd
	home    string // user's home
	passwd  string // the sandbox's passwd file
	client  *http.Client
	process processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

func newSandbox(t testing.TB) *sandbox {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the envd tests switch users: they run as root")
	}
	dir := t.TempDir()
	// Users other than root must reach their homes under the temp dir.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(dir, "home", "user")
	otherHome := filepath.Join(dir, "home", "other")
	for uid, h := range map[int]string{testUID: home, testUID + 1: otherHome} {
		if err := os.MkdirAll(h, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(h, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	writeFile(t, passwd, fmt.Sprintf("root:x:0:0:root:/root:/bin/bash\nuser:x:%d:%d::%s:/bin/bash\nother:x:%d:%d::%s:/bin/bash\n",
		testUID, testUID, home, testUID+1, testUID+1, otherHome))
	writeFile(t, group, fmt.Sprintf("root:x:0:\nuser:x:%d:\nother:x:%d:\nextra:x:4321:root,user\n", testUID, testUID+1))

	api, err := agent.New(agent.Config{
		Token:    testToken,
		StateDir: t.TempDir(),
		Envd:     envd.Config{PasswdFile: passwd, GroupFile: group},
	})
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		api.Close()
	})
	client := &http.Client{Transport: signingTransport{srv.Client().Transport}}
	base := srv.URL + "/envd"
	return &sandbox{
		t:       t,
		url:     base,
		home:    home,
		passwd:  passwd,
		client:  client,
		process: processconnect.NewProcessClient(client, base, connect.WithProtoJSON()),
		fs:      filesystemconnect.NewFilesystemClient(client, base, connect.WithProtoJSON()),
	}
}

// signingTransport signs every request to the agent as the gateway does, and refuses
// an answer the agent did not sign.
type signingTransport struct{ base http.RoundTripper }

func (st signingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	nonce := agentauth.Sign(r, testToken, time.Now())
	resp, err := st.base.RoundTrip(r)
	if err == nil && !agentauth.Answered(resp, testToken, nonce) {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: the answer (%d) is not signed by the agent", r.Method, r.URL.Path, resp.StatusCode)
	}
	return resp, err
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// asUser is the Authorization header that selects a user, as the SDKs send it.
func asUser(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

// request builds a Connect request, as user when user is not "".
func request[T any](msg *T, user string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if user != "" {
		req.Header().Set("Authorization", asUser(user))
	}
	return req
}

// wantCode fails unless err is a Connect error of code.
func wantCode(t testing.TB, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
}

// result is what a process stream delivered.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *pb.ProcessEvent_EndEvent
	keepalives     int
	err            error
}

// eventStream is a Start or Connect stream.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

// collect reads a process stream to its end, from its start event (or, started
// false, from the event after it). It may run on any goroutine: what goes wrong is in
// the result's err.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](stream interface {
	eventStream
	Msg() T
}, started ...bool) result {
	defer stream.Close()
	var r result
	first := len(started) == 0 || !started[0]
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if first {
			start, ok := ev.GetEvent().(*pb.ProcessEvent_Start)
			if !ok {
				r.err = fmt.Errorf("first event %v, want start", ev)
				return r
			}
			r.pid = start.Start.GetPid()
			first = false
			continue
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Data:
			r.stdout += string(e.Data.GetStdout())
			r.stderr += string(e.Data.GetStderr())
			r.pty += string(e.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = e.End
		case *pb.ProcessEvent_Keepalive:
			r.keepalives++
		default:
			r.err = fmt.Errorf("unexpected event %v", ev)
			return r
		}
	}
	r.err = stream.Err()
	return r
}

// run starts cmd args… and reads its stream to the end.
func (sb *sandbox) run(user string, config *pb.ProcessConfig) result {
	sb.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: config}, user))
	if err != nil {
		sb.t.Fatalf("start: %v", err)
	}
	return collect(stream)
}

func bash(script string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stat is the entry at path, as root.
func (sb *sandbox) stat(path string) (*fspb.EntryInfo, error) {
	res, err := sb.fs.Stat(context.Background(), request(&fspb.StatRequest{Path: path}, "root"))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetEntry(), nil
}

// listed reports whether pid is among the running processes.
func (sb *sandbox) listed(pid uint32) bool {
	res, err := sb.process.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		sb.t.Fatalf("list: %v", err)
	}
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return true
		}
	}
	return false
}
