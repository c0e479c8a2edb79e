package main

// Every backend that registers a seed scheme, so that --seed and
// $ASHLOCK_SEED can name any of them.
import (
	_ "github.com/ash-lock/ashlock/backend/postgres" // postgres://, postgresql://
	_ "github.com/ash-lock/ashlock/backend/redis"    // redis://, rediss://
)
