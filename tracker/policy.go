package tracker

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/printable"
)

// MaxResponseBytes caps every response body bridge reads from a tracker
// (clients set it with resty's SetResponseBodyLimit): an endless or huge
// answer is an error, not memory. The largest answer bridge reads is a
// runs/get with its tags, far below this.
const MaxResponseBytes = 1 << 20

// Classify is the one retry policy for an HTTP answer of any tracker, given
// its status code, Retry-After header and err, the sink's own description
// of the failure (nil for a 2xx):
//   - 2xx: nil;
//   - 429 and 503 with a Retry-After: *RetryAfterError (the forwarder waits
//     at least its backoff floor);
//   - 408, 409 (a concurrent write, which W&B uses), 425, 429, 5xx: err as
//     is, retried with backoff;
//   - any other status (401, 403, 404, 400, other 4xx, 1xx/3xx that the
//     client did not follow): Permanent(err): the same request cannot
//     succeed later.
func Classify(code int, retryAfter string, now time.Time, err error) error {
	if code >= 200 && code < 300 {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("HTTP status %d", code)
	}
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := ParseRetryAfter(retryAfter, now); ok {
			return &RetryAfterError{After: d, Err: err}
		}
		return err
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly, code >= 500:
		return err
	}
	return Permanent(err)
}

// TLSUntrusted reports whether err, an HTTP client's error (no answer came),
// is a failed verification of the server's TLS certificate: an unknown
// authority, a name that does not match, an expired certificate. That is
// configuration, not an outage: no retry can fix it, so a sink returns it
// as Permanent at once, naming the variables that set what is trusted.
func TLSUntrusted(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		roots    x509.SystemRootsError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &roots)
}

// Refused reports whether err, an HTTP client's error, says that nothing
// answered at the tracker's address: the connection was refused or could
// not be made (no server listening yet, a wrong address), as opposed to a
// server that took the connection and was slow to answer.
func Refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ErrNotJSON marks a 2xx answer whose body is not the JSON object the
// tracker's API sends (an HTML login page from a proxy, a truncated body):
// the request is not taken as delivered. Retried like an outage.
var ErrNotJSON = errors.New("answer is not the tracker's JSON")

// CheckJSONObject reports an error wrapping ErrNotJSON unless body is one
// JSON object, which is what every MLflow and W&B endpoint bridge calls
// answers with. what names the server and the request, for the message.
func CheckJSONObject(body []byte, what string) error {
	b := bytes.TrimSpace(body)
	if len(b) > 0 && b[0] == '{' && json.Valid(b) {
		return nil
	}
	hint := ""
	if bytes.HasPrefix(bytes.ToLower(b), []byte("<")) {
		hint = " (an HTML page: a login page or proxy between bridge and the tracker?)"
	}
	return fmt.Errorf("%s: %w%s: %s", what, ErrNotJSON, hint, Shorten(string(b)))
}

// Shorten keeps an error body readable in one line of a log: its spaces
// and line breaks one space, its control characters escaped
// (printable.Line), at most about 300 bytes.
func Shorten(s string) string {
	const limit = 300
	return printable.Clip(printable.Line(strings.Join(strings.Fields(s), " ")), limit+3)
}

// idRe is MLflow's run id rule (mlflow/utils/validation.py _RUN_ID_REGEX),
// also used for experiment ids: both go into the child's environment.
var idRe = regexp.MustCompile(`^[a-zA-Z0-9][\w\-]{0,255}$`)

// ValidID checks an identifier a tracker returned before it reaches the
// child's environment or a URL: a NUL byte, 200 KB, or an empty id would
// make exec fail or the job write to nothing. what names the field.
func ValidID(what, id string) error {
	if idRe.MatchString(id) {
		return nil
	}
	shown := id
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	return fmt.Errorf("%s %q (%d bytes) is not a valid id (letters, digits, '_' and '-', at most 256)", what, shown, len(id))
}

// ValidEnv checks variables a sink hands to the child: NAME=value, no NUL
// byte, at most maxEnvBytes each. An environment exec refuses would keep
// the job from running at all.
func ValidEnv(env []string) error {
	const maxEnvBytes = 4096
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "":
			return fmt.Errorf("variable %q for the child has no NAME=", Shorten(kv))
		case strings.IndexByte(kv, 0) >= 0:
			return fmt.Errorf("variable %s for the child holds a NUL byte", name)
		case len(kv) > maxEnvBytes:
			return fmt.Errorf("variable %s for the child is %d bytes (at most %d)", name, len(kv), maxEnvBytes)
		}
	}
	return nil
}
