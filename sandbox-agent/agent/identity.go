package agent

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// identityPrefix is the form of the file and directory routes that act as a given user:
// /v1/filesystem/{uid}/{gid}/files/upload writes the file as uid:gid, with that user's
// permission checks (OpenSandbox's identity-aware execd; its SDKs' files_with_identity).
const identityPrefix = "/v1/filesystem/{uid}/{gid}"

// asIdentity serves h as the uid and gid of the request's path: the handler's goroutine
// is locked to its thread and the thread's filesystem uid and gid and supplementary
// groups are switched for the handler's duration (Linux keeps them per thread), so what
// the handler opens, creates and removes is checked and owned as that user, while every
// other thread of the agent stays itself. File handlers start no goroutines, so all
// their file system calls run on that thread.
func (s *Server) asIdentity(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		uid, err1 := parseID(r.PathValue("uid"))
		gid, err2 := parseID(r.PathValue("gid"))
		if err := errors.Join(err1, err2); err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "uid and gid must be integers between 0 and 4294967294: "+err.Error())
			return
		}
		runtime.LockOSThread()
		restore, err := becomeFSIdentity(uid, gid)
		if err != nil {
			runtime.UnlockOSThread()
			writeError(w, http.StatusForbidden, CodePermissionDenied, err.Error())
			return
		}
		defer func() {
			// A thread that could not be restored is left locked: the goroutine's end
			// then ends the thread with it instead of handing it back to the scheduler.
			if restore() == nil {
				runtime.UnlockOSThread()
			}
		}()
		h(w, r)
	}
}

func parseID(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("invalid id %q", v)
	}
	return uint32(n), nil
}

// becomeFSIdentity switches the calling thread's filesystem ids and supplementary groups
// to uid/gid and returns what switches them back. The thread must be locked.
func becomeFSIdentity(uid, gid uint32) (restore func() error, err error) {
	groups, err := threadGroups()
	if err != nil {
		return nil, fmt.Errorf("read the agent's groups: %w", err)
	}
	oldGID := setfsgid(-1)
	oldUID := setfsuid(-1)
	restore = func() error {
		setfsuid(oldUID)
		setfsgid(oldGID)
		serr := setThreadGroups(groups)
		if setfsuid(-1) != oldUID || setfsgid(-1) != oldGID || serr != nil {
			return errors.New("cannot restore the agent's identity")
		}
		return nil
	}
	if uint32(oldUID) == uid && uint32(oldGID) == gid {
		return restore, nil
	}
	// setfsuid and setfsgid answer the previous id whether or not they changed it: a
	// second call tells whether the first took.
	if err := setThreadGroups([]uint32{gid}); err != nil {
		_ = restore()
		return nil, fmt.Errorf("the agent cannot act as %d:%d: %w", uid, gid, err)
	}
	setfsgid(int(gid))
	setfsuid(int(uid))
	if setfsgid(-1) != int(gid) || setfsuid(-1) != int(uid) {
		_ = restore()
		return nil, fmt.Errorf("the agent cannot act as %d:%d: it may not change its file system ids", uid, gid)
	}
	return restore, nil
}

// threadGroups and setThreadGroups read and set the calling thread's supplementary
// groups with the raw system call: unix.Setgroups changes every thread of the process.
func threadGroups() ([]uint32, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if errno != 0 {
		return nil, errno
	}
	groups := make([]uint32, n+1)
	n, _, errno = unix.RawSyscall(unix.SYS_GETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
	if errno != 0 {
		return nil, errno
	}
	return groups[:n], nil
}

func setThreadGroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// setfsuid and setfsgid set the calling thread's filesystem id (-1 changes nothing) and
// answer the previous one.
func setfsuid(id int) int {
	prev, _ := unix.SetfsuidRetUid(id)
	return prev
}

func setfsgid(id int) int {
	prev, _ := unix.SetfsgidRetGid(id)
	return prev
}
