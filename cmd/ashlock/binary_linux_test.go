package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestBinaryCommandDoesNotOutliveAshlock(t *testing.T) {
	cmd, lines := startBinary(t, "run", "job", "--", "sh", "-c", `echo pid=$$; exec sleep 60`)
	pid, err := strconv.Atoi(strings.TrimPrefix(nextLine(t, lines, "pid="), "pid="))
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != -1 {
		t.Errorf("ashlock exit code = %d, want -1 (killed)", code)
	}
	eventually(t, "the command to die with ashlock", func() bool { return processGone(pid) })
}

// converse reads the terminal master until every process has closed it
// (EIO), typing "hello" once after the terminal has shown prompt, and
// returns everything it showed.
func converse(t *testing.T, master *os.File, prompt string) []byte {
	t.Helper()
	if err := master.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	buf := make([]byte, 256)
	for {
		n, err := master.Read(buf)
		all.Write(buf[:n])
		if bytes.Contains(all.Bytes(), []byte(prompt)) && !bytes.Contains(all.Bytes(), []byte("hello")) {
			master.Write([]byte("hello\n"))
		}
		if err != nil { // EIO once every process has closed the terminal
			return all.Bytes()
		}
	}
}

// openPTY opens a new pseudo-terminal and returns its master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	raw, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var errno syscall.Errno
	err = raw.Control(func(fd uintptr) {
		var unlock int32
		if _, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
			return
		}
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n)))
	})
	if err != nil || errno != 0 {
		t.Fatalf("setting up the pty: %v %v", err, errno)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// TestBinaryGivesTheCommandTheTerminal runs ashlock as the session leader
// of a pseudo-terminal, as a login shell would, and has the command read a
// line from the terminal. Were the command left in a background group, the
// read would stop it (SIGTTIN) and the test would time out.
func TestBinaryGivesTheCommandTheTerminal(t *testing.T) {
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "job", "--", "sh", "-c",
		`echo prompt; read line; echo "got:$line"; exit 5`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // ours; the terminal now lives as long as ashlock's copies

	got := converse(t, master, "prompt")
	if code := waitExit(t, cmd); code != 5 {
		t.Errorf("exit code = %d, want 5 (the command's); terminal showed %q", code, got)
	}
	if !bytes.Contains(got, []byte("got:hello")) {
		t.Errorf("terminal showed %q, want the command to have read the line", got)
	}
}

// A command that cannot be executed after ashlock forked it (here a script
// whose interpreter does not exist) leaves the terminal to the shell that
// ran ashlock: the child had already been made the terminal's foreground
// group when its exec failed, and ashlock takes the terminal back.
func TestBinaryGivesTheTerminalBackWhenTheCommandCannotStart(t *testing.T) {
	script := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(script, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c",
		`"$0" run job -- "$1"; echo "rc=$?"; read line; echo "got:$line"`, binary, script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()

	got := converse(t, master, "rc=")
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("the shell's exit code = %d, want 0; terminal showed %q", code, got)
	}
	if !bytes.Contains(got, []byte("rc=127")) || !bytes.Contains(got, []byte("got:hello")) {
		t.Errorf("terminal showed %q, want ashlock's exit 127 and then the shell reading the line", got)
	}
}

// A signal forwarded to a command whose group is stopped (Ctrl-Z, SIGTTIN,
// SIGSTOP) still ends it: ashlock sends SIGCONT after it, as a shell does,
// instead of holding the lock for ever behind a signal left pending.
func TestBinaryForwardedSignalReachesAStoppedCommand(t *testing.T) {
	cmd, lines := startBinary(t, "run", "job", "--", "sh", "-c", `echo pid=$$; sleep 60 </dev/null >/dev/null 2>&1 & wait`)
	pid, err := strconv.Atoi(strings.TrimPrefix(nextLine(t, lines, "pid="), "pid="))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGTERM) {
		t.Errorf("ashlock exit code = %d, want %d (the command's, ended by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
}
