package docker

// Host volumes are mounted from a staging path, not from the path that was judged.
//
// The gateway resolves a host volume's path (every symlink and "..") and admission
// judges the result; were that string handed to the engine, the engine would resolve it
// again when it starts the container, and a process that can write under an allowed
// prefix could swap a directory on the way for a symlink in between
// (renameat2(RENAME_EXCHANGE)): the engine would mount wherever the symlink leads. So
// the runtime opens the judged path itself, refusing any symlink on the way
// (openat2 RESOLVE_NO_SYMLINKS: the judged path has none, so one found now was put
// there since), and bind-mounts what it opened — the open file, not a path — onto a
// staging path under hostStagingRoot, a root-only directory no sandbox can reach. The
// engine mounts that staging path, which nothing can change. Staging mounts go with
// their sandbox (Delete, a failed create) and, should a gateway die first, with the
// next helper sweep.
//
// It needs the gateway in the engine's mount namespace with CAP_SYS_ADMIN (root on the
// engine's host), as host volumes need the gateway to see the engine's filesystem.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/runtimes"
)

// hostStagingRoot holds one directory per sandbox with host volumes, and in it one
// staging mount point per volume (by its index in the spec).
const hostStagingRoot = "/run/sandgate/host-volumes"

// errHostPathChanged is a host volume whose path no longer leads where it was judged.
var errHostPathChanged = errors.New("the host path changed after it was checked (a symlink on its way)")

// stageHostVolume opens hostPath without following any symlink and bind-mounts it onto
// the staging path of sandbox id's volume index, which it returns.
func stageHostVolume(id string, index int, hostPath string) (string, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, hostPath, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return "", fmt.Errorf("%w: %w", runtimes.ErrVolumeHostChanged, errHostPathChanged)
	case err != nil:
		return "", fmt.Errorf("open host volume: %w", err)
	}
	defer unix.Close(fd)
	return stageOpened(id, index, fd)
}

// stageVolumeSubPath stages subPath of a named volume whose directory on the engine's
// host is volumeDir, for an engine that cannot mount a volume's sub-path itself. The
// volume's content is the workload's to write, so subPath is walked one name at a time
// beneath volumeDir, refusing any symlink (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), and a
// missing directory on the way is made, as Kubernetes makes a missing subPath.
func stageVolumeSubPath(id string, index int, volumeDir, subPath string) (string, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, volumeDir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "", fmt.Errorf("open the volume's directory: %w", err)
	}
	names := strings.Split(filepath.Clean(subPath), "/")
	for i, name := range names {
		if name == "" || name == "." || name == ".." {
			unix.Close(fd)
			return "", fmt.Errorf("subPath %q: %w", subPath, runtimes.ErrVolumeUnsupported)
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		next, err := unix.Openat2(fd, name, how)
		if errors.Is(err, unix.ENOENT) {
			// mkdirat of one name never follows a symlink of that name (EEXIST).
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat2(fd, name, how)
			}
		}
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || (errors.Is(err, unix.ENOTDIR) && i < len(names)-1):
			return "", fmt.Errorf("subPath %q: %w", subPath, runtimes.ErrVolumeSubPathSymlink)
		case err != nil:
			return "", fmt.Errorf("open the volume's subPath: %w", err)
		}
		fd = next
	}
	defer unix.Close(fd)
	return stageOpened(id, index, fd)
}

// stageOpened bind-mounts the file or directory fd (an O_PATH descriptor) onto the
// staging path of sandbox id's volume index, which it returns.
func stageOpened(id string, index int, fd int) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("stat host volume: %w", err)
	}
	dir := filepath.Join(hostStagingRoot, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("host volume staging: %w", err)
	}
	if err := os.Chmod(hostStagingRoot, 0o700); err != nil {
		return "", fmt.Errorf("host volume staging: %w", err)
	}
	target := filepath.Join(dir, strconv.Itoa(index))
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o700)
	} else {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			err = f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("host volume staging: %w", err)
	}
	// The magic link of an O_PATH descriptor names the very file it opened.
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind the host volume onto its staging path: %w", err)
	}
	if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return "", fmt.Errorf("make the host volume's staging mount private: %w", err)
	}
	return target, nil
}

// unstageHostVolumes removes sandbox id's staging mounts and their directory.
func unstageHostVolumes(id string) {
	dir := filepath.Join(hostStagingRoot, id)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		for unix.Unmount(p, unix.MNT_DETACH) == nil {
		}
		_ = os.Remove(p)
	}
	_ = os.Remove(dir)
}

// stagingGrace is how old a staging directory must be before the sweep may take it for
// one a dead gateway left: a create in flight stages its volumes before its container
// exists.
const stagingGrace = 10 * time.Minute

// sweepHostStaging removes the staging mounts of sandboxes that have no container (a
// gateway died between staging and cleanup). It costs nothing while no staging
// directory is old enough.
func (r *Runtime) sweepHostStaging(ctx context.Context) {
	entries, err := os.ReadDir(hostStagingRoot)
	if err != nil {
		return
	}
	var old []string
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > stagingGrace {
			old = append(old, e.Name())
		}
	}
	if len(old) == 0 {
		return
	}
	workloads, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", runtimes.LabelID),
	})
	if err != nil {
		return
	}
	live := make(map[string]bool, len(workloads.Items))
	for _, c := range workloads.Items {
		live[c.Labels[runtimes.LabelID]] = true
	}
	for _, id := range old {
		if !live[id] {
			unstageHostVolumes(id)
		}
	}
}
