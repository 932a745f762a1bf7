// Package gitrepo reads what a job's run records of the git repository its
// code is in: the commit checked out, the branch, and the first remote's
// URL, as MLflow's client records them (mlflow/utils/git_utils.py, through
// GitPython, which reads these from the repository's files too).
//
// It reads the files under .git through internal/kfile, each bounded in
// size and all within the caller's ctx, and runs no git: a training image
// often has no git, a repository owned by another user makes git refuse
// to read it (safe.directory), and a process started before the child
// would run in the job's cgroup. What it does not read (a reftable
// repository, git's includes and url rewrites) it leaves out, never
// guesses.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bridge-dev/bridge/internal/kfile"
)

// Head is what a repository says of its checkout; a field not known is "".
type Head struct {
	Commit  string // the hex id HEAD resolves to; "" on a branch with no commit yet
	Branch  string // the branch HEAD names; "" when HEAD is detached
	RepoURL string // the first remote's url, without user or password
}

// Caps of the files read: a ref or HEAD is one line, a repository's config
// is a small file, packed-refs holds every tag of a large repository.
const (
	maxRef        = kfile.Value
	maxConfig     = kfile.Table
	maxPackedRefs = 16 << 20
	maxSymlinks   = 5 // symbolic refs followed before giving up
	maxParents    = 64
)

// ErrNoRepo means no directory from dir up to the root holds a .git.
var ErrNoRepo = errors.New("not in a git repository")

// errUnsupported means the repository keeps its refs in a form this
// package does not read (reftable).
var errUnsupported = errors.New("refs in a format bridge does not read (reftable)")

// Read returns the Head of the repository dir is in, looking for .git in
// dir and its parents as GitPython does (search_parent_directories).
func Read(ctx context.Context, dir string) (Head, error) {
	gitDir, err := find(ctx, dir)
	if err != nil {
		return Head{}, err
	}
	common := gitDir
	if b, err := kfile.ReadFile(ctx, filepath.Join(gitDir, "commondir"), maxRef); err == nil {
		// A worktree: its HEAD is its own, refs and config are shared.
		common = relTo(gitDir, strings.TrimSpace(string(b)))
	}
	var h Head
	head, err := kfile.ReadFile(ctx, filepath.Join(gitDir, "HEAD"), maxRef)
	if err != nil {
		return Head{}, fmt.Errorf("reading %s: %w", filepath.Join(gitDir, "HEAD"), err)
	}
	line := strings.TrimSpace(string(head))
	if ref, ok := strings.CutPrefix(line, "ref:"); ok {
		ref = strings.TrimSpace(ref)
		if ref == "refs/heads/.invalid" {
			return Head{}, errUnsupported
		}
		h.Branch, _ = strings.CutPrefix(ref, "refs/heads/")
		if h.Commit, err = resolve(ctx, gitDir, common, ref); err != nil {
			return Head{}, err
		}
	} else if isHex(line) {
		h.Commit = line
	} else {
		return Head{}, fmt.Errorf("%s: not a ref or a commit id", filepath.Join(gitDir, "HEAD"))
	}
	cfg, err := kfile.ReadFile(ctx, filepath.Join(common, "config"), maxConfig)
	switch {
	case err == nil:
		h.RepoURL = stripCredentials(firstRemoteURL(string(cfg)))
	case !kfile.IsAbsent(err):
		return h, fmt.Errorf("reading %s: %w", filepath.Join(common, "config"), err)
	}
	return h, nil
}

// find returns the git directory of the repository dir is in: dir/.git
// when it is a directory, the one a .git file names (a worktree, a
// submodule), else the same in dir's parents.
func find(ctx context.Context, dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for range maxParents {
		dotGit := filepath.Join(dir, ".git")
		if st, err := kfile.Stat(ctx, dotGit); err == nil {
			if st.IsDir() {
				return dotGit, nil
			}
			b, err := kfile.ReadFile(ctx, dotGit, maxRef)
			if err != nil {
				return "", fmt.Errorf("reading %s: %w", dotGit, err)
			}
			if p, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:"); ok {
				return relTo(dir, strings.TrimSpace(p)), nil
			}
			return "", fmt.Errorf("%s: not a gitdir file", dotGit)
		} else if ctx.Err() != nil {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", ErrNoRepo
}

// relTo is p, relative to base when it is not absolute.
func relTo(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// resolve returns the commit id ref names: a loose ref (in the worktree's
// git directory for its own refs, else the common one), else packed-refs;
// "" for a branch with no commit yet.
func resolve(ctx context.Context, gitDir, common, ref string) (string, error) {
	if kfile.Exists(ctx, filepath.Join(common, "reftable")) {
		return "", errUnsupported
	}
	for range maxSymlinks {
		if !validRef(ref) {
			return "", fmt.Errorf("HEAD names %q, not a ref", ref)
		}
		var b []byte
		var err error
		for _, d := range []string{gitDir, common} {
			if b, err = kfile.ReadFile(ctx, filepath.Join(d, ref), maxRef); err == nil || !kfile.IsAbsent(err) {
				break
			}
		}
		if err != nil && !kfile.IsAbsent(err) {
			return "", fmt.Errorf("reading ref %s: %w", ref, err)
		}
		if err == nil {
			line := strings.TrimSpace(string(b))
			if next, ok := strings.CutPrefix(line, "ref:"); ok {
				ref = strings.TrimSpace(next)
				continue
			}
			if !isHex(line) {
				return "", fmt.Errorf("ref %s holds no commit id", ref)
			}
			return line, nil
		}
		return packed(ctx, common, ref)
	}
	return "", fmt.Errorf("ref %s: more than %d symbolic refs", ref, maxSymlinks)
}

// packed returns ref's id in packed-refs, "" when it is not there (a
// branch with no commit yet).
func packed(ctx context.Context, common, ref string) (string, error) {
	b, err := kfile.ReadFile(ctx, filepath.Join(common, "packed-refs"), maxPackedRefs)
	if kfile.IsAbsent(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading packed-refs: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		id, name, ok := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		if ok && name == ref && isHex(id) {
			return id, nil
		}
	}
	return "", nil
}

// validRef keeps a ref read from HEAD inside the git directory.
func validRef(ref string) bool {
	return strings.HasPrefix(ref, "refs/") && !strings.Contains(ref, "..") && !strings.ContainsAny(ref, "\x00\\") &&
		filepath.Clean(ref) == ref
}

// isHex reports a full object id: 40 hex digits (SHA-1) or 64 (SHA-256).
func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// firstRemoteURL is the url of the first [remote "..."] section of a git
// config, in the file's order, as GitPython's repo.remotes lists them
// (the repository's own config only); "" when there is none.
func firstRemoteURL(cfg string) string {
	inRemote, seen := false, false
	url := ""
	for line := range strings.Lines(cfg) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			if seen {
				return url
			}
			inRemote = strings.HasPrefix(strings.ToLower(line), "[remote ") && strings.Contains(line, `"`)
			seen = inRemote
			continue
		}
		if !inRemote {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "url") {
			url = configValue(v) // the last one wins, as GitPython's get
		}
	}
	return url
}

// configValue is a git config value: comments (# or ;) outside quotes cut,
// quotes removed, surrounding space trimmed.
func configValue(v string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteByte(v[i])
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

// stripCredentials removes a user and password from a URL with a scheme,
// as MLflow does before it records a repository's URL
// (_strip_credentials_from_url, on Python's urlsplit): the part of the
// authority up to its last '@' goes, the scheme is lowercased;
// git@host:path and other URLs without a scheme stay as they are.
func stripCredentials(raw string) string {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || !validScheme(scheme) || !strings.HasPrefix(rest, "//") {
		return raw
	}
	authority := rest[2:]
	if end := strings.IndexAny(authority, "/?#"); end >= 0 {
		authority = authority[:end]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return strings.ToLower(scheme) + "://" + authority[at+1:] + rest[2+len(authority):]
}

// validScheme is Python's urlsplit rule for a scheme: a letter, then
// letters, digits, '+', '-' or '.'.
func validScheme(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
