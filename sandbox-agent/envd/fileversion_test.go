package envd

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// loginTree is an /etc and a home of a test's own, with a profile in each and one
// file in /etc/profile.d.
type loginTree struct {
	etc, home string
	files     *loginFiles
}

func newLoginTree(t *testing.T) *loginTree {
	t.Helper()
	dir := t.TempDir()
	tree := &loginTree{etc: filepath.Join(dir, "etc"), home: filepath.Join(dir, "home")}
	for _, d := range []string{filepath.Join(tree.etc, "profile.d"), tree.home, filepath.Join(dir, "elsewhere")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(tree.etc, "profile"), "export A=1\n")
	write(t, filepath.Join(tree.etc, "profile.d", "a.sh"), "export B=1\n")
	write(t, filepath.Join(tree.home, ".profile"), "export C=1\n")
	// ~/.bashrc names a file that does not exist yet.
	if err := os.Symlink(filepath.Join(dir, "elsewhere", "rc"), filepath.Join(tree.home, ".bashrc")); err != nil {
		t.Fatal(err)
	}
	tree.files = &loginFiles{etc: tree.etc}
	return tree
}

// coarseTimestamps makes statVersion report times as a kernel does whose file system
// clock advances once per 10 ms tick (HZ=100, no fine-grained timestamps): two changes
// within one tick leave the same times.
func coarseTimestamps(t *testing.T) {
	real := statVersion
	t.Cleanup(func() { statVersion = real })
	const tick = int64(10 * time.Millisecond)
	round := func(ts syscall.Timespec) syscall.Timespec {
		return syscall.NsecToTimespec(ts.Nano() / tick * tick)
	}
	statVersion = func(path string) (fileVersion, error) {
		v, err := real(path)
		v.mtime, v.ctime = round(v.mtime), round(v.ctime)
		return v, err
	}
}

func (tree *loginTree) stamp() (string, bool) { return tree.files.stamp(tree.home) }

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// loginChanges are changes a login shell would see, each applied to a fresh tree.
var loginChanges = []struct {
	name   string
	change func(t *testing.T, tree *loginTree)
}{
	{"profile edited, same size", func(t *testing.T, tree *loginTree) {
		write(t, filepath.Join(tree.home, ".profile"), "export C=2\n")
	}},
	{"profile replaced by rename", func(t *testing.T, tree *loginTree) {
		tmp := filepath.Join(tree.home, ".profile.new")
		write(t, tmp, "export C=1\n")
		mustDo(t, os.Rename(tmp, filepath.Join(tree.home, ".profile")))
	}},
	{"profile removed", func(t *testing.T, tree *loginTree) {
		mustDo(t, os.Remove(filepath.Join(tree.home, ".profile")))
	}},
	{"bash_profile created", func(t *testing.T, tree *loginTree) {
		write(t, filepath.Join(tree.home, ".bash_profile"), "export D=1\n")
	}},
	{"local bin created", func(t *testing.T, tree *loginTree) {
		mustDo(t, os.MkdirAll(filepath.Join(tree.home, ".local", "bin"), 0o755))
	}},
	{"symbolic link target created", func(t *testing.T, tree *loginTree) {
		target, err := os.Readlink(filepath.Join(tree.home, ".bashrc"))
		mustDo(t, err)
		write(t, target, "export E=1\n")
	}},
	{"etc bashrc created", func(t *testing.T, tree *loginTree) {
		write(t, filepath.Join(tree.etc, "bashrc"), "export F=1\n")
	}},
	{"profile.d entry added", func(t *testing.T, tree *loginTree) {
		write(t, filepath.Join(tree.etc, "profile.d", "b.sh"), "export G=1\n")
	}},
	{"profile.d entry removed", func(t *testing.T, tree *loginTree) {
		mustDo(t, os.Remove(filepath.Join(tree.etc, "profile.d", "a.sh")))
	}},
	{"profile.d entry edited, same size", func(t *testing.T, tree *loginTree) {
		write(t, filepath.Join(tree.etc, "profile.d", "a.sh"), "export B=2\n")
	}},
}

// TestLoginStampSeesChanges: every change a login shell would see changes the stamp of
// a tree that had settled, whether the stamp had listed its directories before or not.
func TestLoginStampSeesChanges(t *testing.T) {
	for _, tt := range loginChanges {
		t.Run(tt.name, func(t *testing.T) {
			tree := newLoginTree(t)
			time.Sleep(settleTime)
			before, settled := tree.stamp()
			if !settled {
				t.Fatalf("stamp not settled %v after the tree was written", settleTime)
			}
			if again, _ := tree.stamp(); again != before {
				t.Fatalf("stamp changed with no change:\n%s\n%s", before, again)
			}
			tt.change(t, tree)
			if after, _ := tree.stamp(); after == before {
				t.Errorf("stamp unchanged: %s", after)
			}
		})
	}
}

// TestLoginStampSeesChangesWithinATick: on a file system with coarse timestamps, a
// change that follows another within one tick leaves the times as the first set them.
// The stamp taken
// between the two is not settled (no probe runs with it), and the listing
// it made is not trusted later: the second file is stamped once things settle, so an
// edit of it is seen.
func TestLoginStampSeesChangesWithinATick(t *testing.T) {
	cases := []struct {
		name        string
		dir         func(tree *loginTree) string
		first, then string
	}{
		{"home", func(tree *loginTree) string { return tree.home }, ".bash_login", ".bash_profile"},
		{"profile.d", func(tree *loginTree) string { return filepath.Join(tree.etc, "profile.d") }, "b.sh", "c.sh"},
	}
	coarseTimestamps(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			// Run it a few times: some runs cross a tick, which the stamp sees anyway.
			for range 5 {
				tree := newLoginTree(t)
				time.Sleep(settleTime)
				dir := tt.dir(tree)
				write(t, filepath.Join(dir, tt.first), "true\n")
				between, settled := tree.stamp()
				write(t, filepath.Join(dir, tt.then), "export X=1\n")
				if now, _ := tree.stamp(); now == between && settled {
					t.Fatalf("%s created in the tick of %s: stamp unchanged and settled", tt.then, tt.first)
				}
				time.Sleep(settleTime)
				before, settled := tree.stamp()
				if !settled {
					t.Fatalf("stamp not settled %v after the last change", settleTime)
				}
				write(t, filepath.Join(dir, tt.then), "export X=2\n")
				if after, _ := tree.stamp(); after == before {
					t.Fatalf("%s edited: stamp unchanged: %s", tt.then, after)
				}
			}
		})
	}
}

// TestLoginStampSameSizeEditWithinATick: on a file system with coarse timestamps, a
// profile rewritten to the same size within the tick of its previous write keeps its
// times; the stamp taken between the two writes is not settled, so no probe runs with
// it.
func TestLoginStampSameSizeEditWithinATick(t *testing.T) {
	coarseTimestamps(t)
	tree := newLoginTree(t)
	profile := filepath.Join(tree.home, ".profile")
	for i := range 5 {
		write(t, profile, "export C=1\n")
		before, settled := tree.stamp()
		write(t, profile, "export C=2\n")
		if after, _ := tree.stamp(); after == before && settled {
			t.Fatalf("run %d: same-size rewrite: stamp unchanged and settled", i)
		}
	}
}

// TestAccountCacheRereads: a passwd or group file rewritten, in place or by rename, is
// read again, also when the rewrite keeps its size within one tick of a file system
// with coarse timestamps.
func TestAccountCacheRereads(t *testing.T) {
	coarseTimestamps(t)
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	var cache accountCache
	home := func(name string) string {
		t.Helper()
		files, err := cache.read(passwd, group)
		mustDo(t, err)
		a := files.find(func(e passwdEntry) bool { return e.name == name })
		if a == nil {
			return "(none)"
		}
		return a.Home
	}
	groups := func(name string) int {
		t.Helper()
		files, err := cache.read(passwd, group)
		mustDo(t, err)
		return len(files.find(func(e passwdEntry) bool { return e.name == name }).Groups)
	}
	for i := range 5 {
		write(t, passwd, "user:x:1000:1000::/home/aaaa:/bin/bash\n")
		write(t, group, "user:x:1000:\nextra:x:2000:resu\n")
		if got := home("user"); got != "/home/aaaa" {
			t.Fatalf("run %d: home %q", i, got)
		}
		if got := groups("user"); got != 0 {
			t.Fatalf("run %d: %d groups", i, got)
		}
		// The same size, likely within the same tick.
		write(t, passwd, "user:x:1000:1000::/home/bbbb:/bin/bash\n")
		write(t, group, "user:x:1000:\nextra:x:2000:user\n")
		if got := home("user"); got != "/home/bbbb" {
			t.Fatalf("run %d: after a same-size rewrite, home %q", i, got)
		}
		if got := groups("user"); got != 1 {
			t.Fatalf("run %d: after a same-size rewrite of the group file, %d groups", i, got)
		}
	}
	time.Sleep(settleTime)
	home("user")
	tmp := filepath.Join(dir, "passwd.new")
	write(t, tmp, "user:x:1000:1000::/home/bbbb:/bin/bash\nnew:x:1001:1001::/home/new:/bin/bash\n")
	mustDo(t, os.Rename(tmp, passwd))
	if got := home("new"); got != "/home/new" {
		t.Errorf("user added by rename: home %q", got)
	}
}
