package ipmi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

// TestMeasureOffVsFenceIpmilan times our off + confirmed read-back against
// Debian's fence_ipmilan --lanplus --cipher 3 -o off, on the same ipmi_sim,
// 10 runs each, and prints the medians. It measures and asserts nothing
// about time; it runs only with FENCED_MEASURE=1 (about 40 s).
func TestMeasureOffVsFenceIpmilan(t *testing.T) {
	if os.Getenv("FENCED_MEASURE") == "" {
		t.Skip("set FENCED_MEASURE=1 to measure")
	}
	if _, err := exec.LookPath("fence_ipmilan"); err != nil {
		t.Fatalf("fence_ipmilan not installed (Debian fence-agents): %v", err)
	}
	const runs = 10
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{KillWait: time.Second})
	a := newAgent(t, simParams(sim.Host, sim.Port, "3"), nil)
	ctx := context.Background()
	powerOn := func() {
		t.Helper()
		if err := a.On(ctx); err != nil {
			t.Fatalf("on: %v", err)
		}
		waitFor(t, "host running", sim.HostRunning)
	}

	var ours, theirs []time.Duration
	for i := 0; i < runs; i++ {
		powerOn()
		start := time.Now()
		if err := a.Off(ctx); err != nil {
			t.Fatalf("our off: %v", err)
		}
		ours = append(ours, time.Since(start))
		if sim.HostRunning() {
			t.Fatal("our off returned with the host alive")
		}

		powerOn()
		cmd := exec.Command("fence_ipmilan")
		// Parameters on stdin, so the password stays out of argv.
		cmd.Stdin = strings.NewReader(fmt.Sprintf("action=off\nip=%s\nipport=%d\nusername=admin\npassword=password\nlanplus=1\ncipher=3\n", sim.Host, sim.Port))
		cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore::DeprecationWarning")
		start = time.Now()
		out, err := cmd.CombinedOutput()
		theirs = append(theirs, time.Since(start))
		if err != nil {
			t.Fatalf("fence_ipmilan off: %v: %s", err, out)
		}
		waitFor(t, "host gone after fence_ipmilan", func() bool { return !sim.HostRunning() })
	}
	mo, mt := median(ours), median(theirs)
	t.Logf("off + confirmed read-back, ipmi_sim cipher 3, %d runs each:", runs)
	t.Logf("  fenced ipmi:   median %v  (runs %v)", mo.Round(time.Millisecond), roundAll(ours))
	t.Logf("  fence_ipmilan: median %v  (runs %v)", mt.Round(time.Millisecond), roundAll(theirs))
	t.Logf("  ratio fence_ipmilan/fenced: %s x", strconv.FormatFloat(float64(mt)/float64(mo), 'f', 1, 64))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func roundAll(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i, v := range d {
		out[i] = v.Round(time.Millisecond)
	}
	return out
}
