// Package mlflow is bridge's MLflow sink: it finds or creates the run, posts
// samples as system/* metrics through the REST API of an `mlflow server`, and
// sets the run's terminal status when bridge created the run.
//
// Configuration comes from MLflow's own environment variables, read the way
// the Python client reads them (mlflow/environment_variables.py,
// mlflow/utils/credentials.py, mlflow/utils/rest_utils.py), so that a job that
// already talks to MLflow needs no new settings.
package mlflow

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/userfile"
	"github.com/bridge-dev/bridge/jobkey"
	"github.com/bridge-dev/bridge/redact"
)

// Environment variables read by ConfigFromEnv; the names are MLflow's.
const (
	EnvTrackingURI    = "MLFLOW_TRACKING_URI"
	EnvToken          = "MLFLOW_TRACKING_TOKEN"
	EnvUsername       = "MLFLOW_TRACKING_USERNAME"
	EnvPassword       = "MLFLOW_TRACKING_PASSWORD"
	EnvInsecureTLS    = "MLFLOW_TRACKING_INSECURE_TLS"
	EnvServerCertPath = "MLFLOW_TRACKING_SERVER_CERT_PATH"
	EnvClientCertPath = "MLFLOW_TRACKING_CLIENT_CERT_PATH"
	EnvRunID          = "MLFLOW_RUN_ID"
	EnvExperimentName = "MLFLOW_EXPERIMENT_NAME"
	EnvExperimentID   = "MLFLOW_EXPERIMENT_ID"
	EnvRequestTimeout = "MLFLOW_HTTP_REQUEST_TIMEOUT"
	EnvNodeID         = "MLFLOW_SYSTEM_METRICS_NODE_ID"
)

// DefaultTimeout is MLflow's default MLFLOW_HTTP_REQUEST_TIMEOUT.
const DefaultTimeout = 120 * time.Second

// ErrNotHTTP is returned by ConfigFromEnv when the tracking URI is not an
// http(s) URL (unset, sqlite:, file:, a path, databricks): such stores are
// only reachable from Python, so bridge falls back to its local spool.
var ErrNotHTTP = errors.New("MLflow tracking URI is not an MLflow server: bridge posts over REST and needs `mlflow server` (an http:// or https:// MLFLOW_TRACKING_URI)")

// Config is everything the sink needs to reach one MLflow server and run.
type Config struct {
	TrackingURI string // http(s) URL of `mlflow server`, without a trailing slash

	// Token is sent as Bearer auth, but only when Username/Password are not
	// both set: the Python client prefers Basic (rest_utils.http_request).
	Token              string
	Username, Password string

	InsecureTLS    bool   // skip TLS verification (MLFLOW_TRACKING_INSECURE_TLS)
	ServerCertPath string // CA bundle used instead of the system roots
	ClientCertPath string // PEM file holding the client certificate and its key

	RunID string // attach to this run instead of creating one
	// OwnsRun says that bridge created RunID itself in an earlier attempt of
	// the same job (recorded in the spool): it then sets its terminal status
	// as for a run it creates now.
	OwnsRun        bool
	ExperimentName string // experiment to create the run in (created if missing)
	ExperimentID   string // experiment id to create the run in
	RunName        string // overrides StartInfo.RunName when set

	// NodeID puts keys under system/<node_id>/, MLflow's multi-node
	// convention; StartInfo.NodeID, when set, wins.
	NodeID string

	Timeout time.Duration // per request; DefaultTimeout when zero

	// Job, when set (and RunID is not), makes the sink one of the bridges
	// of a multi-node job: it elects the job's one run (elect.go) and
	// records the job's end (jobend.go).
	Job *Job

	// Follow (`bridge attach`) follows the status of the run RunID names,
	// as MLflow's own monitor does: before each post the sink reads it, and
	// once its owner has ended it (mlflow.end_run()) nothing more is written
	// into it: samples taken after its end are left out (Send reports
	// tracker.ErrRunEnded), and Finish records no tags.
	Follow bool
}

// ConfigFromEnv reads MLflow's environment variables. getenv is os.Getenv in
// production; home is the user's home directory, where
// ~/.mlflow/credentials is looked up ([mlflow] section,
// mlflow_tracking_username / mlflow_tracking_password; the environment wins,
// variable by variable, as in the Python client).
//
// When the tracking URI is not http(s) the returned error wraps ErrNotHTTP
// and the rest of the Config is still filled in (RunID, names), so the
// caller can record them in the spool.
func ConfigFromEnv(getenv func(string) string, home string) (Config, error) {
	cfg := Config{
		TrackingURI:    strings.TrimRight(strings.TrimSpace(getenv(EnvTrackingURI)), "/"),
		Token:          getenv(EnvToken),
		Username:       getenv(EnvUsername),
		Password:       getenv(EnvPassword),
		ServerCertPath: getenv(EnvServerCertPath),
		ClientCertPath: getenv(EnvClientCertPath),
		RunID:          strings.TrimSpace(getenv(EnvRunID)),
		ExperimentName: getenv(EnvExperimentName),
		ExperimentID:   strings.TrimSpace(getenv(EnvExperimentID)),
		NodeID:         strings.TrimSpace(getenv(EnvNodeID)),
		Timeout:        DefaultTimeout,
	}
	var errs []error

	if cfg.Username == "" || cfg.Password == "" {
		user, pass, err := readCredentialsFile(credentialsPath(home))
		if err != nil {
			errs = append(errs, err)
		}
		if cfg.Username == "" {
			cfg.Username = user
		}
		if cfg.Password == "" {
			cfg.Password = pass
		}
	}

	if v := getenv(EnvInsecureTLS); v != "" {
		b, err := parseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvInsecureTLS, v, err))
		}
		cfg.InsecureTLS = b
	}
	if v := strings.TrimSpace(getenv(EnvRequestTimeout)); v != "" {
		// MLflow parses it as int seconds.
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive whole number of seconds", EnvRequestTimeout, v))
		} else {
			cfg.Timeout = time.Duration(n) * time.Second
		}
	}

	if err := checkHTTP(cfg.TrackingURI); err != nil {
		return cfg, err
	}
	if err := cfg.validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}

// validate checks what New relies on; ConfigFromEnv and New both call it.
func (c Config) validate() error {
	if err := checkHTTP(c.TrackingURI); err != nil {
		return err
	}
	if c.InsecureTLS && c.ServerCertPath != "" {
		return fmt.Errorf("%s and %s are both set: only one of them may be (skip verification, or verify with the given CA bundle)", EnvInsecureTLS, EnvServerCertPath)
	}
	if c.NodeID != "" && !nodeIDRe.MatchString(c.NodeID) {
		return fmt.Errorf("node id %q: MLflow keys allow only letters, digits, '_', '-', '.', ' ' and ':' here (no '/')", c.NodeID)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("MLflow request timeout %s is negative", c.Timeout)
	}
	return nil
}

// Configured reports whether the job names an MLflow store at all
// (MLFLOW_TRACKING_URI): under --trackers=auto only then is MLflow on (a
// store bridge cannot post to is then explained, and the samples spooled).
func Configured(getenv func(string) string) bool {
	return getenv(EnvTrackingURI) != ""
}

// CheckEnv rejects MLflow's variables that are malformed rather than
// merely pointing elsewhere: a non-HTTP store is a valid choice (bridge
// falls back to its spool), http:// without a host is a typo, and so is a
// node id that cannot be one key segment. Each error names its variable;
// no URI is shown with its password.
func CheckEnv(getenv func(string) string) error {
	if uri := strings.TrimSpace(getenv(EnvTrackingURI)); uri != "" {
		scheme, _, _ := strings.Cut(strings.ToLower(uri), ":")
		if scheme == "http" || scheme == "https" {
			u, err := url.Parse(uri)
			if err != nil || u.Host == "" || u.Hostname() == "" {
				return fmt.Errorf("%s=%q: not a valid http(s) URL with a host (e.g. http://mlflow:5000)", EnvTrackingURI, redact.URI(uri))
			}
		}
	}
	if id := strings.TrimSpace(getenv(EnvNodeID)); id != "" && !jobkey.ValidNodeID(id) {
		return fmt.Errorf("%s=%q: %s", EnvNodeID, id, jobkey.NodeIDRule)
	}
	return nil
}

// checkHTTP returns an error wrapping ErrNotHTTP unless uri is an http(s) URL.
func checkHTTP(uri string) error {
	if uri == "" {
		return fmt.Errorf("%w; %s is not set (the Python client then uses a local sqlite:///mlflow.db)", ErrNotHTTP, EnvTrackingURI)
	}
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w; got %s=%q", ErrNotHTTP, EnvTrackingURI, redact.URI(uri))
	}
	return nil
}

// parseBool accepts what MLflow's _BooleanEnvironmentVariable accepts.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errors.New(`want one of "true", "false", "1", "0"`)
}

func credentialsPath(home string) string {
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".mlflow", "credentials")
}

// readCredentialsFile reads the [mlflow] section of ~/.mlflow/credentials. A
// missing file is no credentials, not an error.
func readCredentialsFile(path string) (user, pass string, err error) {
	if path == "" {
		return "", "", nil
	}
	raw, err := userfile.Read(path, maxCredentialFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading MLflow credentials: %w", err)
	}
	kv, err := parseCredentials(bytes.NewReader(raw))
	if err != nil {
		return "", "", fmt.Errorf("reading MLflow credentials %s: %w", path, err)
	}
	return kv["mlflow_tracking_username"], kv["mlflow_tracking_password"], nil
}

// parseCredentials returns the keys of the [mlflow] section of an INI file,
// lowercased as Python's configparser does. Only what MLflow's file uses is
// supported: sections, "key = value" / "key: value", # and ; comments.
func parseCredentials(r io.Reader) (map[string]string, error) {
	kv := map[string]string{}
	section := ""
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated section header %q", n, line)
			}
			section = strings.TrimSpace(line[1:end])
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			return nil, fmt.Errorf("line %d: want key = value", n)
		}
		if section == "mlflow" {
			kv[strings.ToLower(strings.TrimSpace(line[:i]))] = strings.TrimSpace(line[i+1:])
		}
	}
	return kv, sc.Err()
}
