package wandbserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ClientEnv returns the environment for a real wandb client that talks to
// this server only and keeps every file under dir: base URL, the API key
// (key, or the server's own when empty), online mode, WANDB_DIR,
// WANDB_CACHE_DIR, WANDB_CONFIG_DIR and HOME in dir, no git or code capture,
// file_stream requests every second instead of every 15 s (so that a short test
// sees them, and an outage hits them) and short retry waits so that an
// outage test does not wait minutes for wandb-core's backoff (2-60 s).
func (s *Server) ClientEnv(dir, key string) []string {
	if key == "" {
		key = s.opts.APIKey
	}
	return []string{
		"HOME=" + dir,
		"WANDB_BASE_URL=" + s.URL(),
		"WANDB_API_KEY=" + key,
		"WANDB_MODE=online",
		"WANDB_DIR=" + dir,
		"WANDB_CACHE_DIR=" + filepath.Join(dir, "cache"),
		"WANDB_CONFIG_DIR=" + filepath.Join(dir, "config"),
		"WANDB_DATA_DIR=" + filepath.Join(dir, "data"),
		"WANDB_ARTIFACT_DIR=" + filepath.Join(dir, "artifacts"),
		"WANDB_DISABLE_GIT=true",
		"WANDB_DISABLE_CODE=true",
		"WANDB__FILE_STREAM_TRANSMIT_INTERVAL=1", // whole seconds: wandb-core truncates
		"WANDB__FILE_STREAM_RETRY_WAIT_MIN_SECONDS=0.2",
		"WANDB__FILE_STREAM_RETRY_WAIT_MAX_SECONDS=1",
		"WANDB__GRAPHQL_RETRY_WAIT_MIN_SECONDS=0.2",
		"WANDB__GRAPHQL_RETRY_WAIT_MAX_SECONDS=1",
		"WANDB_ERROR_REPORTING=false", // no Sentry reports: tests reach only 127.0.0.1
		"NO_PROXY=127.0.0.1,localhost",
	}
}

// problemRE matches lines that report a problem: wandb's terminal prefixes
// ("wandb: ERROR", "wandb: WARNING"), Python logging levels in debug.log and
// the JSON levels in debug-internal.log and debug-core.log.
var problemRE = regexp.MustCompile(`(?i)\b(error|warning|warn)\b|"level":"(ERROR|WARN)"|Traceback`)

// ClientProblems returns the lines of a wandb client's output (stderr) and
// of every wandb log file under dir (debug.log, debug-internal.log,
// debug-core.log) that report an error or a warning, each prefixed with its
// source. An empty result means the client saw nothing wrong with the
// server.
func ClientProblems(dir string, stderr []byte) ([]string, error) {
	var out []string
	scan := func(src string, data []byte) {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if problemRE.MatchString(line) && !benign(line) {
				out = append(out, src+": "+line)
			}
		}
	}
	scan("stderr", stderr)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "debug") || !strings.HasSuffix(d.Name(), ".log") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading wandb log %s: %w", path, err)
		}
		rel, _ := filepath.Rel(dir, path)
		scan(rel, data)
		return nil
	})
	return out, err
}

// benign reports log lines that mention "error" without reporting one, such
// as a JSON INFO line with an "error" attribute name absent.
func benign(line string) bool {
	if strings.HasPrefix(line, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			lvl, _ := m["level"].(string)
			return lvl != "ERROR" && lvl != "WARN"
		}
	}
	return false
}

// ClientStreamRequests counts the file_stream requests a real client's
// wandb-core has started, from its debug-internal.log files under dir (the
// WANDB_DIR of ClientEnv): tests wait on it to know the client has hit an
// outage.
func ClientStreamRequests(dir string) (int, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "wandb", "run-*", "logs", "debug-internal.log"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte(`"msg":"filestream: sending request"`))
	}
	return n, nil
}
