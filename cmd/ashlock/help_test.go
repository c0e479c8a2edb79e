//go:build unix

package main

import (
	"flag"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // text of this help
	}{
		{"--help", []string{"--help"}, toolHelp},
		{"-h", []string{"-h"}, toolHelp},
		{"help", []string{"help"}, toolHelp},
		{"help run", []string{"help", "run"}, runHelp},
		{"run --help", []string{"run", "--help"}, runHelp},
		{"run -h after flags", []string{"run", "--try", "-h"}, runHelp},
		{"help inspect", []string{"help", "inspect"}, inspectHelp},
		{"inspect --help", []string{"inspect", "--help"}, inspectHelp},
		{"help observe", []string{"help", "observe"}, observeHelp},
		{"observe --help", []string{"observe", "--help"}, observeHelp},
		{"observe -h after flags", []string{"observe", "--json", "-h"}, observeHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != 0 {
				t.Errorf("exit code = %d, want 0", code)
			}
			if got := f.stdout.String(); got != tt.want {
				t.Errorf("stdout is not the expected help text:\n%s", got)
			}
			if f.stderr.String() != "" {
				t.Errorf("stderr = %q, want nothing", f.stderr)
			}
		})
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	getenv := func(string) string { return "" }
	tests := []struct {
		name string
		fs   *flag.FlagSet
		help string
	}{
		{"run", new(runOptions).flagSet(getenv), runHelp},
		{"inspect", new(inspectOptions).flagSet(getenv), inspectHelp},
		{"observe", new(observeOptions).flagSet(getenv), observeHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fs.VisitAll(func(fl *flag.Flag) {
				if !strings.Contains(tt.help, "\n  --"+fl.Name+" ") && !strings.Contains(tt.help, "\n  --"+fl.Name+"\n") {
					t.Errorf("help does not list --%s", fl.Name)
				}
			})
		})
	}
}

func TestRunHelpDocumentsEveryExitCode(t *testing.T) {
	for _, code := range []string{"64", "69", "70", "75", "76", "126", "127", "N"} {
		if !strings.Contains(runHelp, "\n  "+code+" ") {
			t.Errorf("run help does not document exit code %s", code)
		}
	}
	for _, want := range []string{"ASHLOCK_KEY", "ASHLOCK_FENCING_TOKEN", "ASHLOCK_DEADLINE", "ASHLOCK_PERMIT", "ASHLOCK_SEED", "128+S",
		"*/5 * * * * ashlock run", "0 * * * * ashlock run --seed etcd://10.0.0.1:2379/ --permits 3 --try backups -- /usr/local/bin/backup\n"} {
		if !strings.Contains(runHelp, want) {
			t.Errorf("run help does not mention %s", want)
		}
	}
}

// The tool's help lists every command, and observe's help documents its
// exit codes and its output's fields.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, cmd := range []string{"run", "inspect", "observe"} {
		if !strings.Contains(toolHelp, "\n  ashlock "+cmd+" [flags] KEY") {
			t.Errorf("tool help does not list %s", cmd)
		}
	}
	for _, code := range []string{"0", "64", "69", "70"} {
		if !strings.Contains(observeHelp, "\n  "+code+" ") {
			t.Errorf("observe help does not document exit code %s", code)
		}
	}
	for _, field := range []string{"name", "leader", "owner", "token", "value", "since", "observed_at"} {
		if !strings.Contains(observeHelp, " "+field) {
			t.Errorf("observe help does not mention the JSON field %s", field)
		}
	}
}

func TestDispatchUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"lock"}, `unknown command "lock"`},
		{"help for an unknown command", []string{"help", "lock"}, `unknown command "lock"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if code := f.run(tt.args...); code != exitUsage {
				t.Errorf("exit code = %d, want %d", code, exitUsage)
			}
			if !strings.Contains(f.stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want %q", f.stderr, tt.want)
			}
		})
	}
}
