package wandb

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestParseNetrc(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []netrcEntry
		wantErr string
	}{
		{name: "wandb login's layout", in: "machine api.wandb.ai\n  login user\n  password abc\n",
			want: []netrcEntry{{machine: "api.wandb.ai", login: "user", password: "abc"}}},
		{name: "one line, several machines", in: "machine a login u password p1 machine b:8080 password p2",
			want: []netrcEntry{{machine: "a", login: "u", password: "p1"}, {machine: "b:8080", password: "p2"}}},
		{name: "default and account", in: "machine a password p\ndefault login d password pd account x\n",
			want: []netrcEntry{{machine: "a", password: "p"}, {login: "d", password: "pd"}}},
		{name: "comments", in: "# my keys\nmachine a # the cloud\n password p\n",
			want: []netrcEntry{{machine: "a", password: "p"}}},
		{name: "macdef body skipped", in: "machine a password p\nmacdef init\ncd /tmp\nput password x\n\nmachine b password q\n",
			want: []netrcEntry{{machine: "a", password: "p"}, {machine: "b", password: "q"}}},
		{name: "empty", in: "", want: nil},
		{name: "machine without name", in: "machine", wantErr: `"machine" without a name`},
		{name: "password before machine", in: "password p", wantErr: "before any machine"},
		{name: "password without value", in: "machine a password", wantErr: "without a value"},
		{name: "unknown token", in: "machine a passwd p", wantErr: `unexpected token "passwd"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNetrc(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLookupNetrc(t *testing.T) {
	entries := []netrcEntry{{machine: "h", password: "plain"}, {machine: "h:8080", password: "port"}, {password: "dflt"}}
	for host, want := range map[string]string{"h": "plain", "h:8080": "port", "other": "dflt", "h:9090": "dflt"} {
		e, ok := lookupNetrc(entries, host)
		if !ok || e.password != want {
			t.Errorf("lookup(%q) = %q %v, want %q", host, e.password, ok, want)
		}
	}
	if _, ok := lookupNetrc(entries[:2], "other"); ok {
		t.Error("found an entry for an unknown host without a default")
	}
}

func TestConfigFromEnv(t *testing.T) {
	home := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(home, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := write("other-netrc", "machine 127.0.0.1:9000 password from-env-netrc\n")
	noNetrc := t.TempDir()
	winHome := t.TempDir()
	if err := os.WriteFile(filepath.Join(winHome, "_netrc"), []byte("machine api.wandb.ai password win\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dirAsNetrc := t.TempDir()
	fifo := filepath.Join(home, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		env     map[string]string
		home    string
		want    Config
		wantErr string
	}{
		{name: "defaults, no key anywhere", home: noNetrc,
			want: Config{BaseURL: DefaultBaseURL, Mode: ModeOnline}},
		{name: "everything from the environment", home: noNetrc,
			env: map[string]string{"WANDB_API_KEY": " k1 ", "WANDB_BASE_URL": "http://127.0.0.1:9000/", "WANDB_ENTITY": "e",
				"WANDB_PROJECT": "p", "WANDB_RUN_ID": "r", "WANDB_MODE": "online"},
			want: Config{BaseURL: "http://127.0.0.1:9000", APIKey: "k1", KeySource: "WANDB_API_KEY", Entity: "e", Project: "p", RunID: "r", Mode: ModeOnline}},
		{name: "WANDB_API_KEY beats netrc", home: home,
			env:  map[string]string{"WANDB_API_KEY": "k1", "NETRC": other, "WANDB_BASE_URL": "http://127.0.0.1:9000"},
			want: Config{BaseURL: "http://127.0.0.1:9000", APIKey: "k1", KeySource: "WANDB_API_KEY", Mode: ModeOnline}},
		{name: "$NETRC, machine is host:port", home: noNetrc,
			env:  map[string]string{"NETRC": other, "WANDB_BASE_URL": "http://127.0.0.1:9000"},
			want: Config{BaseURL: "http://127.0.0.1:9000", APIKey: "from-env-netrc", KeySource: other, Mode: ModeOnline}},
		{name: "netrc entry for another port is not used", home: noNetrc,
			env:  map[string]string{"NETRC": other, "WANDB_BASE_URL": "http://127.0.0.1:9001"},
			want: Config{BaseURL: "http://127.0.0.1:9001", Mode: ModeOnline}},
		{name: "~/_netrc when there is no ~/.netrc", home: winHome,
			want: Config{BaseURL: DefaultBaseURL, APIKey: "win", KeySource: filepath.Join(winHome, "_netrc"), Mode: ModeOnline}},
		{name: "offline", home: noNetrc, env: map[string]string{"WANDB_MODE": "offline"},
			want: Config{BaseURL: DefaultBaseURL, Mode: ModeOffline}},
		{name: "dryrun is offline", home: noNetrc, env: map[string]string{"WANDB_MODE": "dryrun"},
			want: Config{BaseURL: DefaultBaseURL, Mode: ModeOffline}},
		{name: "disabled", home: noNetrc, env: map[string]string{"WANDB_MODE": "Disabled"},
			want: Config{BaseURL: DefaultBaseURL, Mode: ModeDisabled}},
		{name: "WANDB_DISABLED", home: noNetrc, env: map[string]string{"WANDB_DISABLED": "true", "WANDB_MODE": "online"},
			want: Config{BaseURL: DefaultBaseURL, Mode: ModeDisabled}},
		{name: "bad mode", home: noNetrc, env: map[string]string{"WANDB_MODE": "sometimes"}, wantErr: `WANDB_MODE="sometimes" is not one of online, offline, disabled (wandb refuses it too): set one`},
		{name: "bad base URL", home: noNetrc, env: map[string]string{"WANDB_BASE_URL": "api.wandb.ai"}, wantErr: `WANDB_BASE_URL="api.wandb.ai" is not an http(s) URL: set it`},
		{name: "run id wandb refuses", home: noNetrc, env: map[string]string{"WANDB_RUN_ID": "a/b"}, wantErr: `WANDB_RUN_ID="a/b"`},
		{name: "run id with a space around", home: noNetrc, env: map[string]string{"WANDB_RUN_ID": "ab "}, wantErr: `WANDB_RUN_ID="ab "`},
		{name: "run id with a space inside", home: noNetrc, env: map[string]string{"WANDB_RUN_ID": "a b"},
			want: Config{BaseURL: DefaultBaseURL, RunID: "a b", Mode: ModeOnline}},
		{name: "malformed netrc", home: noNetrc, env: map[string]string{"NETRC": write("bad", "machine")}, wantErr: "netrc file " + filepath.Join(home, "bad")},
		{name: "unreadable netrc", home: noNetrc, env: map[string]string{"NETRC": dirAsNetrc}, wantErr: "cannot read the W&B API key from netrc file " + dirAsNetrc},
		// Read in bounded time and memory (internal/kfile).
		{name: "netrc /dev/zero", home: noNetrc, env: map[string]string{"NETRC": "/dev/zero"}, wantErr: "netrc file /dev/zero"},
		{name: "netrc FIFO", home: noNetrc, env: map[string]string{"NETRC": fifo}, wantErr: "netrc file " + fifo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromEnv(func(k string) string { return tc.env[k] }, tc.home)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestConfigFromEnvHomeNetrc(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine api.wandb.ai\n  login user\n  password homekey\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// ~/_netrc is only read when ~/.netrc is absent.
	if err := os.WriteFile(filepath.Join(home, "_netrc"), []byte("machine api.wandb.ai password other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ConfigFromEnv(func(string) string { return "" }, home)
	if err != nil {
		t.Fatal(err)
	}
	if got.APIKey != "homekey" || got.KeySource != filepath.Join(home, ".netrc") {
		t.Errorf("key %q from %q", got.APIKey, got.KeySource)
	}
}
