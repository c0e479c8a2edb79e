//go:build unix

package main

// The help texts are written out by hand rather than generated from the
// flag sets, to read well; a test checks that every flag is in them.

const toolHelp = `ashlock runs a command while holding a distributed lock, so that at most
one copy of it runs at a time across processes and machines (or at most N,
with --permits N; or any number of --shared runs, excluding plain ones).

Usage:
  ashlock run [flags] KEY -- COMMAND [ARG...]   run COMMAND while holding KEY
  ashlock inspect [flags] KEY                   show who holds KEY and who waits
  ashlock observe [flags] KEY                   print who leads election KEY (who
                                                holds it), then every change
  ashlock help [run|inspect|observe]            show help

Backends (--seed, default $ASHLOCK_SEED, else memory://):
  etcd://HOST:PORT[,HOST:PORT...]/PREFIX/
      etcd v3; locks are shared by everyone using the same endpoints and
      PREFIX (default ashlock/). This is the backend to use.
  postgres://USER@HOST:PORT/DB?ashlock_schema=SCHEMA  (or postgresql://)
      PostgreSQL (a libpq URL); locks are shared by everyone using the same
      database and SCHEMA (default ashlock), whose tables it creates.
  redis://[USER:PASSWORD@]HOST:PORT[/DB][?ashlock_prefix=PREFIX]
  rediss://...
      Redis 7 or later (rediss: with TLS); locks are shared by everyone
      using the same server, database and PREFIX (default ashlock:).
      Turn on keyspace notifications (notify-keyspace-events Kgx) so
      that a deleted lease is noticed at once.
  memory://
      in-process: every ashlock process has locks of its own, so this
      excludes nothing between two ashlock runs. Useful for trying the
      tool out only.

Run 'ashlock run --help' for the exit codes and an example cron line.
`

const runHelp = `Usage: ashlock run [flags] KEY -- COMMAND [ARG...]

Takes the lock KEY, runs COMMAND while holding it, and releases it when
COMMAND exits. Two plain runs with the same KEY and backend never
overlap: the second waits its turn (first come, first served), or gives
up at once with --try. Flags go before KEY; everything after "--" is
COMMAND.

With --shared, runs with --shared hold KEY together and exclude plain
runs (a read lock beside a write lock). With --permits N, up to N runs
hold KEY at once, each with its own permit number in 0..N-1. Waiting is
first come, first served for all of them: a --shared run queued behind a
plain one waits for it.

While COMMAND runs, ashlock keeps the lock's lease alive. If the lock is
lost anyway (backend unreachable for longer than the TTL allows, lease
revoked by an operator), ashlock sends SIGTERM to COMMAND's process group
at once, SIGKILL after a grace of min(TTL/3, 10s), and exits 76.

COMMAND runs in a process group of its own (given the terminal if
ashlock has it, so interactive commands work). The signals INT, TERM, HUP,
QUIT, USR1 and USR2 sent to ashlock are passed on to that group. Until
COMMAND has started (while ashlock connects, waits for the lock, or has
just been granted it), INT, TERM, HUP and QUIT abandon the run instead:
the lock is released if it was granted, COMMAND never starts, and ashlock
exits 75; USR1 and USR2 are dropped. A signal that was ignored when
ashlock started (HUP under nohup) stays ignored by both. If ashlock itself
is killed, COMMAND is killed too (Linux), since nobody renews the lock
after that. The lock is released when COMMAND exits; processes it left
running in the background are not waited for and run on unprotected.
The release can take up to 20s if the backend is unreachable; INT, TERM,
HUP or QUIT meanwhile ends the wait for it: ashlock exits at once with the
status it would have had, and the lock lapses within its TTL, nothing
renewing it any more.

Flags:
  --seed URL               backend (default $ASHLOCK_SEED, else memory://)
  --ttl DURATION           lease TTL: how long the lock outlives a holder
                           that died without releasing it (default 30s;
                           etcd rounds up to whole seconds)
  --try                    do not wait: exit 75 if KEY cannot be had at once
  --timeout DURATION       give up waiting after DURATION (exit 75);
                           default 0, wait as long as it takes
  --owner LABEL            holder label shown by inspect (default host:pid)
  --quiet                  no message when the lock is not acquired (75)
  --shared                 take KEY as a shared lock: any number of --shared
                           runs hold it together, no plain run meanwhile
  --permits N              take KEY as a counted lock: at most N runs hold
                           it at once (N in 1..1024, default 1: a plain
                           lock). Every run of KEY must give the same N
                           (plain and --shared runs count as 1); else
                           exit 64. Not with --shared.
  --value STR              publish STR with the claim for inspect and
                           observe to show (at most 64 KiB)
  --connect-timeout DURATION
                           bound on reaching the backend (default 10s)

Environment given to COMMAND:
  ASHLOCK_KEY              KEY
  ASHLOCK_FENCING_TOKEN    the fencing token, a decimal number greater than
                           that of every earlier holder of KEY. Pass it with
                           each write to the guarded resource and have the
                           resource refuse tokens below the highest it saw.
                           With --permits, fence each permit on its own
                           (resource name KEY#PERMIT); a --shared run's
                           token is admitted beside other readers' (see
                           fencing.Fence.AdmitShared).
  ASHLOCK_PERMIT           the permit held, a decimal number in 0..N-1 with
                           --permits N; always set, 0 for plain and
                           --shared runs
  ASHLOCK_DEADLINE         RFC 3339 time at which the lock would lapse if
                           no renewal succeeded, as of COMMAND's start. A
                           hint only: renewals push it forward, and a lost
                           lock ends earlier. Rely on SIGTERM, not on it.

Exit status:
  N     COMMAND's own exit status (128+S if it died of signal S), when the
        lock was held throughout
  64    usage error: bad flags or arguments, invalid KEY, TTL or seed;
        or --permits (--shared and plain runs: 1) differs from that of the
        runs holding or queued on KEY. A mismatch is a configuration to
        fix, not a busy lock: retrying the same run does not help while
        the others go on, so it is not 75, and --quiet does not hide it
  69    backend unavailable
  70    internal error
  75    not acquired: KEY held elsewhere (--try), --timeout passed, or a
        signal came before COMMAND started
  76    lock lost while COMMAND ran; reported even if COMMAND then exited 0
  126   COMMAND found but could not be started
  127   COMMAND not found
  For 64, 69, 75, 126 and 127 COMMAND did not run. ashlock writes a line
  to stderr whenever the exit status is its own.

Example: a cron job that runs on one machine at a time, skipping a turn
while the previous run is still going:
  */5 * * * * ashlock run --seed etcd://10.0.0.1:2379/ --try nightly-report -- /usr/local/bin/report

Example: a cron job that runs at most 3 backups at once across machines,
skipping a turn when 3 are running (the backup may use $ASHLOCK_PERMIT to
pick one of 3 target disks):
  0 * * * * ashlock run --seed etcd://10.0.0.1:2379/ --permits 3 --try backups -- /usr/local/bin/backup
`

const inspectHelp = `Usage: ashlock inspect [flags] KEY

Prints who holds KEY (owner label, fencing token, when acquired, stamp and
value if any) and the runs waiting for it, in the order they will get it.
A key held by several runs (--shared, --permits) lists every holder, with
its permit number if the key is counted and "shared" for a shared one;
waiters are marked "shared" likewise. Values are shown quoted if they are
printable text (the first 64 bytes), else as their length and the first
16 bytes in hex. Exits 0 whether KEY is held or free.

Flags:
  --seed URL               backend (default $ASHLOCK_SEED, else memory://;
                           memory:// always shows KEY free, being a fresh
                           in-process store)
  --json                   print one JSON object: key, held, owner, token,
                           acquired_at, stamp (those four: the oldest
                           holder's), permits (0 when nothing holds or
                           waits), holders [{owner, token, permit, shared,
                           value (base64, whole), acquired_at, stamp}],
                           waiters [{owner, token, shared (only when
                           true)}]
  --connect-timeout DURATION
                           bound on reaching the backend and reading KEY
                           (default 10s)

Exit status:
  0     KEY inspected (held or free)
  64    usage error
  69    backend unavailable
  70    internal error

Example:
  ashlock inspect --seed etcd://10.0.0.1:2379/ nightly-report
`

const observeHelp = `Usage: ashlock observe [flags] KEY

Prints who leads the election KEY now, then one line each time that
changes, until interrupted. An election is a lock: whoever holds KEY leads
it, be it a program using the library's Election (Campaign, Run) or an
"ashlock run --value STR KEY -- ..." (its value is STR). A change is a new
leader (a new term, with a greater token), a change of the leader's value
or owner label, or nobody leading any more; runs waiting for KEY are not
shown. Changes are printed in the order they happened, each once, and a
term older than one already printed never is. If the backend is out of
reach, observe waits and carries on where it was once it is back; only if
etcd has compacted the history it needs meanwhile does it read the current
state again, and changes inside that gap are then missing (never out of
order).

Each line starts with the time it was observed (UTC, RFC 3339):
  2026-12-01T17:25:00.123Z leader owner=host:123 token=57 since=2026-12-01T17:24:58.001Z value="10.0.0.1:8080"
  2026-12-01T17:25:09.456Z no leader
token is the term (the leader's fencing token); since is when the term
began. The owner label is quoted if it has spaces, quotes or characters
that are not printable. value is left out if the leader published none,
and shown as inspect shows it: quoted if printable text (the first 64
bytes), else as its length and the first 16 bytes in hex.

INT, TERM, HUP and QUIT end observe with exit status 0; USR1 and USR2 are
ignored.

Flags:
  --seed URL               backend (default $ASHLOCK_SEED, else memory://;
                           memory:// never shows a leader, being a fresh
                           in-process store)
  --json                   print one JSON object per line: name, leader
                           (true or false), owner, token, value (base64,
                           whole), since (those four only while someone
                           leads, value only if published), observed_at
  --connect-timeout DURATION
                           bound on reaching the backend at the start
                           (default 10s); later outages are waited out

Exit status:
  0     ended by a signal
  64    usage error: bad flags or arguments, invalid KEY or seed
  69    backend unavailable: not reached within --connect-timeout, or
        the observation failed for good (the backend closed)
  70    internal error, or the output could not be written

Example: follow the leader of the election "scheduler", as JSON:
  ashlock observe --seed etcd://10.0.0.1:2379/ --json scheduler
`
