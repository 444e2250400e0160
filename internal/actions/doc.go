// Package actions holds what a schedule may run: the exec and http actions
// of the configuration (Definition, decoded from its jobs section), the Go
// functions a program registers (jobs.Handler), each with its run policy
// (jobs.Policy), and the Registry that names them. A schedules document
// only names an action and hands it data; what runs is defined here.
package actions
