package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

func TestSchemaNames(t *testing.T) {
	for _, name := range []string{"ashlock", "_x", "locks_2", "a" + strings.Repeat("b", maxSchemaLen-1)} {
		if err := checkSchema(name); err != nil {
			t.Errorf("checkSchema(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "Ashlock", "1x", "a-b", "a b", `a"b`, "a;drop table x", "ünï", "a.b",
		"a" + strings.Repeat("b", maxSchemaLen)} {
		if err := checkSchema(name); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("checkSchema(%q) = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestListenerPingMustBePositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := New(t.Context(), nil, WithListenerPing(d))
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		require.ErrorContains(t, err, "listener ping")
	}
}

func TestParseSeed(t *testing.T) {
	cases := []struct {
		seed, conn, schema string
	}{
		{"postgres://u@h:5432/db", "postgres://u@h:5432/db", "ashlock"},
		{"postgresql://u@h/db?sslmode=disable&ashlock_schema=locks", "postgresql://u@h/db?sslmode=disable", "locks"},
		{"postgres://u:p%40ss@h/db?ashlock_schema=x", "postgres://u:p%40ss@h/db", "x"},
	}
	for _, c := range cases {
		conn, schema, err := ParseSeed(c.seed)
		if err != nil || conn != c.conn || schema != c.schema {
			t.Errorf("ParseSeed(%q) = %q, %q, %v; want %q, %q", c.seed, conn, schema, err, c.conn, c.schema)
		}
	}
	for _, seed := range []string{"etcd://h/x", "postgres://h/db?ashlock_schema=Bad-Name",
		"postgres://h/db?ashlock_schema=a&ashlock_schema=b", "postgres://h/db?ashlock_schema="} {
		if _, _, err := ParseSeed(seed); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("ParseSeed(%q) = %v, want ErrInvalidConfig", seed, err)
		}
	}
}

func TestParseEvent(t *testing.T) {
	e, ok := parseEvent(`{"e" : "d", "k" : "orders/4:x y", "ts" : [42,43]}`)
	if !ok || e.kind != 'd' || len(e.gone) != 2 || e.gone[0] != 42 || e.gone[1] != 43 || e.key != "orders/4:x y" {
		t.Errorf("parseEvent = %+v, %v", e, ok)
	}
	e, ok = parseEvent(`{"a": true, "e": "a", "k": "k", "n": 3, "o": "me", "p": 2, "r": 1, "s": false, "t": 7, ` +
		`"at": 1700000000000001, "sl": 4, "sw": 5, "one": true, "val": "aGk="}`)
	q := e.row.q
	if !ok || e.kind != 'a' || e.token != 7 || e.row.ver != 1 || !e.row.single || q.Token != 7 || !q.Admitted ||
		q.Kind.Permits != 3 || q.Permit != 2 || q.Owner != "me" || string(q.Value) != "hi" ||
		q.AcquiredAt.UnixMicro() != 1700000000000001 || q.Stamp != (backend.Timestamp{WallTime: 5, Logical: 4}) {
		t.Errorf("parseEvent = %+v, %v", e, ok)
	}
	for _, p := range []string{"", "d", "d12:k", `{"e": "d", "ts": [1]}`, `{"e": "d", "k": "k"}`, `{"e": "", "t": 1, "k": "k"}`, `{"e": "d", "t": "x", "k": "k"}`} {
		if _, ok := parseEvent(p); ok {
			t.Errorf("parseEvent(%q) accepted", p)
		}
	}
}

// After the listener reconnects, a claim still being acquired is checked
// as a held one is: its Acquire may have recorded its admission already,
// and so read the queues no more, while its delete was among the events
// the listener missed. Found gone, it is lost, and Acquire does not return
// it; no OnLost call is owed for it.
func TestResyncChecksClaimsBeingAcquired(t *testing.T) {
	h := newHub()
	w := h.addWaiter([]string{"k"})
	defer h.dropWaiter(w)
	held := &holding{refs: []ref{{key: "h", token: 3}}, name: "held"}
	h.hold(held, h.addWaiter([]string{"h"}))
	require.True(t, h.promote(held))
	acquiring := &holding{refs: []ref{{key: "k", token: 7}}, name: "acquiring"}
	h.hold(acquiring, w)

	require.ElementsMatch(t, []*holding{held, acquiring}, h.resync(nil, time.Now()))

	_, owed := h.lose(acquiring) // verify found its rows gone
	require.False(t, owed, "an OnLost call owed for a claim Acquire has not returned")
	require.False(t, h.promote(acquiring), "Acquire would return a claim found gone")
}

// A claim recorded after the listener reconnected, in a round that began
// before, escaped that reconnection's checks, while a delete of its rows
// may be among the events missed: hold reports it, so that its Acquire
// reads its rows again. One recorded in a round that began after the
// reconnection is sure.
func TestHoldAfterResyncIsUnsure(t *testing.T) {
	h := newHub()
	w := h.addWaiter([]string{"k"})
	defer h.dropWaiter(w)
	h.begin(w)
	require.Empty(t, h.resync(nil, time.Now()))
	require.True(t, h.hold(&holding{refs: []ref{{key: "k", token: 7}}, name: "late"}, w))
	h.begin(w)
	require.False(t, h.hold(&holding{refs: []ref{{key: "k", token: 8}}, name: "sure"}, w))
}

// An error response without a well-formed SQLSTATE (a proxy's, say) is
// the server's refusal like any other, not a panic.
func TestTransientShortSQLState(t *testing.T) {
	for _, code := range []string{"", "0"} {
		require.NotPanics(t, func() { transient(&pgconn.PgError{Code: code}) }, "code %q", code)
	}
	require.True(t, transient(&pgconn.PgError{Code: "08006"}))
	require.True(t, transient(&pgconn.PgError{Code: deadlockDetected}))
	require.False(t, transient(&pgconn.PgError{Code: foreignKeyViolation}))
}
