package storage

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// runHook runs one hook program with the token environment. Its output
// goes to an unlinked temporary file rather than a pipe: a start hook that
// leaves a service running in the background must not hold us until that
// service closes its copy of the pipe. When ctx ends first, the hook's
// whole process group is killed, so nothing it started survives a hook
// that did not finish.
func (m *Manager) runHook(ctx context.Context, action, path string) error {
	if path == "" {
		return nil
	}
	out, err := os.CreateTemp("", "fenced-hook-")
	if err != nil {
		return fmt.Errorf("storage %s hook %s: output file: %w", action, path, err)
	}
	os.Remove(out.Name())
	defer out.Close()

	cmd := exec.CommandContext(ctx, path)
	cmd.Env = m.env(action)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = "/" // never keep the mountpoint busy through our cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	output := m.tail(out)
	log := m.log.With("hook", action, "path", path, "epoch", m.epoch, "took", took)
	if runErr == nil {
		log.Debug("storage hook done", "output", output)
		return nil
	}
	if ctx.Err() != nil {
		runErr = fmt.Errorf("killed with its process group after %v: %w", took.Round(time.Millisecond), context.Cause(ctx))
	}
	log.Warn("storage hook failed", "err", runErr, "output", output)
	if output != "" {
		return fmt.Errorf("storage %s hook %s: %w; output: %s", action, path, runErr, output)
	}
	return fmt.Errorf("storage %s hook %s: %w (no output)", action, path, runErr)
}

// tail returns the last OutputLimit bytes the hook printed, trimmed.
func (m *Manager) tail(f *os.File) string {
	limit := int64(m.OutputLimit)
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off, cut := int64(0), false
	if st.Size() > limit {
		off, cut = st.Size()-limit, true
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, limit))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if cut {
		s = "..." + s
	}
	return s
}
