package cli

import (
	"os"
	"os/user"
)

// currentUser names who runs the command wherever the command line writes
// a name: updated_by of the schedules it edits (schedules set, pause,
// resume; apply without --by), requested_by of its run-now and backfill
// requests, resumed_by of a resume after failures. It is user@host, as
// far as either is known ("cronswap" when neither is).
func currentUser() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	switch {
	case name != "" && host != "":
		return name + "@" + host
	case name != "":
		return name
	case host != "":
		return "cronswap@" + host
	}
	return "cronswap"
}
