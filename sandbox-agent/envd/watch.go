package envd

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem"
)

// maxPolledEvents bounds the events a polled watcher keeps between two
// GetWatcherEvents; later ones are dropped until the next poll.
const maxPolledEvents = 10000

// dirWatcher reports changes in a directory (and, recursive, in every directory below
// it, including ones created later) as protocol events.
type dirWatcher struct {
	w            *fsnotify.Watcher
	root         string
	recursive    bool
	includeEntry bool
	names        idNames
}

// watchOptions are what WatchDir and CreateWatcher share.
type watchOptions interface {
	GetPath() string
	GetRecursive() bool
	GetIncludeEntry() bool
	GetAllowNetworkMounts() bool
}

// newDirWatcher starts watching the directory opts names for user u.
func (s *Service) newDirWatcher(u *account, opts watchOptions) (*dirWatcher, error) {
	root := resolvePath(opts.GetPath(), u)
	fi, err := os.Stat(root)
	if err != nil {
		return nil, connectError(err)
	}
	if !fi.IsDir() {
		return nil, invalidArgument("%s is not a directory", root)
	}
	if !opts.GetAllowNetworkMounts() && onNetworkMount(root) {
		return nil, invalidArgument("%s is on a network file system, whose changes may not be reported; set allow_network_mounts to watch it anyway", root)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("create watcher: %w", err))
	}
	dw := &dirWatcher{w: w, root: root, recursive: opts.GetRecursive(), includeEntry: opts.GetIncludeEntry(), names: s.idNames()}
	if err := dw.add(root); err != nil {
		w.Close()
		return nil, connectError(fmt.Errorf("watch %s: %w", root, err))
	}
	return dw, nil
}

// add watches dir, and every directory below it when recursive.
func (dw *dirWatcher) add(dir string) error {
	if !dw.recursive {
		return dw.w.Add(dir)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir {
				return nil // gone or unreadable since listed: nothing to watch there
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if err := dw.w.Add(p); err != nil && p == dir {
			return err
		}
		return nil
	})
}

// run turns file system notifications into events for emit until ctx ends or the
// watcher fails (the error is returned). emit answers false to stop.
func (dw *dirWatcher) run(ctx context.Context, emit func(*pb.FilesystemEvent) bool) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-dw.w.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watching %s: %w", dw.root, err)
		case e, ok := <-dw.w.Events:
			if !ok {
				return nil
			}
			if dw.recursive && e.Has(fsnotify.Create) {
				if fi, err := os.Lstat(e.Name); err == nil && fi.IsDir() {
					_ = dw.add(e.Name)
				}
			}
			for _, ev := range dw.events(e) {
				if !emit(ev) {
					return nil
				}
			}
		}
	}
}

// events are the protocol events of one notification: one per operation it carries.
func (dw *dirWatcher) events(e fsnotify.Event) []*pb.FilesystemEvent {
	name, err := filepath.Rel(dw.root, e.Name)
	if err != nil {
		return nil
	}
	var entry *pb.EntryInfo
	if dw.includeEntry {
		entry, _ = entryInfo(e.Name, dw.names) // none when the entry is gone
	}
	var out []*pb.FilesystemEvent
	for _, op := range []struct {
		op  fsnotify.Op
		typ pb.EventType
	}{
		{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
		{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	} {
		if e.Has(op.op) {
			out = append(out, &pb.FilesystemEvent{Name: name, Type: op.typ, Entry: entry})
		}
	}
	return out
}

func (dw *dirWatcher) close() { _ = dw.w.Close() }

// onNetworkMount reports whether dir is on NFS, CIFS/SMB or FUSE, whose changes inotify
// may never see.
func onNetworkMount(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC, unix.SMB_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC, unix.FUSE_SUPER_MAGIC:
		return true
	}
	return false
}

func (fss filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	u, err := fss.s.userFromHeader(req.Header())
	if err != nil {
		return connectError(err)
	}
	dw, err := fss.s.newDirWatcher(u, req.Msg)
	if err != nil {
		return err
	}
	defer dw.close()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *pb.FilesystemEvent, 256)
	runErr := make(chan error, 1)
	go func() {
		runErr <- dw.run(ctx, func(ev *pb.FilesystemEvent) bool {
			select {
			case events <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	ka := newKeepalive(keepaliveInterval(req.Header()))
	defer ka.stop()
	for {
		select {
		case ev := <-events:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			ka.reset()
		case <-ka.C():
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			ka.reset()
		case err := <-runErr:
			if err != nil {
				return connect.NewError(connect.CodeInternal, err)
			}
			return ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// polledWatcher is a watcher of CreateWatcher: its events wait for GetWatcherEvents.
type polledWatcher struct {
	dw     *dirWatcher
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error
}

// watcherTable holds the polled watchers by id.
type watcherTable struct {
	mu sync.Mutex
	m  map[string]*polledWatcher
}

func newWatcherTable() *watcherTable { return &watcherTable{m: map[string]*polledWatcher{}} }

func (t *watcherTable) get(id string) *polledWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (t *watcherTable) remove(id string) *polledWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	pw := t.m[id]
	delete(t.m, id)
	return pw
}

func (t *watcherTable) closeAll() {
	t.mu.Lock()
	all := t.m
	t.m = map[string]*polledWatcher{}
	t.mu.Unlock()
	for _, pw := range all {
		pw.stop()
	}
}

func (pw *polledWatcher) stop() {
	pw.cancel()
	pw.dw.close()
	<-pw.done
}

func (fss filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	u, err := fss.s.userFromHeader(req.Header())
	if err != nil {
		return nil, connectError(err)
	}
	dw, err := fss.s.newDirWatcher(u, req.Msg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	pw := &polledWatcher{dw: dw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		err := dw.run(runCtx, func(ev *pb.FilesystemEvent) bool {
			pw.mu.Lock()
			if len(pw.events) < maxPolledEvents {
				pw.events = append(pw.events, ev)
			}
			pw.mu.Unlock()
			return true
		})
		pw.mu.Lock()
		pw.err = err
		pw.mu.Unlock()
	}()
	id := uuid.NewString()
	t := fss.s.watchers
	t.mu.Lock()
	t.m[id] = pw
	t.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (fss filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	pw := fss.s.watchers.get(req.Msg.GetWatcherId())
	if pw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.GetWatcherId()))
	}
	pw.mu.Lock()
	events, err := pw.events, pw.err
	pw.events = nil
	pw.mu.Unlock()
	if len(events) == 0 && err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: events}), nil
}

func (fss filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	pw := fss.s.watchers.remove(req.Msg.GetWatcherId())
	if pw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", req.Msg.GetWatcherId()))
	}
	pw.stop()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
