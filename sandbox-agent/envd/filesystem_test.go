package envd_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem"
)

func TestStatAndListDir(t *testing.T) {
	sb := newSandbox(t)
	ctx := context.Background()
	root := filepath.Join(sb.home, "tree")
	for _, d := range []string{"tree/a/b/c", "tree/empty"} {
		if err := os.MkdirAll(filepath.Join(sb.home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "top.txt"), "12345")
	writeFile(t, filepath.Join(root, "a", "mid.txt"), "x")
	writeFile(t, filepath.Join(root, "a", "b", "c", "deep.txt"), "x")
	if err := os.Symlink("top.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/no/such/target", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "top.txt"), testUID, 4321); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(root, "top.txt"), "user.e2b.purpose", []byte("test"), 0); err != nil {
		t.Fatalf("the test's file system keeps no user xattrs: %v", err)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(root, "top.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}

	t.Run("stat, relative to the user's home", func(t *testing.T) {
		res, err := sb.fs.Stat(ctx, request(&pb.StatRequest{Path: "tree/top.txt"}, ""))
		if err != nil {
			t.Fatal(err)
		}
		got := res.Msg.GetEntry()
		want := &pb.EntryInfo{
			Name: "top.txt", Type: pb.FileType_FILE_TYPE_FILE, Path: filepath.Join(root, "top.txt"), Size: 5,
			Mode: 0o644, Permissions: "-rw-r--r--", Owner: "user", Group: "extra",
			Metadata: map[string]string{"purpose": "test"},
		}
		if !got.GetModifiedTime().AsTime().Equal(mtime) {
			t.Errorf("modified time %v, want %v", got.GetModifiedTime().AsTime(), mtime)
		}
		got.ModifiedTime = nil
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("entry (-want +got):\n%s", diff)
		}
	})
	t.Run("stat of a symlink", func(t *testing.T) {
		got, err := sb.stat(filepath.Join(root, "link"))
		if err != nil {
			t.Fatal(err)
		}
		if got.GetType() != pb.FileType_FILE_TYPE_SYMLINK || !got.GetIsSymlink() || got.GetSymlinkTarget() != filepath.Join(root, "top.txt") {
			t.Errorf("entry %v, want a symlink to top.txt", got)
		}
		got, err = sb.stat(filepath.Join(root, "dangling"))
		if err != nil {
			t.Fatal(err)
		}
		if !got.GetIsSymlink() || got.GetSymlinkTarget() != "/no/such/target" {
			t.Errorf("entry %v, want a dangling symlink", got)
		}
	})
	t.Run("stat of nothing", func(t *testing.T) {
		_, err := sb.stat(filepath.Join(root, "missing"))
		wantCode(t, err, connect.CodeNotFound)
	})
	t.Run("stat as an unknown user", func(t *testing.T) {
		_, err := sb.fs.Stat(ctx, request(&pb.StatRequest{Path: "/"}, "ghost"))
		wantCode(t, err, connect.CodeInvalidArgument)
	})

	list := func(t *testing.T, path string, depth uint32) []string {
		t.Helper()
		res, err := sb.fs.ListDir(ctx, request(&pb.ListDirRequest{Path: path, Depth: depth}, ""))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range res.Msg.GetEntries() {
			rel, _ := filepath.Rel(root, e.GetPath())
			names = append(names, rel)
		}
		sort.Strings(names)
		return names
	}
	tests := []struct {
		name  string
		path  string
		depth uint32
		want  []string
	}{
		{"depth 0 means 1", "tree", 0, []string{"a", "dangling", "empty", "link", "top.txt"}},
		{"depth 1", root, 1, []string{"a", "dangling", "empty", "link", "top.txt"}},
		{"depth 2", "~/tree", 2, []string{"a", "a/b", "a/mid.txt", "dangling", "empty", "link", "top.txt"}},
		{"depth 9", "tree", 9, []string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/mid.txt", "dangling", "empty", "link", "top.txt"}},
	}
	for _, tt := range tests {
		t.Run("list "+tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, list(t, tt.path, tt.depth)); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("list bad input", func(t *testing.T) {
		_, err := sb.fs.ListDir(ctx, request(&pb.ListDirRequest{Path: "tree/top.txt"}, ""))
		wantCode(t, err, connect.CodeInvalidArgument)
		_, err = sb.fs.ListDir(ctx, request(&pb.ListDirRequest{Path: "nothing-here"}, ""))
		wantCode(t, err, connect.CodeNotFound)
	})
}

func TestMakeDirMoveRemove(t *testing.T) {
	sb := newSandbox(t)
	ctx := context.Background()

	res, err := sb.fs.MakeDir(ctx, request(&pb.MakeDirRequest{Path: "x/y/z"}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if e := res.Msg.GetEntry(); e.GetPath() != filepath.Join(sb.home, "x/y/z") || e.GetType() != pb.FileType_FILE_TYPE_DIRECTORY || e.GetOwner() != "user" {
		t.Errorf("made %v, want user's directory x/y/z in its home", e)
	}
	for _, d := range []string{"x", "x/y", "x/y/z"} {
		if uid := ownerOf(t, filepath.Join(sb.home, d)); uid != testUID {
			t.Errorf("%s belongs to %d, want %d", d, uid, testUID)
		}
	}
	_, err = sb.fs.MakeDir(ctx, request(&pb.MakeDirRequest{Path: "x/y/z"}, ""))
	wantCode(t, err, connect.CodeAlreadyExists)
	writeFile(t, filepath.Join(sb.home, "file"), "data")
	_, err = sb.fs.MakeDir(ctx, request(&pb.MakeDirRequest{Path: "file"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)

	t.Run("made as another user", func(t *testing.T) {
		if _, err := sb.fs.MakeDir(ctx, request(&pb.MakeDirRequest{Path: "mine"}, "other")); err != nil {
			t.Fatal(err)
		}
		entry, err := sb.stat(filepath.Join(filepath.Dir(sb.home), "other", "mine"))
		if err != nil || entry.GetOwner() != "other" {
			t.Errorf("entry %v (%v), want other's directory in other's home", entry, err)
		}
	})

	t.Run("move into new directories", func(t *testing.T) {
		res, err := sb.fs.Move(ctx, request(&pb.MoveRequest{Source: "file", Destination: "moved/into/place"}, ""))
		if err != nil {
			t.Fatal(err)
		}
		if e := res.Msg.GetEntry(); e.GetPath() != filepath.Join(sb.home, "moved/into/place") || e.GetSize() != 4 {
			t.Errorf("moved entry %v", e)
		}
		if _, err := os.Stat(filepath.Join(sb.home, "file")); !os.IsNotExist(err) {
			t.Errorf("source still there: %v", err)
		}
		_, err = sb.fs.Move(ctx, request(&pb.MoveRequest{Source: "file", Destination: "elsewhere"}, ""))
		wantCode(t, err, connect.CodeNotFound)
		_, err = sb.fs.Move(ctx, request(&pb.MoveRequest{Source: "moved", Destination: ""}, ""))
		wantCode(t, err, connect.CodeInvalidArgument)
	})

	t.Run("remove", func(t *testing.T) {
		if _, err := sb.fs.Remove(ctx, request(&pb.RemoveRequest{Path: "x"}, "")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(sb.home, "x")); !os.IsNotExist(err) {
			t.Errorf("x still there: %v", err)
		}
		_, err := sb.fs.Remove(ctx, request(&pb.RemoveRequest{Path: "x"}, ""))
		wantCode(t, err, connect.CodeNotFound)
		_, err = sb.fs.Remove(ctx, request(&pb.RemoveRequest{Path: "/"}, "root"))
		wantCode(t, err, connect.CodeInvalidArgument)
	})
}

func TestWatchDir(t *testing.T) {
	sb := newSandbox(t)
	dir := filepath.Join(sb.home, "watched")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}

	watch := func(t *testing.T, recursive bool) (<-chan *pb.FilesystemEvent, func()) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req := request(&pb.WatchDirRequest{Path: "watched", Recursive: recursive, IncludeEntry: true}, "")
		stream, err := sb.fs.WatchDir(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() || stream.Msg().GetStart() == nil {
			t.Fatalf("no start event: %v %v", stream.Msg(), stream.Err())
		}
		events := make(chan *pb.FilesystemEvent, 100)
		go func() {
			defer close(events)
			for stream.Receive() {
				if ev := stream.Msg().GetFilesystem(); ev != nil {
					events <- ev
				}
			}
		}()
		return events, func() { cancel(); stream.Close() }
	}
	// await waits for an event of typ about name.
	await := func(t *testing.T, events <-chan *pb.FilesystemEvent, name string, typ pb.EventType) *pb.FilesystemEvent {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the watch ended before %v of %s", typ, name)
				}
				if ev.GetName() == name && ev.GetType() == typ {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %v event for %s", typ, name)
			}
		}
	}

	t.Run("recursive, including directories made later", func(t *testing.T) {
		events, stop := watch(t, true)
		defer stop()
		writeFile(t, filepath.Join(dir, "top.txt"), "a")
		ev := await(t, events, "top.txt", pb.EventType_EVENT_TYPE_CREATE)
		if ev.GetEntry().GetPath() != filepath.Join(dir, "top.txt") {
			t.Errorf("event entry %v, want top.txt's", ev.GetEntry())
		}
		writeFile(t, filepath.Join(dir, "sub", "inner.txt"), "b")
		await(t, events, "sub/inner.txt", pb.EventType_EVENT_TYPE_CREATE)
		if err := os.Mkdir(filepath.Join(dir, "later"), 0o755); err != nil {
			t.Fatal(err)
		}
		await(t, events, "later", pb.EventType_EVENT_TYPE_CREATE)
		writeFile(t, filepath.Join(dir, "later", "new.txt"), "c")
		await(t, events, "later/new.txt", pb.EventType_EVENT_TYPE_WRITE)
		if err := os.Rename(filepath.Join(dir, "top.txt"), filepath.Join(dir, "renamed.txt")); err != nil {
			t.Fatal(err)
		}
		await(t, events, "top.txt", pb.EventType_EVENT_TYPE_RENAME)
		if err := os.Chmod(filepath.Join(dir, "renamed.txt"), 0o600); err != nil {
			t.Fatal(err)
		}
		await(t, events, "renamed.txt", pb.EventType_EVENT_TYPE_CHMOD)
		if err := os.Remove(filepath.Join(dir, "renamed.txt")); err != nil {
			t.Fatal(err)
		}
		if ev := await(t, events, "renamed.txt", pb.EventType_EVENT_TYPE_REMOVE); ev.Entry != nil {
			t.Errorf("a removed entry's event has entry %v", ev.Entry)
		}
	})

	t.Run("not recursive", func(t *testing.T) {
		events, stop := watch(t, false)
		defer stop()
		writeFile(t, filepath.Join(dir, "sub", "unseen.txt"), "x")
		writeFile(t, filepath.Join(dir, "seen.txt"), "x")
		await(t, events, "seen.txt", pb.EventType_EVENT_TYPE_CREATE)
		select {
		case ev := <-events:
			if filepath.Dir(ev.GetName()) != "." {
				t.Errorf("event %v from below the watched directory", ev)
			}
		default:
		}
	})

	t.Run("keepalives", func(t *testing.T) {
		req := request(&pb.WatchDirRequest{Path: "watched"}, "")
		req.Header().Set("Keepalive-Ping-Interval", "1")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := sb.fs.WatchDir(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		for stream.Receive() {
			if stream.Msg().GetKeepalive() != nil {
				return
			}
		}
		t.Fatalf("no keepalive: %v", stream.Err())
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tt := range []struct {
			path string
			want connect.Code
		}{
			{"nowhere", connect.CodeNotFound},
			{"watched/sub/unseen.txt", connect.CodeInvalidArgument},
		} {
			stream, err := sb.fs.WatchDir(context.Background(), request(&pb.WatchDirRequest{Path: tt.path}, ""))
			if err != nil {
				t.Fatal(err)
			}
			stream.Receive()
			wantCode(t, stream.Err(), tt.want)
			stream.Close()
			_, err = sb.fs.CreateWatcher(context.Background(), request(&pb.CreateWatcherRequest{Path: tt.path}, ""))
			wantCode(t, err, tt.want)
		}
	})
}

func TestPolledWatcher(t *testing.T) {
	sb := newSandbox(t)
	ctx := context.Background()
	dir := filepath.Join(sb.home, "polled")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := sb.fs.CreateWatcher(ctx, request(&pb.CreateWatcherRequest{Path: dir, Recursive: true}, ""))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	writeFile(t, filepath.Join(dir, "sub", "f.txt"), "x")
	var names []string
	eventually(t, 5*time.Second, "the polled create event", func() bool {
		res, err := sb.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range res.Msg.GetEvents() {
			names = append(names, ev.GetType().String()+" "+ev.GetName())
		}
		return slices.Contains(names, "EVENT_TYPE_CREATE sub/f.txt")
	})
	// What was returned is not returned again.
	time.Sleep(100 * time.Millisecond)
	again, err := sb.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range again.Msg.GetEvents() {
		if ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
			t.Errorf("create returned twice: %v", ev)
		}
	}
	if _, err := sb.fs.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = sb.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = sb.fs.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

func ownerOf(t testing.TB, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
