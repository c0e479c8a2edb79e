package pgbackend_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// examples/postgres runs against a real server and shows the stale
// holder's write refused, with the balance it implies.
func TestExamplePostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./examples/postgres", "-dsn", shared.URL(database(t)))
	cmd.Dir = "../.." // the library module
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/postgres: %v\n%s", err, out)
	}
	for _, want := range []string{"withdrew 30", "withdrew 50", "was refused", "balance: 20"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
