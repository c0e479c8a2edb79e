package chaos

import "time"

// memberTimeout bounds a member's start and restart, and how long a route
// waits for its proxy. The cluster itself is tests/etcdtest's, with its
// Partition and Leader.
const memberTimeout = 30 * time.Second
