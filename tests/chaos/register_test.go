package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The register of workload (a) is a counter kept at one etcd key. Holders
// read and write it only in a Txn guarded by their lock's ownership
// comparison (etcd.Backend.IsOwner for ashlock guards), so a read or write
// takes effect only while the holder's claim still holds the key. Each
// value carries a unique tag naming the write, so that writes whose answer
// was lost can be found in etcd's history afterwards.

const initTag = "init"

func encodeRegister(value int64, tag string) string {
	return strconv.FormatInt(value, 10) + " " + tag
}

func decodeRegister(s string) (int64, string, error) {
	num, tag, ok := strings.Cut(s, " ")
	if !ok {
		return 0, "", fmt.Errorf("register value %q has no tag", s)
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("register value %q: %w", s, err)
	}
	return v, tag, nil
}

// initRegister sets the register to 0 and returns the revision of that
// write, where its history starts.
func initRegister(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	resp, err := cli.Put(ctx, key, encodeRegister(0, initTag))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// alwaysHolds is a comparison that holds whoever makes it: the register
// exists from initRegister on. A Txn guarded by it is unguarded.
func alwaysHolds(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
}

// registerRead reads the register if owns holds. An error is an unknown
// outcome.
func registerRead(ctx context.Context, cli *clientv3.Client, key string, owns clientv3.Cmp) (int64, status) {
	resp, err := cli.Txn(ctx).If(owns).Then(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, statusUnknown
	}
	if !resp.Succeeded {
		return 0, statusStale
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, statusUnknown
	}
	v, _, err := decodeRegister(string(kvs[0].Value))
	if err != nil {
		return 0, statusUnknown
	}
	return v, statusOK
}

// registerWrite writes value with tag if owns holds.
func registerWrite(ctx context.Context, cli *clientv3.Client, key string, owns clientv3.Cmp, value int64, tag string) status {
	resp, err := cli.Txn(ctx).If(owns).Then(clientv3.OpPut(key, encodeRegister(value, tag))).Commit()
	if err != nil {
		return statusUnknown
	}
	if !resp.Succeeded {
		return statusStale
	}
	return statusOK
}

// registerRecord returns every write applied to the register since
// revision from, in etcd's order, leaving out the initial one. It marks
// the end of the history with a put to a sentinel key that the same watch
// covers, so it knows when it has seen everything.
func registerRecord(ctx context.Context, cli *clientv3.Client, key string, from int64) ([]applied, error) {
	sentinel := key + "~end"
	if _, err := cli.Put(ctx, sentinel, ""); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []applied
	for wr := range cli.Watch(wctx, key, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return nil, err
		}
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			if k == sentinel {
				return out, nil
			}
			if k != key || ev.Type != mvccpb.PUT {
				continue
			}
			v, tag, err := decodeRegister(string(ev.Kv.Value))
			if err != nil {
				return nil, err
			}
			if tag != initTag {
				out = append(out, applied{value: v, tag: tag})
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("register history watch ended early")
}
