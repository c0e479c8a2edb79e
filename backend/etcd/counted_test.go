package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock/backend"
)

// permitFor picks the lowest permit no older claim recorded, waits for an
// older claim that has not recorded one (for its rewrite), and for an
// older claim of another kind (for its delete).
func TestPermitFor(t *testing.T) {
	a := &acquisition{req: backend.AcquireRequest{Key: "k"}, kind: kind{n: 4}}
	claim := func(name string, permit int) *mvccpb.KeyValue {
		r := claimRecord{Permits: 4, Permit: permit}
		return &mvccpb.KeyValue{Key: []byte("d/" + name), Value: []byte(encodeClaim(r))}
	}
	for _, tc := range []struct {
		name   string
		older  []*mvccpb.KeyValue
		permit int
		watch  string
		puts   bool
	}{
		{"none older", nil, 0, "", false},
		{"lowest free", []*mvccpb.KeyValue{claim("3.4", 0), claim("2.4", 2)}, 1, "", false},
		{"all below taken", []*mvccpb.KeyValue{claim("3.4", 1), claim("2.4", 0), claim("1.4", 2)}, 3, "", false},
		{"one not recorded", []*mvccpb.KeyValue{claim("3.4", noPermit), claim("2.4", 0)}, 0, "d/3.4", true},
		{"another kind", []*mvccpb.KeyValue{claim("3.4", 0), {Key: []byte("d/2"), Value: []byte(encodeClaim(claimRecord{}))}}, 0, "d/2", false},
		{"another count", []*mvccpb.KeyValue{claim("3.2", 0)}, 0, "d/3.2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w, puts, err := a.permitFor(tc.older)
			require.NoError(t, err)
			assert.Equal(t, tc.watch, w)
			assert.Equal(t, tc.puts, puts)
			if w == "" {
				assert.Equal(t, tc.permit, p)
			}
		})
	}
	_, _, _, err := a.permitFor([]*mvccpb.KeyValue{{Key: []byte("d/1.4"), Value: []byte("junk")}})
	assert.ErrorIs(t, err, ErrBadRecord)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
}
