package gitrepo

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitIn runs git in dir and returns its trimmed output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a repository with one commit on branch main and two
// remotes, the first with credentials in its URL.
func newRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the repositories these tests read are made with it")
	}
	dir := t.TempDir()
	gitIn(t, dir, "init", "-q", "-b", "main")
	gitIn(t, dir, "remote", "add", "origin", "https://user:s3cret@git.example.com/org/repo.git")
	gitIn(t, dir, "remote", "add", "mirror", "https://mirror.example.com/repo.git")
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("print(1)\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755)
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-q", "-m", "one")
	return dir
}

func TestRead(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	want := Head{Commit: gitIn(t, dir, "rev-parse", "HEAD"), Branch: "main", RepoURL: "https://git.example.com/org/repo.git"}

	t.Run("loose ref, from a subdirectory", func(t *testing.T) {
		got, err := Read(ctx, filepath.Join(dir, "sub", "deeper"))
		if err != nil || got != want {
			t.Fatalf("Read = %+v, %v; want %+v", got, err, want)
		}
	})
	t.Run("packed refs", func(t *testing.T) {
		d := newRepo(t)
		gitIn(t, d, "pack-refs", "--all")
		if _, err := os.Stat(filepath.Join(d, ".git", "refs", "heads", "main")); !os.IsNotExist(err) {
			t.Fatalf("the ref is still loose after pack-refs: %v", err)
		}
		got, err := Read(ctx, d)
		if w := gitIn(t, d, "rev-parse", "HEAD"); err != nil || got.Commit != w || got.Branch != "main" {
			t.Fatalf("Read = %+v, %v; want commit %s on main", got, err, w)
		}
	})
	t.Run("detached HEAD", func(t *testing.T) {
		d := newRepo(t)
		id := gitIn(t, d, "rev-parse", "HEAD")
		gitIn(t, d, "checkout", "-q", "--detach")
		got, err := Read(ctx, d)
		if err != nil || got.Commit != id || got.Branch != "" {
			t.Fatalf("Read = %+v, %v; want commit %s and no branch", got, err, id)
		}
	})
	t.Run("a worktree", func(t *testing.T) {
		d := newRepo(t)
		wt := filepath.Join(t.TempDir(), "wt")
		gitIn(t, d, "worktree", "add", "-q", "-b", "feature", wt)
		os.WriteFile(filepath.Join(wt, "more.py"), []byte("\n"), 0o644)
		gitIn(t, wt, "add", ".")
		gitIn(t, wt, "commit", "-q", "-m", "two")
		got, err := Read(ctx, wt)
		w := Head{Commit: gitIn(t, wt, "rev-parse", "HEAD"), Branch: "feature", RepoURL: "https://git.example.com/org/repo.git"}
		if err != nil || got != w {
			t.Fatalf("Read = %+v, %v; want %+v", got, err, w)
		}
	})
	t.Run("no commit yet", func(t *testing.T) {
		d := t.TempDir()
		gitIn(t, d, "init", "-q", "-b", "main")
		got, err := Read(ctx, d)
		if err != nil || got.Commit != "" || got.Branch != "main" || got.RepoURL != "" {
			t.Fatalf("Read = %+v, %v; want branch main, no commit, no remote", got, err)
		}
	})
	t.Run("not a repository", func(t *testing.T) {
		if _, err := Read(ctx, t.TempDir()); !errors.Is(err, ErrNoRepo) && err != nil {
			t.Fatalf("Read outside a repository = %v; want ErrNoRepo (or a repository above the temp dir)", err)
		}
	})
	t.Run("HEAD naming a path outside refs", func(t *testing.T) {
		d := newRepo(t)
		os.WriteFile(filepath.Join(d, ".git", "HEAD"), []byte("ref: ../../etc/passwd\n"), 0o644)
		if got, err := Read(ctx, d); err == nil {
			t.Fatalf("Read = %+v; want an error for a HEAD outside refs/", got)
		}
	})
}

// TestStripCredentials holds what MLflow 3.17.2's
// _strip_credentials_from_url returns for each URL.
func TestStripCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:tok@github.com/org/repo.git": "https://github.com/org/repo.git",
		"HTTPS://tok@Example.com:8443/a b?x=1#f":   "https://Example.com:8443/a b?x=1#f",
		"ssh://git@github.com/org/repo":            "ssh://github.com/org/repo",
		"git@github.com:org/repo.git":              "git@github.com:org/repo.git",
		"https://github.com/org/repo":              "https://github.com/org/repo",
		"file:///srv/repo.git":                     "file:///srv/repo.git",
		"https://a@b@host/x":                       "https://host/x",
		"/local/path":                              "/local/path",
		"https://u:p@host":                         "https://host",
	} {
		if got := stripCredentials(in); got != want {
			t.Errorf("stripCredentials(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestFirstRemoteURL(t *testing.T) {
	cfg := "[core]\n\tbare = false\n[branch \"main\"]\n\tremote = origin\n" +
		"[Remote \"up\"]\n\tURL = \"https://up.example.com/r.git\" # comment\n[remote \"origin\"]\n\turl = https://o.example.com/r.git\n"
	if got := firstRemoteURL(cfg); got != "https://up.example.com/r.git" {
		t.Fatalf("firstRemoteURL = %q; want the first remote's url, unquoted, comment cut", got)
	}
	if got := firstRemoteURL("[core]\n\tbare = false\n"); got != "" {
		t.Fatalf("firstRemoteURL without remotes = %q", got)
	}
}
