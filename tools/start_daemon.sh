#!/usr/bin/env bash
# Runs the command that starts a daemon with none of our file descriptors but 0, 1 and 2.
#
#   bash tools/start_daemon.sh pg_ctlcluster 15 grader start
#
# A daemon keeps every descriptor it inherits. One that is the write end of a pipe someone
# reads to its end (a `$(...)` around one of these scripts, a CI runner's log) keeps that
# reader waiting for as long as the daemon lives: the server started by postgres_local.sh
# once held the `$(...)` of .ci/run open, and CI waited until the runner killed it.
set -euo pipefail
exec python3 -c 'import os, sys; os.closerange(3, os.sysconf("SC_OPEN_MAX")); os.execvp(sys.argv[1], sys.argv[1:])' "$@"
