package redis

import (
	"context"
	"fmt"
	"strconv"
)

// stampIt calls the request's Stamp with the highest stamp of the keys and
// records the result, compared on the claim's identity.
func (a *acquisition) stampIt(ctx context.Context) error {
	st, err := a.req.Stamp(a.prevStamp)
	if err != nil {
		return fmt.Errorf("redis acquire %q: stamp: %w", a.req.Key, err)
	}
	args := make([]any, 0, 5+len(a.keys))
	args = append(args, a.b.lay.tag, a.req.ID, strconv.FormatUint(a.token, 10), formatStamp(st), len(a.keys))
	for _, k := range a.keys {
		args = append(args, k)
	}
	ok, err := stampScript.Run(ctx, a.b.c, []string{a.b.lay.token()}, args...).Int64()
	if err != nil {
		return a.b.fail(ctx, "acquire", err)
	}
	if ok != 1 {
		return a.lostError()
	}
	a.stamp = st
	return nil
}
