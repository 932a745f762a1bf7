package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/config"
	"github.com/bridge-dev/bridge/internal/gitrepo"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

// What a job's trackers are told at its start, and what the child gets
// from them.

// JobStartInfo is what the trackers are told of a job's command at its
// start: the command line as redact shows it (the only form bridge
// records: tags, run name, spool), the run's name (runName), the node,
// when it started, and where its code comes from (the user, the script,
// its git repository: jobSource, read within ctx), with tags, to which
// the command line is added. tags is also the spool's start record: the
// facts `bridge sync` needs to make the run a live upload would have made
// (RecordedStart) are added to it after the run's tags were taken.
func JobStartInfo(ctx context.Context, cfg config.Config, argv, environ []string, tags map[string]string, log *slog.Logger) tracker.StartInfo {
	r := redact.New(environ)
	shown := r.Argv(argv)
	tags["bridge.command"] = printable.Clip(strings.Join(shown, " "), 500)
	words := commandWords(r, argv, shown)
	info := tracker.StartInfo{Command: shown, RunName: runName(cfg.RunName, words), NodeID: cfg.NodeID, Tags: maps.Clone(tags),
		Time: time.Now(), Source: jobSource(ctx, words, environ, log)}
	recordStart(tags, info)
	return info
}

// The spool's start record keeps, beside the run's tags, what else makes
// the job's run: its name, when the job started, and where its code comes
// from. They are not tags of the run (RecordedStart leaves them out).
const (
	recordedPrefix   = "bridge.start."
	recordedRunName  = recordedPrefix + "run_name"
	recordedTime     = recordedPrefix + "time_ms"
	recordedUser     = recordedPrefix + "user"
	recordedSource   = recordedPrefix + "source_name"
	recordedCommit   = recordedPrefix + "git_commit"
	recordedBranch   = recordedPrefix + "git_branch"
	recordedRepoURL  = recordedPrefix + "git_repo_url"
	createdTagPrefix = "bridge.created_run."
)

// recordStart adds to tags (the spool's start record) what RecordedStart
// reads back.
func recordStart(tags map[string]string, info tracker.StartInfo) {
	tags[recordedRunName] = info.RunName
	tags[recordedTime] = strconv.FormatInt(info.Time.UnixMilli(), 10)
	for k, v := range map[string]string{recordedUser: info.Source.User, recordedSource: info.Source.Name,
		recordedCommit: info.Source.Commit, recordedBranch: info.Source.Branch, recordedRepoURL: info.Source.RepoURL} {
		if v != "" {
			tags[k] = v
		}
	}
}

// RecordedStart is the StartInfo a job gave its trackers, from its
// spool's start record (its Info, and the record's time for a spool of a
// bridge that kept no start time): the run `bridge sync` creates for it is
// the run a live upload would have made. The record's other facts (which
// runs bridge created, where each tracker's run is: tracker.RunInfo.Place,
// named bridge.<tracker>.*) are not the run's tags.
func RecordedStart(ts TrackerList, info map[string]string, at time.Time, nodeID string) tracker.StartInfo {
	st := tracker.StartInfo{NodeID: nodeID, Tags: map[string]string{}, Time: at,
		RunName: info[recordedRunName],
		Source: tracker.Source{User: info[recordedUser], Name: info[recordedSource], Commit: info[recordedCommit],
			Branch: info[recordedBranch], RepoURL: info[recordedRepoURL]}}
	if ms, err := strconv.ParseInt(info[recordedTime], 10, 64); err == nil {
		st.Time = time.UnixMilli(ms)
	}
	if c := info["bridge.command"]; c != "" {
		st.Command = []string{c}
		if st.RunName == "" {
			st.RunName = runName("", strings.Fields(c))
		}
	}
	for k, v := range info {
		if strings.HasPrefix(k, recordedPrefix) || strings.HasPrefix(k, createdTagPrefix) || k == "mode" || placeKey(ts, k) {
			continue
		}
		st.Tags[k] = v
	}
	return st
}

// placeKey reports whether k names where a tracker's run is
// (tracker.RunInfo.Place: bridge.<tracker>.*).
func placeKey(ts TrackerList, k string) bool {
	for _, t := range ts {
		if strings.HasPrefix(k, "bridge."+t.Name+".") {
			return true
		}
	}
	return false
}

// scriptExts are the extensions of the scripts a job runs: the first
// argument with one names the run (runName).
var scriptExts = map[string]bool{".py": true, ".sh": true, ".bash": true, ".ipynb": true, ".r": true, ".jl": true,
	".js": true, ".ts": true, ".rb": true, ".pl": true, ".lua": true}

// runName is --run-name (flag), else what the job is known by, from the
// command's words as redact shows them (commandWords): the base name of
// its first script (python mytrain.py, torchrun ... nanogpt/train.py:
// train.py), else the module of -m (python -m trainer.main), else the
// base names of the program and its first shown arguments.
func runName(flag string, shown []string) string {
	if flag != "" {
		return flag
	}
	if len(shown) == 0 {
		return ""
	}
	if s := script(shown); s != "" {
		return printable.Clip(filepath.Base(s), 100)
	}
	var args []string // the shown arguments that are not options
	module := ""
	for i, a := range shown[1:] {
		if strings.HasPrefix(a, "-") || redact.Hidden(a) || strings.Contains(a, redact.Mask) {
			continue
		}
		if module == "" && shown[i] == "-m" {
			module = a
		}
		args = append(args, a)
	}
	if module != "" {
		return printable.Clip(module, 100)
	}
	parts := []string{filepath.Base(shown[0])}
	for _, a := range args[:min(len(args), 2)] {
		parts = append(parts, filepath.Base(a))
	}
	return printable.Clip(strings.Join(parts, " "), 100)
}

// script is the first argument of shown that names a script by its
// extension, as it is given (the script's own sys.argv[0]); "" for none.
func script(shown []string) string {
	for _, a := range shown[min(1, len(shown)):] {
		if strings.HasPrefix(a, "-") || redact.Hidden(a) || strings.Contains(a, redact.Mask) {
			continue
		}
		if scriptExts[strings.ToLower(filepath.Ext(a))] {
			return a
		}
	}
	return ""
}

// shells are the programs whose -c code is a command line of its own.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ash": true}

// setup are the commands of a shell's code that prepare the job rather
// than being it: a job is named after the first other command.
var setup = map[string]bool{"cd": true, "source": true, ".": true, "export": true, "set": true, "unset": true,
	"echo": true, "printf": true, "true": true, ":": true, "ulimit": true, "umask": true, "trap": true,
	"mkdir": true, "module": true, "conda": true, "nvidia-smi": true, "wait": true,
	"[": true, "[[": true, "test": true, "done": true, "fi": true, "esac": true, "{": true, "}": true,
	"exit": true, "return": true, "shift": true, "break": true, "continue": true}

// prefixWords are words before a shell's command that are not it: the
// keywords that start a clause, exec, time.
var prefixWords = map[string]bool{"exec": true, "time": true, "then": true, "do": true, "else": true, "elif": true,
	"if": true, "while": true, "until": true, "!": true}

// commandWords are the words the job is known by, as redact shows them:
// shown, or for a shell's code (sh -c '...', which redact shows as its
// length only) with no script on the command line the words of its first command with a script, else of its
// first one, each shown by the same rule; setup (cd, source, echo,
// export...) is not the job.
func commandWords(r *redact.Redactor, argv, shown []string) []string {
	if len(argv) < 3 || !shells[strings.TrimRight(filepath.Base(argv[0]), "0123456789.")] || script(shown) != "" {
		return shown
	}
	code := ""
	for i := 1; i < len(shown); i++ {
		if redact.Hidden(shown[i]) && strings.HasPrefix(shown[i], "<code: ") {
			code = argv[i]
			break
		}
	}
	if code == "" {
		return shown
	}
	var first []string
	for _, cmd := range shellCommands(code) {
		if setup[filepath.Base(cmd[0])] {
			continue
		}
		w := r.Argv(cmd)
		if script(w) != "" {
			return w
		}
		if first == nil {
			first = w
		}
	}
	if first == nil {
		return shown
	}
	return first
}

// shellCommands splits shell code into simple commands (at ; & | && ||
// newlines and parentheses) and each into words (quotes removed, no
// expansion), leaving out leading VAR=value assignments and prefixWords.
func shellCommands(code string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	var quote byte
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		end()
		for len(words) > 0 && (prefixWords[words[0]] ||
			strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") && !strings.HasPrefix(words[0], "=")) {
			words = words[1:]
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\\' && i+1 < len(code):
			i++
			w.WriteByte(code[i])
			inWord = true
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ';' || c == '&' || c == '|' || c == '\n' || c == '(' || c == ')':
			endCmd()
		case c == ' ' || c == '\t':
			end()
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// jobSource is where the job's code comes from (tracker.Source): the user
// as MLflow's client finds it (getpass.getuser: LOGNAME, USER, LNAME,
// USERNAME, then the password database), the script the command names,
// and the git repository of the script's directory (else the working
// directory's), read within ctx. What cannot be read is left out, said at
// debug level: provenance never keeps the job from starting.
func jobSource(ctx context.Context, words, environ []string, log *slog.Logger) tracker.Source {
	src := tracker.Source{User: userOf(ctx, environ), Name: script(words)}
	dir, err := os.Getwd()
	if err != nil {
		log.Debug("no git provenance: cannot find the working directory", "err", err)
		return src
	}
	if src.Name != "" {
		if st, err := kfile.Stat(ctx, filepath.Join(dir, src.Name)); err == nil && st.Mode().IsRegular() {
			dir = filepath.Dir(filepath.Join(dir, src.Name))
		}
	}
	head, err := gitrepo.Read(ctx, dir)
	switch {
	case errors.Is(err, gitrepo.ErrNoRepo):
	case err != nil:
		log.Debug("no git provenance for the run", "dir", dir, "err", err)
	case head.Commit != "":
		src.Commit, src.Branch, src.RepoURL = head.Commit, head.Branch, head.RepoURL
	}
	return src
}

// userOf is the user running the job, as Python's getpass.getuser() finds
// it: the first of LOGNAME, USER, LNAME, USERNAME in environ, else the
// password database's name for the process's uid (within ctx: a name
// service that does not answer is not waited for); "" when none.
func userOf(ctx context.Context, environ []string) string {
	for _, name := range []string{"LOGNAME", "USER", "LNAME", "USERNAME"} {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, name+"="); ok && v != "" {
				return v
			}
		}
	}
	u, err := kfile.Call(ctx, user.Current, nil)
	if err != nil {
		return ""
	}
	return u.Username
}

// ChildEnv is base with the variables the trackers give the child (Env)
// added, or in place of base's.
func (st Started) ChildEnv(base []string) []string {
	out := append([]string(nil), base...)
	for _, kv := range st.Env {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, o := range out {
			if ok, _, _ := strings.Cut(o, "="); ok == k {
				out[i], replaced = kv, true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}

// MarkCreated records in tags (the spool's start record) which runs bridge
// created, so that a restarted bridge may resume them (ResumeRuns).
func (st Started) MarkCreated(tags map[string]string) {
	for _, r := range st.Runs {
		if r.Created {
			tags[CreatedTag(r.Sink.Name())] = "true"
		}
	}
}

// SayLate warns, for a multi-node job, of each tracker whose job's run was
// not found before the child starts: the child goes without the tracker's
// run variable.
func (st Started) SayLate(ts TrackerList, job *Job, log *slog.Logger) {
	if job == nil || !job.Multi() {
		return
	}
	for _, r := range st.Runs {
		if t, _ := ts.Registered(r.Sink.Name()); r.Late != nil {
			log.Warn("the job's run was not found within --start-timeout: the child starts without "+t.RunIDEnv+"; bridge keeps looking in the background and sends the spooled samples there. If it never finds it, `bridge sync SPOOL` joins them to the job's run later (the spool records the key)",
				"key", job.Key)
		}
	}
}

// End records end on every run a tracker found or created, within ctx: a
// start cut short (the command never ran) leaves no run bridge created
// RUNNING.
func (st Started) End(ctx context.Context, end tracker.EndInfo, log *slog.Logger) {
	for _, r := range st.Runs {
		if r.RunID == "" {
			continue
		}
		if err := r.Sink.Finish(ctx, end); err != nil {
			log.Warn("cannot record on the tracker that the command never ran", "tracker", r.Sink.Name(), "run", r.RunID, "err", err)
		}
	}
}
