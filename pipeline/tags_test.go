package pipeline

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bridge-dev/bridge/config"
)

// A long command line of multi-byte characters is cut between characters,
// wherever the limit falls: the tag and the run name stay valid UTF-8.
func TestJobStartInfoClipsWholeRunes(t *testing.T) {
	arg := strings.Repeat("données-日本語-", 60)
	for pad := range len("données-日本語-") {
		prog := "/opt/" + strings.Repeat("x", pad) + "trainé/" + arg
		info := JobStartInfo(config.Config{}, []string{prog, arg}, nil, map[string]string{})
		cmd := info.Tags["bridge.command"]
		if len(cmd) > 500 || !utf8.ValidString(cmd) || !strings.HasSuffix(cmd, "...") {
			t.Errorf("bridge.command: %d bytes, valid UTF-8 %v: %q", len(cmd), utf8.ValidString(cmd), cmd)
		}
		if len(info.RunName) > 100 || !utf8.ValidString(info.RunName) || !strings.HasSuffix(info.RunName, "...") {
			t.Errorf("run name: %d bytes, valid UTF-8 %v: %q", len(info.RunName), utf8.ValidString(info.RunName), info.RunName)
		}
	}
}
