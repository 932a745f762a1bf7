package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// FuzzLoad feeds one value for one option through a flag, a variable or the
// file: Load must never panic, and every error must wrap ErrUsage and name
// the flag, variable or file involved. Run it with
//
//	go test -run '^$' -fuzz FuzzLoad -fuzztime 15s ./config
func FuzzLoad(f *testing.F) {
	for i, k := range Keys(testChoices) {
		f.Add(uint8(i), "1", uint8(0))
		f.Add(uint8(i), "", uint8(1))
		f.Add(uint8(i), "NaN", uint8(2))
		_ = k
	}
	for _, v := range []string{"1.5", "1e3", "-1s", "512MiB", "9EiB", "a/b", "[1, 2]", "{a: 1}", "true", "\x00", "99999999999999999999", "+Inf", "0x10", "1_000"} {
		f.Add(uint8(0), v, uint8(0))
		f.Add(uint8(14), v, uint8(1))
		f.Add(uint8(17), v, uint8(2))
	}
	f.Fuzz(func(t *testing.T, idx uint8, val string, via uint8) {
		keys := Keys(testChoices)
		key := keys[int(idx)%len(keys)]
		var args []string
		env := map[string]string{}
		var names []string
		switch via % 3 {
		case 0:
			args, names = []string{"--" + key + "=" + val}, []string{"--" + key}
		case 1:
			if strings.ContainsRune(val, 0) {
				return // the kernel cannot pass such a variable
			}
			env[EnvName(key)], names = val, []string{EnvName(key)}
		case 2:
			p := writeFile(t, key+": "+val+"\n")
			args, names = []string{"--config", p}, []string{p}
		}
		clearEnv(t)
		for k, v := range env {
			t.Setenv(k, v)
		}
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(discard{})
		RegisterFlags(fs, testChoices)
		err := Parse(fs, args)
		if err == nil {
			_, err = Load(fs, testChoices)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, ErrUsage) {
			t.Fatalf("error does not wrap ErrUsage: %v", err)
		}
		msg := err.Error()
		named := strings.Contains(msg, key)
		for _, n := range names {
			named = named || strings.Contains(msg, n)
		}
		if !named {
			t.Fatalf("error names neither %q nor %v: %v", key, names, err)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// FuzzArgs feeds whole command lines (arguments separated by NUL): Parse and
// Load never panic, and every error wraps ErrUsage (or is --help).
//
//	go test -run '^$' -fuzz FuzzArgs -fuzztime 15s ./config
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		"--interval=5s", "--nodes\x001.5", "--scopes=node,gpuz", "--spool-max-size\x00512MiB\x00--keep-spool",
		"--kill-after=-1s", "--help", "-h", "--", "--config\x00/nonexistent.yaml", "--trackers=auto,none",
		"--gpus=0,1\x00--node-id=a.b", "--fast-threshold=1e-300", "--no-container=false\x00--window=0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		clearEnv(t)
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(discard{})
		RegisterFlags(fs, testChoices)
		err := Parse(fs, strings.Split(line, "\x00"))
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		if err == nil {
			_, err = Load(fs, testChoices)
		}
		if err != nil && !errors.Is(err, ErrUsage) {
			t.Fatalf("error does not wrap ErrUsage: %v", err)
		}
	})
}
