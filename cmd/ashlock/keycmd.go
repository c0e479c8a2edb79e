//go:build unix

package main

import "flag"

// keyOptions is a parsed invocation of a command that reads one KEY and
// may print JSON: inspect and observe.
type keyOptions struct {
	commonFlags
	json bool
	key  string
}

// flags returns the flags of command cmd, bound to o's fields.
func (o *keyOptions) flags(cmd, jsonUsage string, getenv func(string) string) *flag.FlagSet {
	fs := newFlagSet(cmd)
	o.register(fs, getenv)
	fs.BoolVar(&o.json, "json", false, jsonUsage)
	return fs
}

// parse parses the arguments of command cmd with fs as parseRun does: the
// flags, then exactly one KEY. It returns done == true, with the exit
// code, when ashlock should stop here (help printed, or a usage error
// reported).
func (o *keyOptions) parse(fs *flag.FlagSet, cmd, help string, args []string, e *env) (code int, done bool) {
	if code, done := parseFlags(fs, cmd, help, args, e); done {
		return code, true
	}
	switch fs.NArg() {
	case 0:
		return e.usageError(cmd, "missing KEY"), true
	case 1:
	default:
		return e.usageError(cmd, "want one KEY, got %d arguments (flags go before KEY)", fs.NArg()), true
	}
	o.key = fs.Arg(0)
	if err := o.validate(); err != nil {
		return e.usageError(cmd, "%v", err), true
	}
	return 0, false
}
