package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// countedNext picks the lowest permit no older claim recorded, waits for
// an older claim that has not recorded one (for its rewrite), the first
// waiter for any of the n holders, a later one for its predecessor (its
// delete or rewrite), and while a claim of another kind is ahead for the
// delete of the newest such claim, the one whose departure can free it.
func TestCountedNext(t *testing.T) {
	a := &acquisition{req: backend.AcquireRequest{Key: "k"}, kind: backend.Kind{Permits: 3}}
	claim := func(name string, permit int) *mvccpb.KeyValue {
		r := claimRecord{Permit: permit}
		return &mvccpb.KeyValue{Key: []byte("d/" + name), Value: []byte(encodeClaim(r))}
	}
	other := &mvccpb.KeyValue{Key: []byte("d/2"), Value: []byte(encodeClaim(claimRecord{}))}
	for _, tc := range []struct {
		name   string
		older  []*mvccpb.KeyValue // newest first
		permit int
		watch  []string
		puts   bool
	}{
		{"none older", nil, 0, nil, false},
		{"lowest free", []*mvccpb.KeyValue{claim("3.3", 0), claim("2.3", 2)}, 1, nil, false},
		{"one not recorded", []*mvccpb.KeyValue{claim("3.3", backend.NoPermit), claim("2.3", 0)}, 0, []string{"d/3.3"}, true},
		{"first waiter", []*mvccpb.KeyValue{claim("3.3", 1), claim("2.3", 0), claim("1.3", 2)}, 0, []string{"d/1.3", "d/2.3", "d/3.3"}, false},
		{"later waiter", []*mvccpb.KeyValue{claim("4.3", backend.NoPermit), claim("3.3", 1), claim("2.3", 0), claim("1.3", 2)}, 0, []string{"d/4.3"}, true},
		{"another kind", []*mvccpb.KeyValue{claim("3.3", 0), other}, 0, []string{"d/2"}, false},
		{"another count", []*mvccpb.KeyValue{claim("3.2", 0)}, 0, []string{"d/3.2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w, puts, err := a.countedNext(tc.older)
			require.NoError(t, err)
			assert.Equal(t, tc.watch, w)
			assert.Equal(t, tc.puts, puts)
			if w == nil {
				assert.Equal(t, tc.permit, p)
			}
		})
	}
	_, _, _, err := a.countedNext([]*mvccpb.KeyValue{{Key: []byte("d/1.3"), Value: []byte("junk")}})
	assert.ErrorIs(t, err, ErrBadRecord)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
}
