package envd_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/sandbox-agent/envd"
	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/process/processconnect"
)

func TestStart(t *testing.T) {
	sb := newSandbox(t)
	tests := []struct {
		name       string
		user       string
		config     *pb.ProcessConfig
		wantStdout string
		wantStderr string
		wantCode   int32
		wantError  string
	}{
		{
			name:       "default user in its home",
			config:     bash(`echo "$(id -u):$(id -G) $USER $HOME $LOGNAME $(pwd)"; echo oops >&2`),
			wantStdout: strconv.Itoa(testUID) + ":" + strconv.Itoa(testUID) + " 4321 user " + sb.home + " user " + sb.home + "\n",
			wantStderr: "oops\n",
		},
		{
			name:       "another user by name",
			user:       "root",
			config:     bash(`echo "$(id -u) $USER"`),
			wantStdout: "0 root\n",
		},
		{
			name:       "envs and a relative cwd",
			config:     &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `echo "$GREETING $(pwd)"`}, Envs: map[string]string{"GREETING": "hi"}, Cwd: ptr("sub")},
			wantStdout: "hi " + sb.home + "/sub\n",
		},
		{
			name:       "a bare program name is looked up in the process's PATH",
			config:     &pb.ProcessConfig{Cmd: "echo", Args: []string{"plain"}},
			wantStdout: "plain\n",
		},
		{
			name:      "exit code",
			config:    bash("exit 3"),
			wantCode:  3,
			wantError: "exit status 3",
		},
	}
	sb.run("user", bash("mkdir -p sub"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sb.run(tt.user, tt.config)
			if r.err != nil {
				t.Fatalf("stream: %v", r.err)
			}
			if r.pid == 0 {
				t.Error("start event without pid")
			}
			if r.stdout != tt.wantStdout || r.stderr != tt.wantStderr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tt.wantStdout, tt.wantStderr)
			}
			if r.end == nil {
				t.Fatal("no end event")
			}
			if r.end.GetExitCode() != tt.wantCode || !r.end.GetExited() {
				t.Errorf("end %v, want exit code %d", r.end, tt.wantCode)
			}
			if got := r.end.GetError(); got != tt.wantError {
				t.Errorf("end error %q, want %q", got, tt.wantError)
			}
			if want := "exit status " + strconv.Itoa(int(tt.wantCode)); r.end.GetStatus() != want {
				t.Errorf("end status %q, want %q", r.end.GetStatus(), want)
			}
		})
	}
}

func TestStartRefusesBadInput(t *testing.T) {
	sb := newSandbox(t)
	tests := []struct {
		name   string
		user   string
		auth   string
		config *pb.ProcessConfig
		want   connect.Code
	}{
		{name: "no command", config: &pb.ProcessConfig{}, want: connect.CodeInvalidArgument},
		{name: "missing cwd", config: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: ptr("/no/such/dir")}, want: connect.CodeInvalidArgument},
		{name: "cwd is a file", config: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: ptr("/etc/hostname")}, want: connect.CodeInvalidArgument},
		{name: "unknown program", config: &pb.ProcessConfig{Cmd: "no-such-program-here"}, want: connect.CodeInvalidArgument},
		{name: "NUL in an argument", config: &pb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"a\x00b"}}, want: connect.CodeInvalidArgument},
		{name: "bad variable name", config: &pb.ProcessConfig{Cmd: "/bin/true", Envs: map[string]string{"A=B": "c"}}, want: connect.CodeInvalidArgument},
		{name: "unknown user", user: "nobody-here", config: bash("true"), want: connect.CodeInvalidArgument},
		{name: "malformed Authorization", auth: "Bearer xyz", config: bash("true"), want: connect.CodeInvalidArgument},
		{name: "Authorization not base64", auth: "Basic %%%", config: bash("true"), want: connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(&pb.StartRequest{Process: tt.config}, tt.user)
			if tt.auth != "" {
				req.Header().Set("Authorization", tt.auth)
			}
			stream, err := sb.process.Start(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			r := collect(stream)
			wantCode(t, r.err, tt.want)
			if r.pid != 0 {
				t.Errorf("a refused start sent a start event (pid %d)", r.pid)
			}
		})
	}
	t.Run("unknown user's message names it", func(t *testing.T) {
		stream, _ := sb.process.Start(context.Background(), request(&pb.StartRequest{Process: bash("true")}, "nobody-here"))
		r := collect(stream)
		if r.err == nil || !strings.Contains(r.err.Error(), `"nobody-here"`) {
			t.Errorf("error %v does not name the user", r.err)
		}
	})
}

func TestStdin(t *testing.T) {
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("send input, then close stdin", func(t *testing.T) {
		stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/cat"}, Stdin: ptr(true), Tag: ptr("cat-1")}, ""))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan result, 1)
		go func() { done <- collect(stream) }()
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "cat-1"}}
		eventually(t, 5*time.Second, "cat listed", func() bool {
			_, err := sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello ")}}}))
			return err == nil
		})
		input := sb.process.StreamInput(ctx)
		for _, msg := range []*pb.StreamInputRequest{
			{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
			{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
			{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("world")}}}}},
		} {
			if err := input.Send(msg); err != nil {
				t.Fatalf("stream input: %v", err)
			}
		}
		if _, err := input.CloseAndReceive(); err != nil {
			t.Fatalf("stream input: %v", err)
		}
		if _, err := sb.process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
			t.Fatalf("close stdin: %v", err)
		}
		r := <-done
		if r.stdout != "hello world" || r.end.GetExitCode() != 0 {
			t.Errorf("stdout %q end %v, want the input echoed and exit 0", r.stdout, r.end)
		}
	})

	t.Run("without stdin", func(t *testing.T) {
		stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: bash("read -t 5 line; echo \"rc=$?\"; sleep 5"), Stdin: ptr(false)}, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() {
			t.Fatalf("no start event: %v", stream.Err())
		}
		pid := stream.Msg().GetEvent().GetStart().GetPid()
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
		_, err = sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x\n")}}}))
		wantCode(t, err, connect.CodeFailedPrecondition)
		_, err = sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("x")}}}))
		wantCode(t, err, connect.CodeInvalidArgument)
		// stdin is /dev/null: read ends at once.
		if !stream.Receive() || string(stream.Msg().GetEvent().GetData().GetStdout()) != "rc=1\n" {
			t.Errorf("got %v (%v), want rc=1", stream.Msg(), stream.Err())
		}
		if _, err := sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad input requests", func(t *testing.T) {
		unknown := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}
		_, err := sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: unknown, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = sb.process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "none"}}}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = sb.process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{}))
		wantCode(t, err, connect.CodeInvalidArgument)

		input := sb.process.StreamInput(ctx)
		_ = input.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}}})
		_, err = input.CloseAndReceive()
		wantCode(t, err, connect.CodeInvalidArgument)

		input = sb.process.StreamInput(ctx)
		_ = input.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: unknown}}})
		_, err = input.CloseAndReceive()
		wantCode(t, err, connect.CodeNotFound)
	})
}

func TestConnectListSignal(t *testing.T) {
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	start, err := sb.process.Start(ctx, request(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.05; done"}, Envs: map[string]string{"K": "V"}},
		Tag:     ptr("server"),
	}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if !start.Receive() {
		t.Fatalf("no start event: %v", start.Err())
	}
	pid := start.Msg().GetEvent().GetStart().GetPid()
	if !start.Receive() || string(start.Msg().GetEvent().GetData().GetStdout()) != "ready\n" {
		t.Fatalf("got %v, want ready", start.Msg())
	}
	// The Start stream goes away; the process stays.
	start.Close()

	res, err := sb.process.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var info *pb.ProcessInfo
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid {
			info = p
		}
	}
	if info == nil || info.GetTag() != "server" || info.GetConfig().GetCmd() != "/bin/bash" || info.GetConfig().GetEnvs()["K"] != "V" {
		t.Fatalf("list: %v, want pid %d tagged server", res.Msg.GetProcesses(), pid)
	}

	byTag, err := sb.process.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "server"}}}))
	if err != nil {
		t.Fatal(err)
	}
	byPid, err := sb.process.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan result, 2)
	go func() { results <- collect(byTag) }()
	go func() { results <- collect(byPid) }()
	// Both streams are attached once the process is listed by both; a signal before
	// then could end it unseen by one, so wait for the trap's output instead of racing.
	time.Sleep(200 * time.Millisecond)
	_, err = sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGTERM}))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := <-results
		if r.err != nil || r.pid != pid || r.end.GetExitCode() != 7 || !strings.Contains(r.stdout, "bye") {
			t.Errorf("connected stream: pid %d stdout %q end %v err %v; want pid %d, bye, exit 7", r.pid, r.stdout, r.end, r.err, pid)
		}
	}
	eventually(t, 5*time.Second, "the ended process unlisted", func() bool { return !sb.listed(pid) })

	t.Run("ended process", func(t *testing.T) {
		stream, err := sb.process.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, collect(stream).err, connect.CodeNotFound)
		_, err = sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
		wantCode(t, err, connect.CodeNotFound)
	})
	t.Run("signal unspecified", func(t *testing.T) {
		_, err = sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
	t.Run("SIGKILL reaches what the process started", func(t *testing.T) {
		r := make(chan result, 1)
		stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: bash("sleep 30 & echo $!; wait")}, ""))
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		pid := stream.Msg().GetEvent().GetStart().GetPid()
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		child, _ := strconv.Atoi(strings.TrimSpace(string(stream.Msg().GetEvent().GetData().GetStdout())))
		go func() { r <- collect(stream, true) }()
		if _, err := sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
		end := (<-r).end
		if end.GetExited() || end.GetStatus() != "signal: killed" || end.GetExitCode() != -1 {
			t.Errorf("end %v, want killed by a signal", end)
		}
		eventually(t, 5*time.Second, "the background sleep gone", func() bool { return !alive(child) })
	})
}

func TestStreamLifetime(t *testing.T) {
	sb := newSandbox(t)

	t.Run("the request's timeout is the process's lifetime", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: bash("sleep 30")}, ""))
		if err != nil {
			t.Fatal(err)
		}
		r := collect(stream)
		if r.pid == 0 {
			t.Fatalf("no start event: %v", r.err)
		}
		wantCode(t, r.err, connect.CodeDeadlineExceeded)
		eventually(t, 5*time.Second, "the process killed at its deadline", func() bool { return !sb.listed(r.pid) })
	})

	t.Run("keepalives while silent", func(t *testing.T) {
		req := request(&pb.StartRequest{Process: bash("sleep 1.5; echo done")}, "")
		req.Header().Set("Keepalive-Ping-Interval", "1")
		stream, err := sb.process.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		r := collect(stream)
		if r.keepalives < 1 || r.stdout != "done\n" || r.end == nil {
			t.Errorf("keepalives %d stdout %q end %v, want a keepalive before done", r.keepalives, r.stdout, r.end)
		}
	})

	t.Run("a background child holding stdout does not hold the stream", func(t *testing.T) {
		started := time.Now()
		r := sb.run("", bash("sleep 30 & echo $!"))
		child, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if err != nil {
			t.Fatalf("stdout %q, want the background pid", r.stdout)
		}
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		if r.end == nil || time.Since(started) > 10*time.Second {
			t.Errorf("end %v after %v, want the stream ended with the process", r.end, time.Since(started))
		}
	})

	t.Run("large output arrives whole", func(t *testing.T) {
		r := sb.run("", bash("head -c 1000000 /dev/zero | tr '\\0' x"))
		if len(r.stdout) != 1000000 || strings.Trim(r.stdout, "x") != "" {
			t.Errorf("got %d bytes of stdout, want 1000000 x", len(r.stdout))
		}
	})
}

func TestPTY(t *testing.T) {
	sb := newSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := sb.process.Start(ctx, request(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--noprofile", "--norc", "-i"}, Envs: map[string]string{"PS1": "$ "}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	output := make(chan string, 1024)
	ended := make(chan *pb.ProcessEvent_EndEvent, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if d := ev.GetData(); d != nil {
				if d.GetStdout() != nil || d.GetStderr() != nil {
					output <- "UNEXPECTED PIPE OUTPUT"
				}
				output <- string(d.GetPty())
			}
			if e := ev.GetEnd(); e != nil {
				ended <- e
				return
			}
		}
		close(ended)
	}()
	var seen strings.Builder
	waitFor := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(seen.String(), want) {
			select {
			case s := <-output:
				seen.WriteString(s)
			case <-deadline:
				t.Fatalf("terminal never showed %q; saw %q", want, seen.String())
			}
		}
	}
	send := func(text string) {
		t.Helper()
		if _, err := sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(text)}}})); err != nil {
			t.Fatalf("send input: %v", err)
		}
	}
	send("echo \"tty=$(tty | cut -c1-8) term=$TERM\"\n")
	waitFor("tty=/dev/pts term=xterm-256color")
	if _, err := sb.process.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatalf("update: %v", err)
	}
	send("echo size=$(stty size)\n")
	waitFor("size=30 100")

	_, err = sb.process.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 0, Rows: 30}}}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = sb.process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = sb.process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	wantCode(t, err, connect.CodeFailedPrecondition)

	send("exit 5\n")
	select {
	case end := <-ended:
		if end.GetExitCode() != 5 {
			t.Errorf("end %v, want exit 5", end)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's stream did not end")
	}

	t.Run("update of a process without a terminal", func(t *testing.T) {
		stream, err := sb.process.Start(ctx, request(&pb.StartRequest{Process: bash("sleep 5")}, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
		_, err = sb.process.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 10, Rows: 10}}}))
		wantCode(t, err, connect.CodeInvalidArgument)
		_, _ = sb.process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL}))
	})
}

func ptr[T any](v T) *T { return &v }

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestCloseKillsProcesses: closing the agent ends every process envd started, and
// what those processes started.
func TestCloseKillsProcesses(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runs as root, like the other envd tests")
	}
	svc := envd.New(envd.Config{})
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	client := processconnect.NewProcessClient(srv.Client(), srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.Start(ctx, request(&pb.StartRequest{Process: bash("sleep 60 & echo $!; wait")}, "root"))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := int(stream.Msg().GetEvent().GetStart().GetPid())
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(stream.Msg().GetEvent().GetData().GetStdout())))
	results := make(chan result, 1)
	go func() { results <- collect(stream, true) }()
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-results; r.end == nil || r.end.GetStatus() != "signal: killed" {
		t.Errorf("end %v (%v), want killed", r.end, r.err)
	}
	// The group's SIGKILL is sent by Close; the child dies when it is next scheduled.
	deadline := time.Now().Add(5 * time.Second)
	for (alive(pid) || alive(child)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) || alive(child) {
		t.Errorf("after Close: process %d alive %t, its child %d alive %t", pid, alive(pid), child, alive(child))
	}
}

// TestStartSeesPasswdChanges: a user added to the passwd file, or a home changed there,
// counts for the next process started.
func TestStartSeesPasswdChanges(t *testing.T) {
	sb := newSandbox(t)
	printenv := func(user string) result {
		t.Helper()
		stream, err := sb.process.Start(context.Background(),
			request(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/printenv", Args: []string{"HOME"}}}, user))
		if err != nil {
			t.Fatal(err)
		}
		return collect(stream)
	}
	if r := printenv("user"); r.err != nil || r.stdout != sb.home+"\n" {
		t.Fatalf("user's HOME: %q, %v", r.stdout, r.err)
	}
	wantCode(t, printenv("third").err, connect.CodeInvalidArgument)

	newHome := filepath.Join(filepath.Dir(sb.home), "moved")
	if err := os.MkdirAll(newHome, 0o755); err != nil {
		t.Fatal(err)
	}
	passwd, err := os.ReadFile(sb.passwd)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(passwd), ":"+sb.home+":", ":"+newHome+":", 1) +
		fmt.Sprintf("third:x:%d:%d::%s:/bin/bash\n", testUID+2, testUID+2, newHome)
	writeFile(t, sb.passwd, edited)

	if r := printenv("user"); r.err != nil || r.stdout != newHome+"\n" {
		t.Errorf("user's HOME after it changed: %q, %v", r.stdout, r.err)
	}
	if r := printenv("third"); r.err != nil || r.stdout != newHome+"\n" {
		t.Errorf("added user's HOME: %q, %v", r.stdout, r.err)
	}
}
