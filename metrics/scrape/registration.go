package scrape

import (
	"context"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/config/option"
	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/metrics"
	"github.com/bridge-dev/bridge/redact"
)

// The collector's options.
var (
	// URLs is --scrape (Options.URLs): asking for one is asking for the
	// collector, whatever --scopes says.
	URLs = &option.Of[[]string]{Key: "scrape", Default: []string{},
		Usage: "Prometheus text-format URL to read at every sample, e.g. dcgm-exporter's http://localhost:9400/metrics (repeatable)",
		Doc:   "Prometheus text-format URL read at every sample (repeatable): dcgm-exporter's GPU series become `gpu_N_` keys",
		Valid: checkURLs}
	// Include is --scrape-include (Options.Include).
	Include = &option.Of[*regexp.Regexp]{Key: "scrape-include",
		Usage: "regular expression (RE2): keep only scraped series whose name matches",
		Doc:   "RE2 regular expression: keep only the scraped series whose name matches"}
	// Exclude is --scrape-exclude (Options.Exclude).
	Exclude = &option.Of[*regexp.Regexp]{Key: "scrape-exclude",
		Usage: "regular expression (RE2): drop scraped series whose name matches",
		Doc:   "RE2 regular expression: drop the scraped series whose name matches"}
	// Passthrough is --scrape-passthrough (Options.Passthrough).
	Passthrough = &option.Of[bool]{Key: "scrape-passthrough",
		Usage: "send scraped series bridge does not map under prom_<name>",
		Doc:   "send scraped series bridge does not map as `prom_<name>`"}
	// Timeout is --scrape-timeout (Options.Timeout).
	Timeout = &option.Of[time.Duration]{Key: "scrape-timeout", Default: 2 * time.Second,
		Usage: "longest wait for one --scrape URL in one sample (10ms to 10m)",
		Doc:   "longest wait for one `--scrape` URL",
		Valid: option.Within(10*time.Millisecond, 10*time.Minute, false)}
)

// Name is the collector's name in `bridge sample` and the registrations.
const Name = "scrape"

// Registration is the collector's, for pipeline.Collectors. It serves no
// scope: --scrape asks for its series explicitly. Built after the NVML
// collector, it keys dcgm-exporter's GPUs by NVML's indexes.
var Registration = metrics.Registration{
	Name:    Name,
	Series:  Series,
	Options: []option.Option{URLs, Include, Exclude, Passthrough, Timeout},
	Docs:    docs,
	Build:   build,
}

func build(env metrics.Env) (metrics.Collector, error) {
	urls := URLs.Get(env.Options)
	if len(urls) == 0 {
		return nil, nil
	}
	var indexes func() map[string]int
	for _, c := range env.Built {
		if g, ok := c.(metrics.GPUNumbering); ok {
			indexes = g.Indexes
		}
	}
	pod, ns := podIdentity(env.Context, env.LookupEnv)
	return New(Options{
		GPUIndexes: indexes,
		URLs:       urls, Include: Include.Get(env.Options), Exclude: Exclude.Get(env.Options),
		Passthrough: Passthrough.Get(env.Options), Timeout: Timeout.Get(env.Options),
		Pod: pod, Namespace: ns, Log: env.Log,
	}), nil
}

// checkURLs checks the --scrape entries: http or https URLs. A refused one
// is shown through redact.URI, as everywhere bridge prints a scrape URL,
// never whole: it may hold a token.
func checkURLs(in []string) ([]string, error) {
	// Checked before option.List, which would echo every entry.
	for _, u := range in {
		if strings.ContainsFunc(u, option.IsControl) {
			return nil, &option.Bad{Value: shownURL(u), Why: "control character in the URL"}
		}
	}
	out, err := option.List(in, nil)
	if err != nil {
		return nil, err
	}
	for _, u := range out {
		p, e := url.Parse(u)
		if e != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, &option.Bad{Value: shownURL(u), Why: "not an http:// or https:// URL"}
		}
	}
	return out, nil
}

// shownURL is a --scrape entry as a message may show it: through
// redact.URI; one that does not parse as a URL is not shown at all (its
// parts cannot be told apart).
func shownURL(u string) string {
	if _, err := url.Parse(u); err != nil {
		return "(not shown: not a URL, and it may hold a secret)"
	}
	return redact.URI(u)
}

// podIdentity is this pod's name and namespace, from the downward API
// variables POD_NAME and POD_NAMESPACE, else the hostname (a pod's name) and
// the service account's namespace file; "" when unknown (not in Kubernetes).
func podIdentity(ctx context.Context, lookup func(string) (string, bool)) (pod, ns string) {
	if ctx == nil {
		ctx = context.Background()
	}
	pod, _ = lookup("POD_NAME")
	ns, _ = lookup("POD_NAMESPACE")
	if ns == "" {
		if b, err := kfile.ReadFile(ctx, "/var/run/secrets/kubernetes.io/serviceaccount/namespace", kfile.Value); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if pod == "" && ns != "" {
		if h, err := os.Hostname(); err == nil {
			pod = h
		} else {
			pod = "unknown"
		}
	}
	return pod, ns
}
