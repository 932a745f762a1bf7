package authproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProxy(t *testing.T) {
	var gotHost, gotAuth string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost, gotAuth = r.Host, r.Header.Get("Authorization")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(backend.Close)
	p := Start(t, backend.URL, "s3cret")

	tests := []struct {
		name   string
		auth   string
		status int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"basic instead of bearer", "Basic czNjcmV0Og==", http.StatusUnauthorized},
		{"right token", "Bearer s3cret", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/api/2.0/mlflow/runs/get?run_id=x", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			if tc.status != http.StatusUnauthorized {
				return
			}
			var e struct {
				ErrorCode string `json:"error_code"`
				Message   string `json:"message"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("401 body is not MLflow's error JSON: %s", body)
			}
			if e.ErrorCode != "UNAUTHENTICATED" || e.Message == "" {
				t.Errorf("401 body %s, want error_code UNAUTHENTICATED and a message", body)
			}
			if strings.Contains(string(body), "s3cret") {
				t.Errorf("401 body leaks the token: %s", body)
			}
		})
	}
	if gotHost != strings.TrimPrefix(backend.URL, "http://") {
		t.Errorf("backend saw Host %q, want its own %q", gotHost, backend.URL)
	}
	if gotAuth != "Bearer s3cret" {
		t.Errorf("backend saw Authorization %q", gotAuth)
	}
	if p.Passed() != 1 || p.Rejected() != 3 {
		t.Errorf("passed %d rejected %d, want 1 and 3", p.Passed(), p.Rejected())
	}
}
