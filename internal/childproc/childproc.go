// Package childproc starts helper processes (the test server, benchmark
// daemons) so that they do not outlive the process that started them: each
// child gets its own process group, so a stop or kill of the group reaches
// everything it forks, and on Linux the kernel SIGKILLs it when its parent
// dies (PR_SET_PDEATHSIG).
package childproc
