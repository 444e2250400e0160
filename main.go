// Command cronswap runs cron schedules kept in MongoDB and re-arms a job's
// timer the moment its document changes. See README.md.
package main

import (
	"os"
	_ "time/tzdata" // embed the zone database: schedules name IANA zones

	"github.com/cronswap/cronswap/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr))
}
