package envd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/process"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/process/processconnect"
	"github.com/sandgate/sandgate/sandbox-agent/procs"
)

// processService implements process.Process.
type processService struct{ s *Service }

func (ps processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	s := ps.s
	u, err := s.userFromHeader(req.Header())
	if err != nil {
		return connectError(err)
	}
	config := req.Msg.GetProcess()
	if config.GetCmd() == "" {
		return invalidArgument("process.cmd is required")
	}
	for i, a := range append([]string{config.GetCmd()}, config.GetArgs()...) {
		if strings.ContainsRune(a, 0) {
			return invalidArgument("argument %d contains NUL", i)
		}
	}
	var killAfter time.Duration
	if v := req.Header().Get("Connect-Timeout-Ms"); v != "" {
		// The request's deadline is the process's lifetime: the stream may go away
		// sooner, the process stays until then (or until it ends or is killed).
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return invalidArgument("Connect-Timeout-Ms must be a non-negative integer")
		}
		killAfter = time.Duration(ms) * time.Millisecond
	}
	cmd, err := s.command(config, u, req.Msg.GetPty() != nil)
	if err != nil {
		return err
	}
	var shell *exec.Cmd
	if script, ok := loginScript(config); ok && req.Msg.GetPty() == nil {
		if direct := s.directLogin(script, cmd); direct != nil {
			cmd, shell = direct, cmd
		}
	}
	withStdin := req.Msg.Stdin == nil || req.Msg.GetStdin()
	var size *pb.PTY_Size
	if req.Msg.GetPty() != nil {
		size = req.Msg.GetPty().GetSize()
		if size == nil {
			size = &pb.PTY_Size{}
		}
		if size.Cols == 0 {
			size.Cols = 80
		}
		if size.Rows == 0 {
			size.Rows = 24
		}
	}
	p, sub, err := startProcess(cmd, shell, config, req.Msg.Tag, size, withStdin, killAfter)
	if err != nil {
		return invalidArgument("start %s: %w", config.GetCmd(), err)
	}
	s.processes.add(p)
	return streamProcess(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

func (ps processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := ps.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	if sub == nil {
		return connect.NewError(connect.CodeNotFound, errors.New("process has ended"))
	}
	return streamProcess(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// streamProcess sends the start event and then the process's events to one stream until
// the end event or until the client goes away; the process runs on either way.
func streamProcess(ctx context.Context, p *process, sub *subscriber, interval time.Duration, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	ka := newKeepalive(interval)
	defer ka.stop()
	for {
		select {
		case ev := <-sub.events:
			_, end := ev.Event.(*pb.ProcessEvent_End)
			if end {
				finishStream(ctx)
			}
			if err := send(ev); err != nil {
				return err
			}
			if end {
				return nil
			}
			ka.reset()
		case <-ka.C():
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			ka.reset()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (ps processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	procs := ps.s.processes.list()
	out := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		out.Processes = append(out.Processes, p.info())
	}
	return connect.NewResponse(out), nil
}

func (ps processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := ps.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.resize(size.GetCols(), size.GetRows()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func (ps processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := ps.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// writeInput gives one input message to the process.
func writeInput(p *process, in *pb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		err = p.writeStdin(v.Stdin)
	case *pb.ProcessInput_Pty:
		err = p.writeTTY(v.Pty)
	default:
		return invalidArgument("input must be stdin or pty")
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStdinClosed), errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed),
		errors.Is(err, os.ErrDeadlineExceeded):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	default:
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
}

func (ps processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *process
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			if p != nil {
				return nil, invalidArgument("the stream names its process once, in its first message")
			}
			var err error
			if p, err = ps.find(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, invalidArgument("the first message of the stream must be start, naming the process")
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, invalidArgument("each message must be start, data or keepalive")
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (ps processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, invalidArgument("signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL")
	}
	p, err := ps.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (ps processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := ps.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// find returns the running process sel names, or the Connect error to answer.
func (ps processService) find(sel *pb.ProcessSelector) (*process, error) {
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := ps.s.processes.find(sel); p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *pb.ProcessSelector_Tag:
		if p := ps.s.processes.find(sel); p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", v.Tag))
	default:
		return nil, invalidArgument("process selector must name a pid or a tag")
	}
}

// command builds the exec.Cmd of a process config for user u: the program and its
// arguments as given (envd runs no shell of its own), the agent's environment with the
// user's HOME, USER and LOGNAME and then the request's envs, from the user's home or
// the config's cwd (relative to the home), as the user.
func (s *Service) command(config *pb.ProcessConfig, u *account, terminal bool) (*exec.Cmd, error) {
	dir := resolvePath(config.GetCwd(), u)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, invalidArgument("cwd %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, invalidArgument("cwd %s is not a directory", dir)
	}
	env := map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	if terminal {
		env["TERM"] = "xterm-256color"
	}
	for k, v := range config.GetEnvs() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, invalidArgument("envs: invalid variable %q", k)
		}
		env[k] = v
	}
	cmd := exec.Command(config.GetCmd(), config.GetArgs()...)
	cmd.Dir = dir
	cmd.Env = s.cfg.Env.Build(env)
	if !strings.Contains(config.GetCmd(), "/") {
		// A bare name is looked up in the process's own PATH, not the agent's.
		if path, ok := lookPath(config.GetCmd(), cmd.Env); ok {
			cmd.Path, cmd.Err = path, nil
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if !terminal {
		// A terminal's process leads a session of its own (pty sets that up).
		cmd.SysProcAttr.Setpgid = true
	}
	if u.UID != uint32(os.Getuid()) || u.GID != uint32(os.Getgid()) {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	return cmd, nil
}

// lookPath finds the executable name in the absolute directories of env's PATH.
func lookPath(name string, env []string) (string, bool) {
	list, _ := procs.Lookup(env, "PATH")
	for _, dir := range filepath.SplitList(list) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

var _ processconnect.ProcessHandler = processService{}
