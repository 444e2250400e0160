package actions

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestHTTPDefinitionRefusesBadURLsAndMethods(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, method string
		want        []string // parts of the error; nil: accepted
	}{
		{"https://hooks.example.com/cron/report", "", nil},
		{"http://127.0.0.1:8080/hook?x=1", "PUT", nil},
		{"HTTPS://example.com", "GET", nil},
		{"http://[::1]:9000/", "PATCH", nil},
		{"::not a url", "", []string{"http.url", "::not a url", "not a URL", "https://hooks.example.com"}},
		{"example.com/hook", "", []string{"http.url", "scheme must be http or https", "https://hooks.example.com"}},
		{"/relative/path", "", []string{"scheme must be http or https"}},
		{"ftp://example.com/x", "", []string{"scheme must be http or https", `"ftp"`}},
		{"http:///no-host", "", []string{"has no host"}},
		{"http://:8080/", "", []string{"has no host"}},
		{"http:opaque", "", []string{"has no host"}},
		{"  ", "", []string{"http.url is empty"}},
		{"", "", []string{"http.url is empty"}},
		{"https://example.com", "post", []string{"http.method", `"post"`, `"POST"`}},
		{"https://example.com", "FETCH", []string{"http.method", "FETCH", "POST, PUT, PATCH, DELETE, GET"}},
		{"https://example.com", "GET /x", []string{"http.method"}},
	} {
		err := Definition{HTTP: &HTTPSettings{URL: c.url, Method: c.method}}.Validate()
		if c.want == nil {
			if err != nil {
				t.Errorf("url %q method %q refused: %v", c.url, c.method, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("url %q method %q accepted", c.url, c.method)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("url %q method %q: error %q does not say %q", c.url, c.method, err, w)
			}
		}
	}
}

func TestCheckPrograms(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "report")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	hook := Definition{HTTP: &HTTPSettings{URL: "https://example.com"}}

	ok := map[string]Definition{
		"abs":  {Exec: []string{script, "--daily"}},
		"bare": {Exec: []string{"report"}}, // found through PATH, as exec finds it
		"sh":   {Exec: []string{"sh", "-c", "true"}},
		"hook": hook,
	}
	if err := checkPrograms(ok); err != nil {
		t.Fatalf("checkPrograms refused installed programs: %v", err)
	}
	for _, c := range []struct {
		name string
		argv []string
		want []string
	}{
		{"abs_missing", []string{filepath.Join(dir, "no-such-report")}, []string{`job "abs_missing"`, "no-such-report", "absolute path"}},
		{"bare_missing", []string{"no-such-report-tool"}, []string{`job "bare_missing"`, `"no-such-report-tool"`, "PATH"}},
		{"not_executable", []string{notExec}, []string{`job "not_executable"`, "notes.txt", "permission denied"}},
		{"a_directory", []string{dir}, []string{`job "a_directory"`}},
	} {
		defs := map[string]Definition{"abs": ok["abs"], "hook": hook, c.name: {Exec: c.argv}}
		err := checkPrograms(defs)
		if err == nil {
			t.Errorf("%s: checkPrograms accepted %q", c.name, c.argv)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		// The same program fails the same way when the job fires.
		if runErr := exec.Command(c.argv[0]).Run(); runErr == nil {
			t.Errorf("%s: %q runs, but checkPrograms refused it", c.name, c.argv[0])
		}
	}
	// A missing program is found at start whatever its job is named.
	err := checkPrograms(map[string]Definition{"z": {Exec: []string{"/nonexistent/z"}}, "a": {Exec: []string{"/nonexistent/a"}}})
	if err == nil || !strings.Contains(err.Error(), `job "a"`) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("two missing programs: %v, want the first by name, wrapping the lookup error", err)
	}
}
