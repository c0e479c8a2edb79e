// Command postgres keeps a bank account in PostgreSQL and changes it only
// inside transactions that passed the lock's Fence, so that a holder whose
// lock was taken away cannot write, however late its write arrives.
//
// It needs a PostgreSQL server. Without one running, start the test
// server in another terminal and pass the URL it prints:
//
//	cd tests && go run ./cmd/pg-dev
//	go run ./examples/postgres -dsn 'postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/postgres"
)

const schema = "ashlock_example"

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *dsn); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	be, err := postgres.New(ctx, pool, postgres.WithSchema(schema))
	if err != nil {
		return err
	}
	defer be.Close()
	// Two clients, as two processes would have.
	alice, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{}, be)
	if err != nil {
		return err
	}
	defer alice.Close(context.Background())
	bob, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{}, be)
	if err != nil {
		return err
	}
	defer bob.Close(context.Background())

	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS `+schema+`.accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO `+schema+`.accounts VALUES (7, 100) ON CONFLICT (id) DO UPDATE SET balance = 100`); err != nil {
		return err
	}
	const key = "account/7"

	a, err := alice.Lock(key).WithOwner("alice").Acquire(ctx)
	if err != nil {
		return err
	}
	aliceToken, _ := a.FencingToken()
	if err := withdraw(ctx, pool, be, key, aliceToken, 30); err != nil {
		return err
	}
	fmt.Printf("alice (token %d) withdrew 30\n", aliceToken)

	// Alice stalls (a long GC pause, a partition) and an operator breaks
	// her lock, as one would in psql. Bob takes it over.
	if _, err := pool.Exec(ctx, `DELETE FROM `+schema+`.claims WHERE key = $1 AND token = $2`, key, int64(aliceToken)); err != nil {
		return err
	}
	b, err := bob.Lock(key).WithOwner("bob").Acquire(ctx)
	if err != nil {
		return err
	}
	defer b.Unlock(ctx)
	bobToken, _ := b.FencingToken()
	if err := withdraw(ctx, pool, be, key, bobToken, 50); err != nil {
		return err
	}
	fmt.Printf("bob (token %d) withdrew 50\n", bobToken)

	// Alice wakes up and sends the write she had prepared, with the token
	// she had: the fence refuses it and her transaction rolls back.
	err = withdraw(ctx, pool, be, key, aliceToken, 30)
	if !errors.Is(err, ashlock.ErrLeaseExpired) {
		return fmt.Errorf("alice's stale write: %v, want it refused", err)
	}
	fmt.Printf("alice (token %d) was refused: %v\n", aliceToken, err)

	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM `+schema+`.accounts WHERE id = 7`).Scan(&balance); err != nil {
		return err
	}
	fmt.Printf("balance: %d\n", balance)
	return nil
}

// withdraw takes amount from account 7 in a transaction that commits only
// if the claim with token still holds key.
func withdraw(ctx context.Context, pool *pgxpool.Pool, be *postgres.Backend, key string, token uint64, amount int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := be.Fence(ctx, tx, key, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+schema+`.accounts SET balance = balance - $1 WHERE id = 7`, amount)
		return err
	})
}
