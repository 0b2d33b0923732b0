package envd

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// account is a user of the sandbox, read from its passwd and group files.
type account struct {
	Name string
	UID  uint32
	GID  uint32
	Home string
	// Groups are the supplementary groups the group file lists the user in.
	Groups []uint32
}

// errUnknownUser is a user name the sandbox's passwd file does not list.
var errUnknownUser = errors.New("no such user in the sandbox")

// errBadAuthorization is an Authorization header that is not Basic base64("name:…").
var errBadAuthorization = errors.New("the Authorization header must be Basic base64(\"username:\")")

// userFromHeader is the account an RPC acts as: the user named in the Authorization
// header (Basic, the name before the colon; the password part is not used), or the
// default user when there is none.
func (s *Service) userFromHeader(h http.Header) (*account, error) {
	v := h.Get("Authorization")
	if v == "" {
		return s.lookupUser("")
	}
	scheme, encoded, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return nil, errBadAuthorization
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return nil, errBadAuthorization
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return s.lookupUser(name)
}

// lookupUser finds name in the sandbox's passwd file. The empty name is the default
// user (Config.DefaultUser) when the sandbox has one, else the agent's own user: an
// image made for E2B has `user`, any other image still gets an answer.
func (s *Service) lookupUser(name string) (*account, error) {
	users, err := s.accounts.read(s.cfg.PasswdFile, s.cfg.GroupFile)
	if err != nil {
		return nil, err
	}
	if name != "" {
		a := users.find(func(e passwdEntry) bool { return e.name == name })
		if a == nil {
			return nil, fmt.Errorf("user %q: %w", name, errUnknownUser)
		}
		return a, nil
	}
	if a := users.find(func(e passwdEntry) bool { return e.name == s.cfg.DefaultUser }); a != nil {
		return a, nil
	}
	uid := uint32(os.Getuid())
	if a := users.find(func(e passwdEntry) bool { return e.uid == uid }); a != nil {
		return a, nil
	}
	home, _ := os.UserHomeDir()
	if home == "" {
		home = "/"
	}
	return &account{Name: strconv.FormatUint(uint64(uid), 10), UID: uid, GID: uint32(os.Getgid()), Home: home}, nil
}

type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

type groupEntry struct {
	gid     uint32
	members []string
}

// accountFiles is the sandbox's passwd and group files, parsed.
type accountFiles struct {
	users  []passwdEntry
	groups []groupEntry
}

// accountCache keeps the parsed passwd and group files while both keep their version
// (fileVersion): every process start looks its user up, and the files rarely change.
type accountCache struct {
	mu                          sync.Mutex
	passwdVersion, groupVersion fileVersion
	// settled is whether the versions prove the parsed files current
	// (fileVersion.settledBy).
	settled bool
	files   *accountFiles
}

// read returns the parsed files, reading them again when either has changed.
func (c *accountCache) read(passwdFile, groupFile string) (*accountFiles, error) {
	at := time.Now()
	passwdVersion, err := statVersion(passwdFile)
	if err != nil {
		return nil, fmt.Errorf("read the sandbox's users: %w", err)
	}
	// A group file that cannot be read lists no one; its appearance changes its version.
	groupVersion, _ := statVersion(groupFile)
	c.mu.Lock()
	files := c.files
	current := files != nil && c.settled && c.passwdVersion == passwdVersion && c.groupVersion == groupVersion
	c.mu.Unlock()
	if current {
		return files, nil
	}
	users, err := readPasswd(passwdFile)
	if err != nil {
		return nil, err
	}
	files = &accountFiles{users: users, groups: readGroups(groupFile)}
	c.mu.Lock()
	c.files, c.passwdVersion, c.groupVersion = files, passwdVersion, groupVersion
	c.settled = passwdVersion.settledBy(at) && (groupVersion == fileVersion{} || groupVersion.settledBy(at))
	c.mu.Unlock()
	return files, nil
}

// find returns the first user that match accepts, with its groups, or nil.
func (f *accountFiles) find(match func(passwdEntry) bool) *account {
	for _, e := range f.users {
		if !match(e) {
			continue
		}
		home := e.home
		if home == "" {
			home = "/"
		}
		return &account{Name: e.name, UID: e.uid, GID: e.gid, Home: home, Groups: f.memberGroups(e.name, e.gid)}
	}
	return nil
}

// memberGroups lists the groups other than primary whose member list names user.
func (f *accountFiles) memberGroups(user string, primary uint32) []uint32 {
	var out []uint32
	for _, g := range f.groups {
		if g.gid != primary && slices.Contains(g.members, user) {
			out = append(out, g.gid)
		}
	}
	return out
}

// readPasswd parses a passwd file.
func readPasswd(passwdFile string) ([]passwdEntry, error) {
	f, err := os.Open(passwdFile)
	if err != nil {
		return nil, fmt.Errorf("read the sandbox's users: %w", err)
	}
	defer f.Close()
	var users []passwdEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		uid, err1 := strconv.ParseUint(fields[2], 10, 32)
		gid, err2 := strconv.ParseUint(fields[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		users = append(users, passwdEntry{name: fields[0], uid: uint32(uid), gid: uint32(gid), home: fields[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the sandbox's users: %w", err)
	}
	return users, nil
}

// readGroups parses a group file; one that cannot be read lists no groups.
func readGroups(groupFile string) []groupEntry {
	f, err := os.Open(groupFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var groups []groupEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:gid:member,member
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 {
			continue
		}
		gid, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		groups = append(groups, groupEntry{gid: uint32(gid), members: strings.Split(fields[3], ",")})
	}
	return groups
}

// idNames names the owners and groups of entries: the sandbox's passwd and group
// names, read once per request, or the id in decimal where the sandbox has none.
type idNames struct {
	users, groups map[uint32]string
}

func (s *Service) idNames() idNames {
	return idNames{users: readIDNames(s.cfg.PasswdFile), groups: readIDNames(s.cfg.GroupFile)}
}

// readIDNames maps the ids (third field) of a passwd or group file to their names.
func readIDNames(file string) map[uint32]string {
	out := map[uint32]string{}
	f, err := os.Open(file)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
			if _, seen := out[uint32(id)]; !seen {
				out[uint32(id)] = fields[0]
			}
		}
	}
	return out
}

func (n idNames) user(uid uint32) string  { return nameOr(n.users, uid) }
func (n idNames) group(gid uint32) string { return nameOr(n.groups, gid) }

func nameOr(names map[uint32]string, id uint32) string {
	if name, ok := names[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// resolvePath makes p absolute for the user: "~" and "~/…" are in the user's home, a
// relative path is relative to it, and "" is the home itself.
func resolvePath(p string, u *account) string {
	switch {
	case p == "" || p == "~":
		return filepath.Clean(u.Home)
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(u.Home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	default:
		return filepath.Join(u.Home, p)
	}
}
