package envd

import (
	"syscall"
	"time"
)

// fileVersion identifies one version of a file or directory by what stat reports:
// writing a file changes its size, mtime or ctime, replacing it by rename changes its
// inode, and adding, removing or renaming an entry of a directory changes the
// directory's mtime and ctime.
type fileVersion struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// statVersion returns the version of the file at path, following symbolic links. It is
// a variable so that a test can stand in a file system whose times advance once per
// clock tick, which file systems with fine-grained timestamps (Linux 6.13 and later:
// ext4, xfs, btrfs, tmpfs) do not reproduce on demand.
var statVersion = func(path string) (fileVersion, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileVersion{}, err
	}
	return fileVersion{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// settleTime is how long a file's version stays in doubt after its last change. The
// kernel times changes with a clock that advances once per tick (every 4 ms at HZ=250,
// 10 ms at HZ=100): a second change within the tick of the first leaves mtime and
// ctime as they were, and a same-size rewrite then looks like no change at all.
const settleTime = 50 * time.Millisecond

// settledBy reports whether any change to the file after the moment at (not before
// its version was read) gets a ctime other than v's, so that v still being current
// proves the file unchanged since at. ctime is what a change sets to the current time,
// and no system call sets it otherwise.
func (v fileVersion) settledBy(at time.Time) bool {
	return at.Sub(time.Unix(v.ctime.Unix())) >= settleTime
}
