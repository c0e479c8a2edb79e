package chaos

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checkers are tested on hand-made histories first: a checker that
// cannot fail proves nothing about the runs it passes.

func rd(holder int, tok uint64, st status, v int64, call, ret int64) op {
	return op{holder: holder, in: regInput{kind: opRead, token: tok}, out: regOutput{status: st, value: v}, call: call, ret: ret}
}

func wr(holder int, tok uint64, v int64, tag string, st status, call, ret int64) op {
	return op{holder: holder, in: regInput{kind: opWrite, token: tok, value: v, tag: tag}, out: regOutput{status: st}, call: call, ret: ret}
}

func TestFencedRegisterModel(t *testing.T) {
	tests := []struct {
		name   string
		strict bool
		ops    []op
		want   porcupine.CheckResult
	}{
		{"one holder after another", true, []op{
			rd(0, 5, statusOK, 0, 0, 1), wr(0, 5, 1, "a", statusOK, 2, 3),
			rd(1, 7, statusOK, 1, 4, 5), wr(1, 7, 2, "b", statusOK, 6, 7),
		}, porcupine.Ok},
		{"stale token refused after a newer one", true, []op{
			rd(0, 5, statusOK, 0, 0, 1),
			rd(1, 7, statusOK, 0, 2, 3), wr(1, 7, 1, "b", statusOK, 4, 5),
			wr(0, 5, 1, "a", statusStale, 6, 7),
		}, porcupine.Ok},
		{"late write of a paused holder accepted", true, []op{
			rd(0, 5, statusOK, 0, 0, 1),
			rd(1, 7, statusOK, 0, 2, 3), wr(1, 7, 1, "b", statusOK, 4, 5),
			wr(0, 5, 1, "a", statusOK, 6, 7),
		}, porcupine.Illegal},
		{"read of a value never written", true, []op{
			wr(0, 5, 1, "a", statusOK, 0, 1), rd(0, 5, statusOK, 2, 2, 3),
		}, porcupine.Illegal},
		{"fence refusing a token it should admit", true, []op{
			wr(0, 5, 1, "a", statusStale, 0, 1),
		}, porcupine.Illegal},
		{"ownership refusal with no newer holder", false, []op{
			wr(0, 5, 1, "a", statusStale, 0, 1), rd(1, 7, statusOK, 0, 2, 3),
		}, porcupine.Ok},
		{"concurrent operations may order either way", true, []op{
			wr(0, 5, 1, "a", statusOK, 0, 10), rd(1, 5, statusOK, 0, 1, 2),
		}, porcupine.Ok},
		{"write whose return was never seen", false, []op{
			wr(0, 5, 1, "a", statusOK, 0, never), rd(1, 7, statusOK, 1, 5, 6),
		}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := porcupine.CheckOperations(fencedRegister(tt.strict), operations(tt.ops))
			if (got && tt.want != porcupine.Ok) || (!got && tt.want != porcupine.Illegal) {
				t.Errorf("linearizable = %v, want %s", got, tt.want)
			}
		})
	}
}

func TestResolveAndLostUpdates(t *testing.T) {
	record := []applied{{1, "a"}, {2, "b"}, {2, "c"}, {3, "d"}}
	ops := []op{
		wr(0, 5, 1, "a", statusOK, 0, 1),
		wr(1, 6, 2, "b", statusOK, 2, 3),
		wr(2, 4, 2, "c", statusUnknown, 1, 9), // applied late: overwrote b's update
		wr(1, 6, 3, "d", statusOK, 10, 11),
		wr(1, 6, 9, "e", statusUnknown, 12, 13), // never applied
		rd(1, 6, statusUnknown, 0, 14, 15),      // no answer
		wr(1, 6, 9, "f", statusOK, 16, 17),      // acknowledged but missing
	}
	got, problems := resolve(ops, record)
	if len(got) != 4 {
		t.Errorf("resolve kept %d ops, want 4 (unanswered read, unapplied write and the phantom dropped): %+v", len(got), got)
	}
	if i := slices.IndexFunc(got, func(o op) bool { return o.in.tag == "c" }); i < 0 || got[i].out.status != statusOK || got[i].ret != never {
		t.Errorf("the applied unanswered write was not resolved to ok with an open return: %+v", got)
	}
	if len(problems) != 1 {
		t.Errorf("problems = %q, want exactly the acknowledged write missing from the record", problems)
	}
	lost, acked := lostUpdates(record, got)
	if lost != 1 || acked != 1 {
		t.Errorf("lostUpdates = %d, %d; want 1 lost, 1 acknowledged (b's)", lost, acked)
	}
	if lost, _ := lostUpdates([]applied{{1, "a"}, {2, "b"}, {3, "c"}}, nil); lost != 0 {
		t.Errorf("lostUpdates on a clean record = %d, want 0", lost)
	}
}

func TestOverlaps(t *testing.T) {
	acqs := []acquisition{
		{holder: 0, token: 10, returned: 100, believed: 190, probed: true},
		{holder: 1, token: 12, returned: 200, believed: 250, probed: true},
		{holder: 2, token: 15, returned: 240}, // never checked, but counts as the later one
		{holder: 0, token: 20, returned: 300, believed: 290, probed: true},
	}
	got := overlaps(acqs)
	if len(got) != 1 || got[0].earlier.token != 12 || got[0].later.token != 15 || got[0].by != 10 {
		t.Fatalf("overlaps = %v, want token 12 believing 10ns past token 15's return", got)
	}
	if len(overlaps(acqs[:2])) != 0 || len(overlaps(acqs[2:])) != 0 {
		t.Errorf("overlap found where there is none")
	}
}

func TestTokenAndStampProblems(t *testing.T) {
	ok := []acquisition{
		{token: 3, stampW: 10, stampL: 0, hasStamp: true},
		{token: 9, hasStamp: false},
		{token: 5, stampW: 10, stampL: 1, hasStamp: true},
	}
	if p := tokenAndStampProblems(ok); len(p) != 0 {
		t.Errorf("problems in a good run: %q", p)
	}
	bad := append(slices.Clone(ok), acquisition{token: 5}, acquisition{token: 7, stampW: 10, stampL: 1, hasStamp: true})
	if p := tokenAndStampProblems(bad); len(p) != 2 {
		t.Errorf("problems = %q, want a reused token and a stamp that did not increase", p)
	}
}

func TestScheduleIsReproducible(t *testing.T) {
	p := profile{kinds: allFaults, ttl: ttl}
	c1, f1 := schedule(42, time.Minute, p)
	c2, f2 := schedule(42, time.Minute, p)
	if !slices.Equal(c1, c2) || !slices.Equal(f1, f2) {
		t.Fatal("the same seed gave different schedules")
	}
	c3, _ := schedule(43, time.Minute, p)
	if slices.Equal(c1, c3) {
		t.Error("different seeds gave the same schedule")
	}
	seen := make(map[faultKind]bool)
	for _, f := range append(c1, f1...) {
		seen[f.kind] = true
		if f.kind == faultFreeze && f.hold <= ttl {
			t.Errorf("%v: a freeze must outlast the TTL", f)
		}
		if f.at >= time.Minute {
			t.Errorf("%v: scheduled after the period", f)
		}
	}
	if len(seen) != len(allFaults) {
		t.Errorf("a minute's schedule covers %d kinds, want all %d", len(seen), len(allFaults))
	}
}

func TestClosestCall(t *testing.T) {
	acqs := []acquisition{
		{holder: 0, token: 10, returned: 100, believed: 180, probed: true, lost: true},
		{holder: 1, token: 12, returned: 200, believed: 260, probed: true},
		{holder: 2, token: 15, returned: 300, believed: 390, probed: true, lost: true},
		{holder: 0, token: 20, returned: 400},
	}
	lost, closest := closestCall(acqs)
	if lost != 2 || closest != 10 {
		t.Errorf("closestCall = %d, %v; want 2 lost holds, closest 10ns (token 15 before token 20)", lost, closest)
	}
	if _, closest := closestCall(acqs[1:2]); closest != -1 {
		t.Errorf("closestCall without a lost hold = %v, want -1", closest)
	}
}
