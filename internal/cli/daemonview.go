package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/schedule"
)

// daemonAskTimeout bounds how long `schedules list` and `get` wait for the
// live daemons' answers; a daemon that has not answered by then is left
// out, and the documents no daemon answered for are checked by the
// command itself.
const daemonAskTimeout = 2 * time.Second

// daemonAnswer is one live daemon's engine state, by schedule key (the job
// id, or the schedule.RefusedKey of a refused document's _id rendering).
type daemonAnswer struct {
	instance  string
	schedules map[string]httpapi.Schedule
}

// daemonView is what the live daemons answered when asked what their
// engines hold.
type daemonView struct {
	// answers are the daemons that answered, in instance order.
	answers []daemonAnswer
	// silent names each live daemon that did not answer, and why.
	silent []string
}

// daemonSays is what the answering daemons say about one schedule.
type daemonSays struct {
	// instances are the daemons whose engine holds the schedule.
	instances []string
	// err is their error: the one text when they agree, else each
	// daemon's own prefixed by its instance id; "" when none has one.
	err string
	// next is the next run of the first of them that has it armed.
	next time.Time
}

// about returns what the answering daemons say about the schedule with
// key; ok is false when none of them holds it (none answered, or the
// document is newer than their engines).
func (dv daemonView) about(key string) (says daemonSays, ok bool) {
	var errs []string
	agree := true
	for _, a := range dv.answers {
		st, found := a.schedules[key]
		if !found {
			continue
		}
		says.instances = append(says.instances, a.instance)
		if len(errs) > 0 && st.LastError != errs[0] {
			agree = false
		}
		errs = append(errs, st.LastError)
		if says.next.IsZero() && st.NextRun != nil {
			if t, err := time.Parse(time.RFC3339, *st.NextRun); err == nil {
				says.next = t
			}
		}
	}
	if len(says.instances) == 0 {
		return says, false
	}
	if agree {
		says.err = errs[0]
		return says, true
	}
	var parts []string
	for i, e := range errs {
		if e != "" {
			parts = append(parts, says.instances[i]+": "+e)
		}
	}
	says.err = strings.Join(parts, "; ")
	return says, true
}

// askDaemons asks every live member that published its HTTP address
// (members.Member.HTTP) for its engine's schedules — all of them, or only
// job id's when id is not empty — at once, each within daemonAskTimeout,
// sending CRONSWAP_HTTP_TOKEN when it is set. A daemon that cannot be
// reached, refuses or answers garbage is named in silent; so is a
// listener bound to loopback on another host, which is not asked (a
// loopback address here would be another process).
func askDaemons(ctx context.Context, s *session, id string) daemonView {
	var dv daemonView
	all, now, err := s.store.Members(ctx)
	if err != nil {
		dv.silent = append(dv.silent, fmt.Sprintf("members not readable: %v", err))
		return dv
	}
	live := members.Live(all, now)
	if len(live) == 0 {
		dv.silent = append(dv.silent, "no live daemon in "+members.CollectionName)
		return dv
	}
	localHost, _ := os.Hostname()
	token := os.Getenv(httpapi.EnvToken)
	client := &http.Client{Timeout: daemonAskTimeout}
	askCtx, cancel := context.WithTimeout(ctx, daemonAskTimeout)
	defer cancel()

	answers := make([]*daemonAnswer, len(live))
	silent := make([]string, len(live))
	var wg sync.WaitGroup
	for i, m := range live {
		base, err := daemonURL(m, localHost)
		if err != nil {
			silent[i] = fmt.Sprintf("%s: %v", m.ID, err)
			continue
		}
		wg.Go(func() {
			a, err := askDaemon(askCtx, client, base, token, id)
			if err != nil {
				silent[i] = fmt.Sprintf("%s at %s: %v", m.ID, base, err)
				return
			}
			a.instance = m.ID
			answers[i] = a
		})
	}
	wg.Wait()
	for i := range live {
		if answers[i] != nil {
			dv.answers = append(dv.answers, *answers[i])
		}
		if silent[i] != "" {
			dv.silent = append(dv.silent, silent[i])
		}
	}
	return dv
}

// daemonURL is the base URL at which this machine reaches member m's HTTP
// listener: its address as bound, with an unspecified address (0.0.0.0,
// ::) replaced by loopback on this host and by the member's host name
// elsewhere. A listener on loopback is reachable only from its own host.
func daemonURL(m members.Member, localHost string) (string, error) {
	if m.HTTP == "" {
		return "", fmt.Errorf("its %s document has no HTTP address (a daemon older than this command)", members.CollectionName)
	}
	host, port, err := net.SplitHostPort(m.HTTP)
	if err != nil {
		return "", fmt.Errorf("HTTP address %q: %w", m.HTTP, err)
	}
	sameHost := m.Host != "" && m.Host == localHost
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsUnspecified() && sameHost:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = m.Host
	case ip != nil && ip.IsLoopback() && !sameHost:
		return "", fmt.Errorf("its HTTP listener %s is on loopback of host %q, not reachable from here", m.HTTP, m.Host)
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// maxDaemonAnswer bounds the body read from a daemon: /api/schedules of
// 100,000 jobs is about 25 MB.
const maxDaemonAnswer = 256 << 20

// askDaemon reads /api/schedules (id empty) or /api/schedules/{id} from the
// daemon at base. A 404 for one id is an answer: the daemon holds no such
// job.
func askDaemon(ctx context.Context, client *http.Client, base, token, id string) (*daemonAnswer, error) {
	path := "/api/schedules"
	if id != "" {
		path += "/" + url.PathEscape(id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDaemonAnswer))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	a := &daemonAnswer{schedules: map[string]httpapi.Schedule{}}
	switch {
	case resp.StatusCode == http.StatusNotFound && id != "":
		return a, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s answered %s (set %s to the daemons' token)", path, resp.Status, httpapi.EnvToken)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s answered %s", path, resp.Status)
	}
	var list []httpapi.Schedule
	if id != "" {
		var one httpapi.Schedule
		err = json.Unmarshal(body, &one)
		list = append(list, one)
	} else {
		err = json.Unmarshal(body, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not the JSON of a daemon: %w", path, err)
	}
	for _, st := range list {
		a.schedules[scheduleKey(st.ID, st.InvalidID)] = st
	}
	return a, nil
}

// scheduleKey is the key of a schedule shown with id (a rendering of the
// _id when invalidID): the job id, or the RefusedKey of the rendering.
func scheduleKey(id string, invalidID bool) string {
	if invalidID {
		return schedule.RefusedKey(id)
	}
	return id
}

// checkedBy says which view of the schedules' errors a command shows:
// the daemons that answered, or this command's own check.
func (dv daemonView) checkedBy(s *session) string {
	if len(dv.answers) > 0 {
		ids := make([]string, len(dv.answers))
		for i, a := range dv.answers {
			ids[i] = a.instance
		}
		note := "errors and next runs as the live daemons see them: " + strings.Join(ids, ", ")
		if len(dv.silent) > 0 {
			note += "; not answering: " + strings.Join(dv.silent, "; ")
		}
		return note
	}
	return "no live daemon answered (" + strings.Join(dv.silent, "; ") + "): " + s.localCheck()
}

// localCheck says how this command checks a document itself.
func (s *session) localCheck() string {
	if s.rules.ActionsChecked() {
		return "checked here with the daemons' rules and the actions of " + s.configFile
	}
	if s.configFile != "" {
		return "checked here with the daemons' rules; actions not checked (" + s.configFile + " defines none)"
	}
	return "checked here with the daemons' rules; actions not checked (give the daemons' config file, --config, to check them)"
}

// seen applies what the daemons say to v: their error and next run, and
// who said it. A document no answering daemon holds keeps this command's
// own check.
func (v *scheduleView) seen(dv daemonView) {
	says, ok := dv.about(scheduleKey(v.ID, v.InvalidID))
	if !ok {
		return
	}
	v.CheckedBy = slices.Clone(says.instances)
	v.ActionsChecked = true
	v.Error = says.err
	v.NextRun = jsonTime(says.next, v.loc)
}
