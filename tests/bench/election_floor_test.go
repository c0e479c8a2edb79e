package bench_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// rawCandidate is ashlock's exclusive claim protocol on etcd sent by hand,
// with none of the library around it: a claim named after its lease, one
// Txn that creates it and reads the claim just ahead, a watch of that
// claim's delete, then one Txn that checks that the claim still exists
// and that nothing older is left (the Jepsen fix every waiter needs) and,
// when record is set, rewrites the claim's record with its acquired-at
// time in the same Txn, as the library must for Inspect to report when a
// holder took the key. Resigning deletes the claim.
//
// With record set it is the floor of the library's failover: the least
// etcd work that follows the contract. With record unset, the admission
// is a read, as etcd's Election's is: the difference between the two is
// what recording acquired-at at admission costs.
type rawCandidate struct {
	cli    *clientv3.Client
	lease  clientv3.LeaseID
	queue  string
	key    string
	token  int64
	record bool
}

func (c *rawCandidate) value(at time.Time, v string) string {
	return fmt.Sprintf("owner|%d|%s", at.UnixNano(), v)
}

func (c *rawCandidate) campaign(ctx context.Context, value string) (uint64, error) {
	newest := append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", 0)).
		Then(clientv3.OpGet(c.queue, newest...), clientv3.OpPut(c.key, c.value(time.Now(), value), clientv3.WithLease(c.lease))).
		Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errors.New("raw campaign: a claim exists under our name")
	}
	c.token = resp.Header.Revision
	ahead := resp.Responses[0].GetResponseRange().GetKvs()
	if len(ahead) == 0 {
		return uint64(c.token), nil
	}
	pred, rev := string(ahead[0].Key), resp.Header.Revision
	older := append(newest[:len(newest):len(newest)], clientv3.WithMaxCreateRev(c.token-1))
	for {
		if err := c.waitDeleted(ctx, pred, rev+1); err != nil {
			return 0, err
		}
		own := clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.token)
		first := clientv3.Compare(clientv3.CreateRevision(c.queue), ">", c.token-1).WithPrefix()
		var then []clientv3.Op
		if c.record {
			then = append(then, clientv3.OpPut(c.key, c.value(time.Now(), value), clientv3.WithIgnoreLease()))
		}
		resp, err := c.cli.Txn(ctx).If(own, first).Then(then...).
			Else(clientv3.OpGet(c.key, clientv3.WithKeysOnly()), clientv3.OpGet(c.queue, older...)).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return uint64(c.token), nil
		}
		if len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 {
			return 0, errors.New("raw campaign: our claim is gone")
		}
		kvs := resp.Responses[1].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return 0, errors.New("raw campaign: inconsistent queue read")
		}
		pred, rev = string(kvs[0].Key), resp.Header.Revision
	}
}

// waitDeleted waits for key's delete at revision from or later.
func (c *rawCandidate) waitDeleted(ctx context.Context, key string, from int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range c.cli.Watch(ctx, key, clientv3.WithRev(from), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	return fmt.Errorf("raw campaign: watch of %s ended: %w", key, context.Cause(ctx))
}

func (c *rawCandidate) setValue(ctx context.Context, value string) error {
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.token)).
		Then(clientv3.OpPut(c.key, c.value(time.Now(), value), clientv3.WithIgnoreLease())).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("raw setValue: our claim is gone")
	}
	return err
}

func (c *rawCandidate) resign(ctx context.Context) error {
	_, err := c.cli.Delete(ctx, c.key)
	return err
}

// rawElection: n rawCandidates, each on its own etcd client with a lease of
// electionTTL kept alive by a Session, under one fresh prefix.
func rawElection(record bool) electionImpl {
	return func(b *testing.B, n int) electionSetup {
		queue := newPrefix("raw-election") + electionName + "/"
		s := electionSetup{queue: queue, prefix: queue}
		for i, cli := range contenderClients(b, nil, n) {
			if i == 0 {
				s.cli = cli
			}
			sess := newSession(b, cli, int(electionTTL/time.Second))
			s.cands = append(s.cands, &rawCandidate{
				cli: cli, lease: sess.Lease(), queue: queue,
				key: fmt.Sprintf("%s%x", queue, int64(sess.Lease())), record: record,
			})
		}
		return s
	}
}

// BenchmarkElectionFailoverFloor is BenchmarkElectionFailoverInterleaved
// with two more implementations taking their turns: the library's protocol
// sent by hand, with the acquired-at record written at admission
// ("floor-record", the contract's floor) and without it ("floor-read", an
// admission that only reads, as etcd's Election's Get). Metrics are
// BenchmarkElectionFailoverInterleaved's, and <impl>-p50-ratio and
// <impl>-p99-ratio for each implementation against etcd-election.
func BenchmarkElectionFailoverFloor(b *testing.B) {
	impls := append(electionImpls[:len(electionImpls):len(electionImpls)],
		namedElection{"floor-record", rawElection(true)},
		namedElection{"floor-read", rawElection(false)},
	)
	for _, n := range candidateCounts {
		b.Run(fmt.Sprintf("candidates=%d", n), func(b *testing.B) {
			lat := interleavedResigns(b, n, impls)
			for i, im := range impls {
				benchrun.ReportLatencies(b, im.name+"-", lat[i])
			}
			for i, im := range impls {
				if im.name == "etcd-election" {
					continue
				}
				for _, p := range []float64{0.50, 0.99} {
					b.ReportMetric(float64(benchrun.Percentile(lat[i], p))/float64(benchrun.Percentile(lat[1], p)), fmt.Sprintf("%s-p%.0f-ratio", im.name, 100*p))
				}
			}
		})
	}
}
