// Command redis runs a fenced counter kept in Redis: several clients, each
// with its own LockClient, take turns incrementing one key, and every write
// goes through a script that refuses a token older than the newest one it
// has seen, so a holder that lost its lock (a pause, a deleted lease)
// cannot overwrite a later holder's work.
//
// It needs a Redis 7 server; keyspace notifications let a deleted lease
// reach its holder at once:
//
//	redis-server --port 6379 --notify-keyspace-events Kgx
//	go run ./examples/redis -addr 127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/redis"
)

// fencedIncr is the resource's side of fencing: it adds one to the counter
// only if the caller's token is at least the highest token it has
// accepted, and records that token. KEYS[1] is a hash with fields value
// and fence; ARGV[1] the token. It replies the new value, or -1 when the
// token is stale.
var fencedIncr = goredis.NewScript(`
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local token = tonumber(ARGV[1])
if token < fence then return -1 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return redis.call('HINCRBY', KEYS[1], 'value', 1)
`)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis server host:port")
	workers := flag.Int("workers", 4, "clients incrementing the counter")
	rounds := flag.Int("rounds", 25, "increments per client")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := goredis.NewClient(&goredis.Options{Addr: *addr})
	defer rdb.Close()

	const counter = "example:counter"
	if err := rdb.Del(ctx, counter).Err(); err != nil {
		log.Fatalf("redis at %s: %v", *addr, err)
	}
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			if err := work(ctx, rdb, counter, w, *rounds); err != nil {
				log.Printf("worker %d: %v", w, err)
			}
		})
	}
	wg.Wait()

	n, err := rdb.HGet(ctx, counter, "value").Int()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("counter = %d (want %d)\n", n, *workers**rounds)
}

// work runs one client: its own backend and LockClient over the shared
// Redis client, as separate processes would have.
func work(ctx context.Context, rdb *goredis.Client, counter string, id, rounds int) error {
	be, err := redis.New(ctx, rdb, redis.WithPrefix("example:"))
	if err != nil {
		return err
	}
	defer be.Close()
	client, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 5 * time.Second}, be)
	if err != nil {
		return err
	}
	defer client.Close(ctx)

	lock := client.Lock("counter").WithOwner(fmt.Sprint("worker-", id))
	for range rounds {
		err := lock.Do(ctx, func(ctx context.Context, token uint64) error {
			n, err := fencedIncr.Run(ctx, rdb, []string{counter}, token).Int64()
			if err == nil && n < 0 {
				err = errors.New("token refused by the fence: a later holder has written")
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
