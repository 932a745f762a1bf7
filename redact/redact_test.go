package redact

import (
	"reflect"
	"strings"
	"testing"
)

func TestArgv(t *testing.T) {
	r := New([]string{"HF_TOKEN=hf_envsecret", "MLFLOW_TRACKING_PASSWORD=pw", "PATH=/usr/bin", "WANDB_API_KEY=wandbkey123"})
	cases := []struct{ in, want []string }{
		{[]string{"python", "train.py", "--password=hunter2", "--epochs", "3"},
			[]string{"python", "train.py", "--password=***", "--epochs", "3"}},
		{[]string{"python", "--api-key", "sk-123", "--token", "tok", "--lr", "0.1"},
			[]string{"python", "--api-key", "***", "--token", "***", "--lr", "0.1"}},
		{[]string{"x", "--db-pass", "-starts-with-dash"}, []string{"x", "--db-pass", "***"}},
		{[]string{"x", "--hftoken=abc", "--apikey", "k", "--client_secret=s"}, []string{"x", "--hftoken=***", "--apikey", "***", "--client_secret=***"}},
		{[]string{"x", "db.password=s3cret", "lr=0.1", "AWS_SECRET_ACCESS_KEY=zz"}, []string{"x", "db.password=***", "lr=0.1", "AWS_SECRET_ACCESS_KEY=***"}},
		{[]string{"x", "--uri", "https://user:pw123@host/p?token=abc&x=1"}, []string{"x", "--uri", "https://user:***@host/p?token=***&x=1"}},
		{[]string{"x", "--db=postgres://u:pass99@h:5432/d"}, []string{"x", "--db=postgres://u:***@h:5432/d"}},
		{[]string{"x", "hf_envsecret", "--tag=wandbkey123x"}, []string{"x", "***", "--tag=***x"}},
		// Not secret: single letters, look-alikes.
		{[]string{"x", "-p", "8080", "--max-tokens", "5", "--tokenizer", "gpt2", "--key-file", "k.pem", "--monkey", "1"},
			[]string{"x", "-p", "8080", "--max-tokens", "5", "--tokenizer", "gpt2", "--key-file", "k.pem", "--monkey", "1"}},
	}
	for _, tc := range cases {
		if got := r.Argv(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Argv(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestURI(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h:5000":                 "http://u:***@h:5000",
		"http://h:5000/?api_key=k&run=1":    "http://h:5000/?api_key=***&run=1",
		"http://h:5000":                     "http://h:5000",
		"sqlite:///mlflow.db":               "sqlite:///mlflow.db",
		"http://u:p%zz@h":                   "http://***@h",
		"https://h/x?Signature=abc&Expires": "https://h/x?Expires=&Signature=***",
	} {
		if got := URI(in); got != want {
			t.Errorf("URI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShortEnvValuesIgnored(t *testing.T) {
	// A 2-letter "secret" would mask every occurrence of common text.
	if got := New([]string{"X_TOKEN=ab"}).String("abc"); got != "abc" {
		t.Errorf("got %q", got)
	}
	if got := New([]string{"X_TOKEN=abcd"}).String("1abcd2"); strings.Contains(got, "abcd") {
		t.Errorf("got %q", got)
	}
}
