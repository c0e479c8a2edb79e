package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/redis"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// redisStore is a redis-server of the run's own (tests/redistest: an
// append-only file written with appendfsync always, keyspace
// notifications on; with its Crash, Revive, Pause and Resume), and an
// admin client straight to it. Locks live under the run's prefix; the
// mutex workload's register is a plain key, with every write applied also
// appended to a list in the same script run (its record).
//
// Each holder reaches the server through a redistest.Proxy of its own,
// and names its connections with a client name of its own, so that a
// blackhole or a CLIENT KILL reaches that holder alone (its Backend's
// pool and subscriber and its register's client alike).
type redisStore struct {
	srv   *redistest.Server
	admin *goredis.Client
}

const (
	// redisNamePrefix starts the client name of every holder's
	// connections; the admin client's is redisNamePrefix+"admin".
	redisNamePrefix = "chaos-"
	// redisStartTimeout bounds a restarted server's start (its
	// append-only file replayed).
	redisStartTimeout = 60 * time.Second
)

func launchRedis(ctx context.Context) (*redisStore, error) {
	srv, err := redistest.Start(ctx)
	if err != nil {
		return nil, err
	}
	return &redisStore{srv: srv, admin: goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ClientName: redisNamePrefix + "admin"})}, nil
}

func (s *redisStore) newRoute(name string) (route, error) {
	p, err := s.srv.Proxy()
	if err != nil {
		return nil, err
	}
	return &redisRoute{admin: s.admin, proxy: p, name: redisNamePrefix + name}, nil
}

func (s *redisStore) inspector(ctx context.Context, prefix string) (backend.Backend, error) {
	return newRedisBackend(ctx, s.admin, prefix)
}

func newRedisBackend(ctx context.Context, c *goredis.Client, prefix string, opts ...redis.Option) (backend.Backend, error) {
	return redis.New(ctx, c, append([]redis.Option{redis.WithPrefix(prefix), redis.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
}

// redisTag is the hash tag that starts every key of a Backend under
// prefix (backend/redis's documented key layout).
func redisTag(prefix string) string { return "{" + prefix + "}" }

// registerLog is the list that records the writes applied to the
// register at key.
func registerLog(key string) string { return key + "~log" }

func (s *redisStore) initRegister(ctx context.Context, name string) (int64, error) {
	_, err := s.admin.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, name, encodeRegister(0, initTag), 0)
		p.Del(ctx, registerLog(name))
		return nil
	})
	return 0, err
}

// registerRecord: the register's script appends each write it applies to
// the log in the same run, so the log is in the order the writes applied.
func (s *redisStore) registerRecord(ctx context.Context, name string, _ int64) ([]applied, error) {
	vals, err := s.admin.LRange(ctx, registerLog(name), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]applied, 0, len(vals))
	for _, v := range vals {
		n, tag, err := decodeRegister(v)
		if err != nil {
			return nil, err
		}
		out = append(out, applied{value: n, tag: tag})
	}
	return out, nil
}

// leftovers lists every claim in the queues under prefix, whether its
// lease is alive or not.
func (s *redisStore) leftovers(ctx context.Context, prefix string) ([]string, error) {
	queues := redisTag(prefix) + "q:"
	var out []string
	iter := s.admin.Scan(ctx, 0, globEscape(queues)+"*", 100).Iterator()
	for iter.Next(ctx) {
		zs, err := s.admin.ZRangeWithScores(ctx, iter.Val(), 0, -1).Result()
		if err != nil {
			return nil, err
		}
		for _, z := range zs {
			out = append(out, fmt.Sprintf("%s token %.0f", strings.TrimPrefix(iter.Val(), queues), z.Score))
		}
	}
	slices.Sort(out)
	return out, iter.Err()
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// claimLease returns the lease of the claim with token at key, from the
// claims' records ("<token> <lease> ..." per claim id; the owner and
// value fields end in ":o" and ":v").
func claimLease(ctx context.Context, c *goredis.Client, prefix, key string, token uint64) (string, bool, error) {
	recs, err := c.HGetAll(ctx, redisTag(prefix)+"c:"+key).Result()
	if err != nil {
		return "", false, err
	}
	want := strconv.FormatUint(token, 10)
	for id, rec := range recs {
		if strings.HasSuffix(id, ":o") || strings.HasSuffix(id, ":v") {
			continue
		}
		if f := strings.Fields(rec); len(f) >= 2 && f[0] == want {
			return f[1], true, nil
		}
	}
	return "", false, nil
}

// revokeLease deletes the claim's lease key, as an operator would
// (redis-cli DEL '{prefix}lease:<id>').
func (s *redisStore) revokeLease(ctx context.Context, prefix, key string, token uint64) (string, bool, error) {
	lease, found, err := claimLease(ctx, s.admin, prefix, key, token)
	if err != nil {
		return "", true, fmt.Errorf("read the claims: %w", err)
	}
	if !found {
		return "", false, nil
	}
	n, err := s.admin.Del(ctx, redisTag(prefix)+"lease:"+lease).Result()
	switch {
	case err != nil:
		return "", true, fmt.Errorf("delete lease %s: %w", lease, err)
	case n == 0:
		return "", false, nil // it had ended meanwhile
	}
	return "lease " + lease, true, nil
}

func (s *redisStore) serverFault(ctx context.Context, f fault, logf func(string, ...any)) (string, func() error, error) {
	switch f.kind {
	case faultServerRestart:
		if err := s.srv.Crash(); err != nil {
			return "", nil, err
		}
		logf("fault %v: SIGKILL of the server", f)
		return f.kind.String(), func() error {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisStartTimeout)
			defer cancel()
			return s.srv.Revive(rctx)
		}, nil
	case faultServerPause:
		if err := s.srv.Pause(); err != nil {
			return "", nil, errors.Join(err, s.srv.Resume())
		}
		logf("fault %v: server stopped", f)
		return f.kind.String(), s.srv.Resume, nil
	}
	return "", nil, fmt.Errorf("redis: no fault %v", f.kind)
}

func (s *redisStore) close() error {
	return errors.Join(s.admin.Close(), s.srv.Close())
}

// redisRoute is a holder's proxy to the server, and the client name of its
// connections.
type redisRoute struct {
	admin *goredis.Client // the store's, for CLIENT KILL
	proxy *redistest.Proxy
	name  string

	closeOnce sync.Once
	closeErr  error
}

func (r *redisRoute) endpoint() endpoint {
	return endpoint{Store: storeRedis, Addr: r.proxy.Addr(), Name: r.name}
}

// blackhole holds every byte through the proxy, both ways, until heal,
// and then delivers it, as TCP would retransmit it (see pgRoute.blackhole
// for why bytes are held rather than dropped).
func (r *redisRoute) blackhole()          { r.proxy.Blackhole() }
func (r *redisRoute) delay(time.Duration) {}
func (r *redisRoute) heal()               { r.proxy.Restore() }

// terminate ends the holder's connections - its Backend's pool and
// subscriber, its register's client - with CLIENT KILL ID, found by their
// client name in CLIENT LIST.
func (r *redisRoute) terminate(ctx context.Context) (int, error) {
	list, err := r.admin.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		var id string
		named := false
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			named = named || f == "name="+r.name
		}
		if !named || id == "" {
			continue
		}
		k, err := r.admin.Do(ctx, "CLIENT", "KILL", "ID", id).Int()
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func (r *redisRoute) close() error {
	r.closeOnce.Do(func() { r.closeErr = r.proxy.Close() })
	return r.closeErr
}

// redisConn is a holder's two clients through its route: the Backend's,
// with go-redis's defaults as a user would have them, and the register's,
// which never retries a command (a retried write would apply twice) and
// bounds each by its context.
type redisConn struct {
	c, reg *goredis.Client
	prefix string // of the Backend newBackend opened
	// onGap, if set before newBackend, is the Backend's
	// redis.WithSubscriberGapHook.
	onGap func(from, to time.Time)
}

func openRedisConn(ep endpoint) *redisConn {
	return &redisConn{
		c:   goredis.NewClient(&goredis.Options{Addr: ep.Addr, ClientName: ep.Name}),
		reg: goredis.NewClient(&goredis.Options{Addr: ep.Addr, ClientName: ep.Name, MaxRetries: -1, ContextTimeoutEnabled: true}),
	}
}

func (c *redisConn) newBackend(ctx context.Context, prefix string) (backend.Backend, error) {
	c.prefix = prefix
	if c.onGap != nil {
		return newRedisBackend(ctx, c.c, prefix, redis.WithSubscriberGapHook(c.onGap))
	}
	return newRedisBackend(ctx, c.c, prefix)
}

func (c *redisConn) register(_ backend.Backend, name, key string, unguarded bool) register {
	return &redisRegister{c: c.reg, name: name, tag: redisTag(c.prefix), key: key, unguarded: unguarded}
}

func (c *redisConn) close() error {
	return errors.Join(c.c.Close(), c.reg.Close())
}

// redisRegister is the register at a Redis key, read and written by a
// script that first checks, in the same run, that the holder's claim
// still holds: its record at the lock key is there with the guard's token
// and its lease key exists - the claim's identity, as etcd's IsOwner
// compares it. A claim that was released, reaped or whose lease ended or
// was deleted never comes back (tokens and lease ids are not reused), so
// the check passes only while the claim holds; if the Backend ever let a
// second claim hold the key meanwhile, both would pass it, and their
// writes would interleave in the register's history. (A watermark of
// tokens would refuse the older claim's writes instead, and so hide such
// a fault; the resource of the mutex workload already checks fencing by
// tokens.) Unguarded, the negative control, leaves the check out.
type redisRegister struct {
	c         *goredis.Client
	name, tag string
	key       string // the lock key
	unguarded bool
}

// registerScript reads or writes the register if the claim holds.
//
// KEYS: the register, its log, the claims' records at the lock key.
// ARGV: the hash tag, the claim's id, its token, guarded (1|0), r|w, the
// value to write (encoded with its tag).
// Replies {"ok", value} to a read, {"ok"} to a write, {"stale"} when the
// claim does not hold.
var registerScript = goredis.NewScript(`
if ARGV[4] == '1' then
  local m = redis.call('HGET', KEYS[3], ARGV[2])
  if not m then return {'stale'} end
  local t, l = string.match(m, '^(%d+) (%d+) ')
  if not t then return redis.error_reply('chaos register: unreadable claim record: ' .. m) end
  if t ~= ARGV[3] or redis.call('EXISTS', ARGV[1] .. 'lease:' .. l) == 0 then return {'stale'} end
end
if ARGV[5] == 'r' then
  local v = redis.call('GET', KEYS[1])
  if not v then return redis.error_reply('chaos register: missing') end
  return {'ok', v}
end
redis.call('SET', KEYS[1], ARGV[6])
redis.call('RPUSH', KEYS[2], ARGV[6])
return {'ok'}
`)

func (r *redisRegister) run(ctx context.Context, hd held, op, value string) ([]string, status) {
	var id string
	if lh, ok := hd.(*libHeld); ok {
		id = lh.c.ID
	}
	guarded := "1"
	if r.unguarded {
		guarded = "0"
	}
	out, err := registerScript.Run(ctx, r.c, []string{r.name, registerLog(r.name), r.tag + "c:" + r.key},
		r.tag, id, strconv.FormatUint(hd.token(), 10), guarded, op, value).StringSlice()
	switch {
	case err != nil || len(out) == 0:
		return nil, statusUnknown
	case out[0] == "stale":
		return nil, statusStale
	}
	return out, statusOK
}

func (r *redisRegister) read(ctx context.Context, hd held) (int64, status) {
	out, st := r.run(ctx, hd, "r", "")
	if st != statusOK {
		return 0, st
	}
	if len(out) != 2 {
		return 0, statusUnknown
	}
	v, _, err := decodeRegister(out[1])
	if err != nil {
		return 0, statusUnknown
	}
	return v, statusOK
}

func (r *redisRegister) write(ctx context.Context, hd held, value int64, tag string) status {
	_, st := r.run(ctx, hd, "w", encodeRegister(value, tag))
	return st
}
