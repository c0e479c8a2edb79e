package redisbench_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// BenchmarkUncontendedServer measures what one uncontended Acquire+Unlock
// costs the server, figures the machine's load does not distort: each
// implementation of BenchmarkUncontended runs b.N cycles alone, between
// CONFIG RESETSTAT and a read of INFO. Metrics per cycle:
//
//   - server-us/cycle: the time the server spent running the cycle's
//     scripts (INFO commandstats usec of EVAL and EVALSHA, which includes
//     the commands a script calls; both implementations send nothing
//     else per cycle);
//   - called-us/cycle: the part of it the commands the scripts called
//     took by themselves (their own usec), the rest being the scripts'
//     Lua and the calls' way in and out;
//   - evalsha-us/call: usec_per_call of EVALSHA;
//   - calls/cycle: every command the server ran, EVALSHA and the
//     commands the scripts called, and <cmd>/cycle for each of them;
//   - aof-B/cycle: the bytes appended to the AOF (aof_current_size);
//   - in-B/cycle and out-B/cycle: the bytes the server read and wrote on
//     its connections (requests; replies and pub/sub messages).
func BenchmarkUncontendedServer(b *testing.B) {
	setFsync(b)
	impls := []benchrun.Impl[cycle]{
		{Name: "ashlock", Make: ashlockCycle},
		{Name: "redislock", Make: redislockCycle},
	}
	for _, im := range impls {
		b.Run("impl="+im.Name, func(b *testing.B) {
			ctx := runCtx(b)
			c := im.Make(b)
			if err := c.run(ctx); err != nil {
				b.Fatal(err)
			}
			admin := newClient(b, nil)
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			before := serverInfo(ctx, b, admin)
			n := 0
			for b.Loop() {
				if err := c.run(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			after := serverInfo(ctx, b, admin)
			per := func(v float64) float64 { return v / float64(n) }
			var usec, called, calls float64
			for cmd, s := range after.cmds {
				if cmd == "info" || cmd == "config|resetstat" {
					continue
				}
				calls += s.calls
				b.ReportMetric(per(s.calls), cmd+"/cycle")
				if cmd == "eval" || cmd == "evalsha" {
					usec += s.usec
				} else {
					called += s.usec
				}
			}
			b.ReportMetric(per(usec), "server-us/cycle")
			b.ReportMetric(per(called), "called-us/cycle")
			b.ReportMetric(per(calls), "calls/cycle")
			if s, ok := after.cmds["evalsha"]; ok && s.calls > 0 {
				b.ReportMetric(s.usec/s.calls, "evalsha-us/call")
			}
			b.ReportMetric(per(after.aof-before.aof), "aof-B/cycle")
			b.ReportMetric(per(after.in-before.in), "in-B/cycle")
			b.ReportMetric(per(after.out-before.out), "out-B/cycle")
		})
	}
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec float64 }

type infoFigures struct {
	cmds         map[string]cmdStat
	aof, in, out float64
	cpu          float64 // seconds of CPU the server's main thread has used
}

// serverInfo reads INFO commandstats, persistence, stats and cpu. INFO and
// CONFIG RESETSTAT count themselves in commandstats; callers skip them.
func serverInfo(ctx context.Context, b *testing.B, c *goredis.Client) infoFigures {
	b.Helper()
	s, err := c.Info(ctx, "commandstats", "persistence", "stats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	f := infoFigures{cmds: map[string]cmdStat{}}
	for _, line := range strings.Split(s, "\r\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		num := func() float64 {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", line, err)
			}
			return v
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			var st cmdStat
			for _, kv := range strings.Split(val, ",") {
				k, v, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					st.calls = x
				case "usec":
					st.usec = x
				}
			}
			f.cmds[strings.TrimPrefix(name, "cmdstat_")] = st
		case name == "aof_current_size":
			f.aof = num()
		case name == "total_net_input_bytes":
			f.in = num()
		case name == "total_net_output_bytes":
			f.out = num()
		case name == "used_cpu_sys_main_thread" || name == "used_cpu_user_main_thread":
			f.cpu += num()
		}
	}
	return f
}
