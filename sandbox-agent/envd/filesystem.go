package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem"
	"github.com/sandgate/sandgate/sandbox-agent/envd/spec/filesystem/filesystemconnect"
)

// filesystemService implements filesystem.Filesystem.
type filesystemService struct{ s *Service }

// target resolves a request's path for the user its Authorization header names.
func (fss filesystemService) target(h http.Header, p string) (string, *account, error) {
	u, err := fss.s.userFromHeader(h)
	if err != nil {
		return "", nil, connectError(err)
	}
	return resolvePath(p, u), u, nil
}

func (fss filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	path, _, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	entry, err := entryInfo(path, fss.s.idNames())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: entry}), nil
}

func (fss filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	path, u, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", path))
		}
		return nil, invalidArgument("%s exists and is not a directory", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, connectError(err)
	}
	if err := makeDirs(path, u); err != nil {
		return nil, connectError(err)
	}
	entry, err := entryInfo(path, fss.s.idNames())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: entry}), nil
}

func (fss filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	src, u, err := fss.target(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst := resolvePath(req.Msg.GetDestination(), u)
	if req.Msg.GetSource() == "" || req.Msg.GetDestination() == "" {
		return nil, invalidArgument("source and destination are required")
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, connectError(err)
	}
	if err := makeDirs(filepath.Dir(dst), u); err != nil {
		return nil, connectError(err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, connectError(err)
	}
	entry, err := entryInfo(dst, fss.s.idNames())
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: entry}), nil
}

func (fss filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	path, _, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	// The listed directory may be a symlink; what is below it is walked without
	// following links, and reported under the path as asked.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, connectError(err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, connectError(err)
	}
	if !fi.IsDir() {
		return nil, invalidArgument("%s is not a directory", path)
	}
	names := fss.s.idNames()
	var entries []*pb.EntryInfo
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != real && errors.Is(err, fs.ErrPermission) {
				return nil // a subdirectory the agent may not read is listed, not entered
			}
			return err
		}
		if p == real {
			return nil
		}
		rel, _ := filepath.Rel(real, p)
		level := strings.Count(rel, string(filepath.Separator)) + 1
		if level > depth {
			return filepath.SkipDir
		}
		entry, err := entryInfo(filepath.Join(path, rel), names)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while listed
		}
		if err != nil {
			return err
		}
		entries = append(entries, entry)
		if d.IsDir() && level == depth {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

func (fss filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	path, _, err := fss.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if path == "/" {
		return nil, invalidArgument("refusing to remove /")
	}
	if _, err := os.Lstat(path); err != nil {
		return nil, connectError(err)
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// entryInfo describes the entry at path (a symlink itself, not what it points to).
func entryInfo(path string, names idNames) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	e := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Type:         fileType(fi.Mode()),
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = names.user(st.Uid)
		e.Group = names.group(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		e.IsSymlink = true
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			// A dangling link: its text is all there is to say.
			target, _ = os.Readlink(path)
		}
		e.SymlinkTarget = &target
	}
	e.Metadata = readMetadata(path)
	return e, nil
}

// fileType is the protocol's type of a mode: a symlink is FILE_TYPE_SYMLINK (and
// is_symlink), anything not a directory or symlink counts as a file.
func fileType(m fs.FileMode) pb.FileType {
	switch {
	case m.IsDir():
		return pb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	default:
		return pb.FileType_FILE_TYPE_FILE
	}
}

// makeDirs creates dir and its missing parents, each owned by u.
func makeDirs(dir string, u *account) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := chownTo(missing[i], u); err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
		}
	}
	return nil
}

// chownTo gives path to u, unless the agent is u already.
func chownTo(path string, u *account) error {
	if u.UID == uint32(os.Getuid()) && u.GID == uint32(os.Getgid()) {
		return nil
	}
	return os.Lchown(path, int(u.UID), int(u.GID))
}

var _ filesystemconnect.FilesystemHandler = filesystemService{}
