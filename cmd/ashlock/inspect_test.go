//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
)

// queueWaiters queues one waiting acquisition of key per owner, in order,
// each taking its place behind the previous one; cleanup cancels them
// and waits for them to end.
func queueWaiters(t *testing.T, f *fixture, key string, owners ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	c := f.connect(t)
	for i, owner := range owners {
		wg.Go(func() {
			g, err := c.Lock(key).WithOwner(owner).Acquire(ctx)
			if err == nil {
				g.Unlock(context.Background())
			}
		})
		// One at a time, so that the queue order is the owners' order.
		waitForWaiters(t, f, key, i+1)
	}
}

func TestInspectShowsHolderAndWaitersInOrder(t *testing.T) {
	f := newFixture(t)
	g := f.hold("job")
	holderToken, err := g.FencingToken()
	if err != nil {
		t.Fatal(err)
	}
	queueWaiters(t, f, "job", "first", "second")
	info := f.inspect("job")

	t.Run("text", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "job"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		out := f.stdout.String()
		for _, want := range []string{
			"state:        held",
			"holder:       test-holder",
			"token:        " + u64(holderToken),
			"waiters:      2",
			"  1. first (token " + u64(info.Waiters[0].Token) + ")",
			"  2. second (token " + u64(info.Waiters[1].Token) + ")",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("output lacks line %q:\n%s", want, out)
			}
		}
		if !strings.Contains(out, "acquired at:  "+info.AcquiredAt.UTC().Format(time.RFC3339Nano)) {
			t.Errorf("output lacks the acquisition time %v:\n%s", info.AcquiredAt, out)
		}
	})
	t.Run("json", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "--json", "job"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		var got infoJSON
		if err := json.Unmarshal([]byte(f.stdout.String()), &got); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, f.stdout)
		}
		if got.Key != "job" || !got.Held || got.Owner != "test-holder" || got.Token != holderToken {
			t.Errorf("got %+v, want job held by test-holder with token %d", got, holderToken)
		}
		if got.AcquiredAt == nil || !got.AcquiredAt.Equal(info.AcquiredAt) {
			t.Errorf("acquired_at = %v, want %v", got.AcquiredAt, info.AcquiredAt)
		}
		want := []waiterJSON{{Owner: "first", Token: info.Waiters[0].Token}, {Owner: "second", Token: info.Waiters[1].Token}}
		if len(got.Waiters) != 2 || got.Waiters[0] != want[0] || got.Waiters[1] != want[1] {
			t.Errorf("waiters = %+v, want %+v", got.Waiters, want)
		}
		if got.Stamp != nil {
			t.Errorf("stamp = %+v, want none (stamps are off)", got.Stamp)
		}
	})
}

func TestInspectFreeKey(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		check func(t *testing.T, out string)
	}{
		{"text", nil, func(t *testing.T, out string) {
			for _, want := range []string{"key:      job\n", "state:    free\n", "waiters:  none\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "holder") {
				t.Errorf("a free key shows a holder:\n%s", out)
			}
		}},
		{"json", []string{"--json"}, func(t *testing.T, out string) {
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if got["held"] != false || got["key"] != "job" {
				t.Errorf("got %v, want job not held", got)
			}
			if w, ok := got["waiters"].([]any); !ok || len(w) != 0 {
				t.Errorf("waiters = %v, want an empty list", got["waiters"])
			}
			for _, absent := range []string{"owner", "token", "acquired_at", "stamp"} {
				if _, ok := got[absent]; ok {
					t.Errorf("a free key has %q: %v", absent, got)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			args := append(append([]string{"inspect"}, tt.flags...), "job")
			if code := f.run(args...); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
			}
			tt.check(t, f.stdout.String())
		})
	}
}

func TestWriteInfoTextShowsTheStamp(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 8000000, time.UTC)
	info := ashlock.LockInfo{
		Key: "job", Held: true, Owner: "o", Token: 9, AcquiredAt: at,
		Stamp: ashlock.Timestamp{WallTime: at.UnixNano(), Logical: 2},
	}
	var b strings.Builder
	if err := writeInfoText(&b, info, at.Add(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"acquired at:  2025-03-04T05:06:07.008Z (1.5s ago)\n",
		"stamp:        " + info.Stamp.String() + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestInspectUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no key", []string{"inspect"}, exitUsage},
		{"two keys", []string{"inspect", "a", "b"}, exitUsage},
		{"flag after key", []string{"inspect", "a", "--json"}, exitUsage},
		{"unknown flag", []string{"inspect", "--bogus", "a"}, exitUsage},
		{"invalid key", []string{"inspect", "a\x7f"}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != tt.want {
				t.Errorf("exit code = %d, want %d; stderr %q", code, tt.want, f.stderr)
			}
			if f.stderr.String() == "" {
				t.Error("no message on stderr")
			}
		})
	}
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }

func TestWriteInfoTextListsEveryHolder(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	now := at.Add(3 * time.Second)
	tests := []struct {
		name string
		info ashlock.LockInfo
		want string
	}{
		{
			"counted",
			ashlock.LockInfo{
				Key: "backups", Held: true, Owner: "host-a:1", Token: 7, AcquiredAt: at, Permits: 3,
				Holders: []ashlock.Holder{
					{Owner: "host-a:1", Token: 7, Permit: 2, AcquiredAt: at, Value: []byte("disk c")},
					{Owner: "host-b:2", Token: 9, Permit: 0, AcquiredAt: at.Add(time.Second),
						Stamp: ashlock.Timestamp{WallTime: at.UnixNano(), Logical: 1}},
					{Owner: "host-c:3", Token: 12, Permit: 1, Value: []byte{0, 1, 0xfe}},
				},
				Waiters: []ashlock.Waiter{{Owner: "host-d:4", Token: 13}},
			},
			"key:      backups\n" +
				"state:    held\n" +
				"permits:  3\n" +
				"holders:  3\n" +
				"  1. host-a:1 (token 7, permit 2)\n" +
				"     acquired at:  2025-03-04T05:06:07Z (3s ago)\n" +
				"     value:        \"disk c\"\n" +
				"  2. host-b:2 (token 9, permit 0)\n" +
				"     acquired at:  2025-03-04T05:06:08Z (2s ago)\n" +
				"     stamp:        " + ashlock.Timestamp{WallTime: at.UnixNano(), Logical: 1}.String() + "\n" +
				"  3. host-c:3 (token 12, permit 1)\n" +
				"     value:  3 bytes, hex 0001fe\n" +
				"waiters:  1\n" +
				"  1. host-d:4 (token 13)\n",
		},
		{
			"shared",
			ashlock.LockInfo{
				Key: "db", Held: true, Owner: "r1", Token: 4, AcquiredAt: at, Permits: 1,
				Holders: []ashlock.Holder{
					{Owner: "r1", Token: 4, Shared: true, AcquiredAt: at},
					{Owner: "r2", Token: 5, Shared: true, AcquiredAt: at},
				},
				Waiters: []ashlock.Waiter{{Owner: "w", Token: 6}, {Owner: "r3", Token: 7, Shared: true}},
			},
			"key:      db\n" +
				"state:    held\n" +
				"holders:  2\n" +
				"  1. r1 (token 4, shared)\n" +
				"     acquired at:  2025-03-04T05:06:07Z (3s ago)\n" +
				"  2. r2 (token 5, shared)\n" +
				"     acquired at:  2025-03-04T05:06:07Z (3s ago)\n" +
				"waiters:  2\n" +
				"  1. w (token 6)\n" +
				"  2. r3 (token 7, shared)\n",
		},
		{
			"one shared holder",
			ashlock.LockInfo{
				Key: "db", Held: true, Owner: "r1", Token: 4, Permits: 1,
				Holders: []ashlock.Holder{{Owner: "r1", Token: 4, Shared: true}},
			},
			"key:      db\n" +
				"state:    held\n" +
				"holders:  1\n" +
				"  1. r1 (token 4, shared)\n" +
				"waiters:  none\n",
		},
		{
			// The form of a plain lock stays what it was, plus its value.
			"one exclusive holder with a value",
			ashlock.LockInfo{
				Key: "job", Held: true, Owner: "o", Token: 9, AcquiredAt: at, Permits: 1,
				Holders: []ashlock.Holder{{Owner: "o", Token: 9, AcquiredAt: at, Value: []byte("v1")}},
			},
			"key:          job\n" +
				"state:        held\n" +
				"holder:       o\n" +
				"token:        9\n" +
				"acquired at:  2025-03-04T05:06:07Z (3s ago)\n" +
				"value:        \"v1\"\n" +
				"waiters:      none\n",
		},
		{
			"held without Holders",
			ashlock.LockInfo{Key: "job", Held: true, Owner: "o", Token: 9},
			"key:      job\n" +
				"state:    held\n" +
				"holder:   o\n" +
				"token:    9\n" +
				"waiters:  none\n",
		},
		{
			"labels that could forge lines",
			ashlock.LockInfo{
				Key: "k", Held: true, Owner: "evil\nstate: free", Token: 1, Permits: 2,
				Holders: []ashlock.Holder{{Owner: "evil\nstate: free", Token: 1}},
				Waiters: []ashlock.Waiter{{Owner: "\x1b[2J", Token: 2}},
			},
			"key:      k\n" +
				"state:    held\n" +
				"permits:  2\n" +
				"holders:  1\n" +
				"  1. \"evil\\nstate: free\" (token 1, permit 0)\n" +
				"waiters:  1\n" +
				"  1. \"\\x1b[2J\" (token 2)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := writeInfoText(&b, tt.info, now); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("output:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestWriteInfoTextNumbersAlignPastNine(t *testing.T) {
	info := ashlock.LockInfo{Key: "k", Held: true, Permits: 10}
	for i := range 10 {
		info.Holders = append(info.Holders, ashlock.Holder{Owner: "h", Token: uint64(i + 1), Permit: i, Value: []byte("x")})
	}
	var b strings.Builder
	if err := writeInfoText(&b, info, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n  9. h (token 9, permit 8)\n     value:  \"x\"\n", "\n  10. h (token 10, permit 9)\n      value:  \"x\"\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestShowValue(t *testing.T) {
	long := strings.Repeat("a", 63) + "é" + "tail" // "é" straddles byte 64
	tests := []struct {
		name string
		v    []byte
		want string
	}{
		{"text", []byte("hello, world"), `"hello, world"`},
		{"white space", []byte("a\tb\nc"), `"a\tb\nc"`},
		{"unicode", []byte("Grüße"), `"Grüße"`},
		{"64 bytes", []byte(strings.Repeat("x", 64)), strconv.Quote(strings.Repeat("x", 64))},
		{"long text, cut at a rune", []byte(long), strconv.Quote(strings.Repeat("a", 63)) + "... (69 bytes)"},
		{"binary", []byte{0xde, 0xad, 0xbe, 0xef}, "4 bytes, hex deadbeef"},
		{"control characters", []byte("a\x00b"), "3 bytes, hex 610062"},
		{"escape sequence", []byte("\x1b[31mred"), "8 bytes, hex 1b5b33316d726564"},
		{"invalid UTF-8", []byte("ab\xffc"), "4 bytes, hex 6162ff63"},
		{"long binary", bytes.Repeat([]byte{0xff}, 20), "20 bytes, hex ffffffffffffffffffffffffffffffff..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := showValue(tt.v); got != tt.want {
				t.Errorf("showValue(%q) = %s, want %s", tt.v, got, tt.want)
			}
		})
	}
}

func TestWriteInfoJSONListsEveryHolder(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600))
	stamp := ashlock.Timestamp{WallTime: at.UnixNano(), Logical: 3}
	info := ashlock.LockInfo{
		Key: "backups", Held: true, Owner: "a", Token: 7, AcquiredAt: at, Stamp: stamp, Permits: 3,
		Holders: []ashlock.Holder{
			{Owner: "a", Token: 7, Permit: 2, AcquiredAt: at, Stamp: stamp, Value: []byte{0, 1, 2}},
			{Owner: "b", Token: 9, Permit: 0, Shared: false},
		},
		Waiters: []ashlock.Waiter{{Owner: "c", Token: 10}},
	}
	var b strings.Builder
	if err := writeInfoJSON(&b, info); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, b.String())
	}
	want := map[string]any{
		"key": "backups", "held": true, "owner": "a", "token": 7.0,
		"acquired_at": "2025-03-04T04:06:07Z",
		"stamp":       map[string]any{"wall_time": float64(stamp.WallTime), "logical": 3.0},
		"permits":     3.0,
		"holders": []any{
			map[string]any{
				"owner": "a", "token": 7.0, "permit": 2.0, "shared": false, "value": "AAEC",
				"acquired_at": "2025-03-04T04:06:07Z",
				"stamp":       map[string]any{"wall_time": float64(stamp.WallTime), "logical": 3.0},
			},
			map[string]any{"owner": "b", "token": 9.0, "permit": 0.0, "shared": false},
		},
		"waiters": []any{map[string]any{"owner": "c", "token": 10.0}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%v\nwant:\n%v\noutput:\n%s", got, want, b.String())
	}
	var typed infoJSON
	if err := json.Unmarshal([]byte(b.String()), &typed); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(typed.Holders[0].Value, []byte{0, 1, 2}) {
		t.Errorf("value decodes to %v, want the bytes 0 1 2", typed.Holders[0].Value)
	}

	t.Run("shared", func(t *testing.T) {
		info := ashlock.LockInfo{
			Key: "db", Held: true, Owner: "r", Token: 4, Permits: 1,
			Holders: []ashlock.Holder{{Owner: "r", Token: 4, Shared: true, Value: []byte("hi")}},
			Waiters: []ashlock.Waiter{{Owner: "r2", Token: 5, Shared: true}},
		}
		var b strings.Builder
		if err := writeInfoJSON(&b, info); err != nil {
			t.Fatal(err)
		}
		var got infoJSON
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			t.Fatal(err)
		}
		wantHolders := []holderJSON{{Owner: "r", Token: 4, Shared: true, Value: []byte("hi")}}
		if !reflect.DeepEqual(got.Holders, wantHolders) || got.Permits != 1 {
			t.Errorf("permits %d, holders %+v; want 1, %+v", got.Permits, got.Holders, wantHolders)
		}
		if len(got.Waiters) != 1 || !got.Waiters[0].Shared {
			t.Errorf("waiters = %+v, want one shared", got.Waiters)
		}
	})
	t.Run("held without Holders", func(t *testing.T) {
		var b strings.Builder
		if err := writeInfoJSON(&b, ashlock.LockInfo{Key: "job", Held: true, Owner: "o", Token: 9, AcquiredAt: at}); err != nil {
			t.Fatal(err)
		}
		var got infoJSON
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Holders) != 1 || got.Holders[0].Owner != "o" || got.Holders[0].Token != 9 || !got.Holders[0].AcquiredAt.Equal(at) {
			t.Errorf("holders = %+v, want the one holder from the top-level fields", got.Holders)
		}
	})
	t.Run("free", func(t *testing.T) {
		var b strings.Builder
		if err := writeInfoJSON(&b, ashlock.LockInfo{Key: "job"}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"permits": 0`, `"holders": []`, `"waiters": []`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("output lacks %s:\n%s", want, b.String())
			}
		}
	})
}

func TestInspectShowsEveryHolder(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var tokens []uint64
	for _, owner := range []string{"first", "second"} {
		g, err := f.client.Lock("pool").WithPermits(3).WithOwner(owner).WithValue([]byte("of " + owner)).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { runtime.KeepAlive(g) })
		token, err := g.FencingToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	info := f.inspect("pool")

	t.Run("text", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "pool"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		out := f.stdout.String()
		for i, h := range info.Holders {
			for _, want := range []string{
				fmt.Sprintf("  %d. %s (token %d, permit %d)\n", i+1, h.Owner, h.Token, h.Permit),
				`value:        "of ` + h.Owner + `"` + "\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		}
		for _, want := range []string{"permits:  3\n", "holders:  2\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("json", func(t *testing.T) {
		f.stdout = newNotifyBuffer()
		f.env.stdout = f.stdout
		if code := f.run("inspect", "--json", "pool"); code != 0 {
			t.Fatalf("exit code = %d, want 0; stderr %q", code, f.stderr)
		}
		var got infoJSON
		if err := json.Unmarshal([]byte(f.stdout.String()), &got); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, f.stdout)
		}
		if got.Permits != 3 || len(got.Holders) != 2 {
			t.Fatalf("permits %d, holders %+v; want 3 permits, 2 holders", got.Permits, got.Holders)
		}
		for i, h := range got.Holders {
			if h.Owner != info.Holders[i].Owner || h.Token != tokens[i] || h.Permit != info.Holders[i].Permit ||
				string(h.Value) != "of "+h.Owner || h.Shared || h.AcquiredAt == nil {
				t.Errorf("holder %d = %+v, want %+v with token %d", i, h, info.Holders[i], tokens[i])
			}
		}
	})
}

// A label that is not valid UTF-8 is quoted: its bytes may be control
// bytes to a terminal that is not UTF-8.
func TestShowLabelQuotesInvalidUTF8(t *testing.T) {
	if got, want := showLabel("a\xff\x9b2J"), `"a\xff\x9b2J"`; got != want {
		t.Errorf("showLabel = %s, want %s", got, want)
	}
	if got := showLabel("host-a:123"); got != "host-a:123" {
		t.Errorf("showLabel of a plain label = %s", got)
	}
}
