package config_test

import (
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/config"
)

// The commented examples of config.yaml's jobs section are valid: with
// their "# " taken away they parse, and show each action setting.
func TestRepoConfigExamples(t *testing.T) {
	text := readRepoConfig(t)
	const begin, end = "  # --- more action settings, as examples", "  # ---"
	i := strings.Index(text, begin)
	if i < 0 {
		t.Fatalf("config.yaml has no %q block", begin)
	}
	block := text[i:]
	block = block[strings.Index(block, "\n")+1:]
	block = block[:strings.Index(block, end+"\n")]
	var jobs []string
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		rest, ok := strings.CutPrefix(line, "  # ")
		if !ok {
			t.Fatalf("line %q of the examples is not a comment", line)
		}
		jobs = append(jobs, "  "+rest)
	}
	cfg, err := config.Parse("jobs:\n" + strings.Join(jobs, "\n") + "\n")
	if err != nil {
		t.Fatalf("the examples do not parse: %v\n%s", err, strings.Join(jobs, "\n"))
	}
	r, c, l := cfg.Jobs["report"], cfg.Jobs["close_day"].HTTP, cfg.Jobs["local_admin"].HTTP
	if r.Env == nil || r.Dir == "" || r.KillGrace == 0 || r.InheritEnv == nil {
		t.Errorf("report does not show every exec setting: %+v", r.ExecSettings)
	}
	if c == nil || c.Headers == nil || c.Bearer == nil || c.TLS == nil || c.TLS.CAFile == "" || c.TLS.CertFile == "" || c.TLS.ServerName == "" ||
		c.Body == "" || c.SuccessStatus == nil || c.FollowRedirects == nil {
		t.Errorf("close_day does not show every http setting: %+v", c)
	}
	if l == nil || l.BasicAuth == nil || l.TLS == nil || !l.TLS.InsecureSkipVerify {
		t.Errorf("local_admin does not show basic_auth and insecure_skip_verify: %+v", l)
	}
}
